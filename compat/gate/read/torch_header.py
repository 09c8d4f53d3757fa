"""Read a ``torch.save`` file's structure without loading tensors: the zip directory and ``data.pkl`` only.

``torch.save`` writes a zip archive: ``<name>/data.pkl`` (a pickle whose tensors refer to storages by key)
and one ``<name>/data/<key>`` entry per storage. This reader unpickles ``data.pkl`` with an allow-list of
exactly the globals ``torch.save`` emits for plain tensors (``torch._utils._rebuild_tensor_v2``, typed
storage classes, ``collections.OrderedDict``), turning each tensor into a ``TensorStub`` (dtype, shape, and
where its elements lie), and checks each storage entry is present and large enough. Another global or a file
that is no zip archive raises ``NotPlain``, and the caller falls back to ``torch.load(weights_only=True)``,
the authority on what loads. Costs about a tenth of ``torch.load(mmap=True)`` per small file.

The archive is hostile until checked: ``compat.gate.read.zip_archive`` checks its directory against the file
before anything is read. ``refuse_shared`` refuses an object that reaches one container twice.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from operator import mul
from typing import Any

from compat.gate.read.tensors import ITEMSIZE
from compat.gate.read.zip_archive import (
    ArchiveRefused,
    Directory,
    DirectoryMismatch,
    MemberStream,
    NotPlain,
    read_directory,
)

# torch's typed-storage class names (what torch.save pickles) -> dtype names.
_STORAGES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool",
}

MAX_PICKLE = 4 << 20
"""``data.pkl`` is read and unpickled whole: a tensor costs about 80 bytes of it, so 4 MiB describes some 50,000
tensors (8,000 speculators samples in one file). Unpickling makes at most about 80 bytes of objects per pickle
byte (an empty list or dict per opcode byte), so at most about 320 MiB whatever the pickle holds; sets, which
make 240, are refused in a pickle over ``_SMALL_PICKLE``."""
_SMALL_PICKLE = 64 << 10

_HUGE = 1 << 62


class OversizedPickle(ArchiveRefused):
    """``data.pkl`` is larger than ``MAX_PICKLE``, or holds what a pickle of plain tensors never does."""


class SharedContainer(ArchiveRefused):
    """The stored object reaches one container twice."""

# StorageRef and TensorStub are built once per storage and tensor of every file read: not frozen, which would
# cost a microsecond per object on the header's hot path. Nothing changes them after the unpickler made them.
@dataclass(slots=True)
class StorageRef:
    """A storage as the pickle names it: its member is ``data/<key>``, of ``numel`` elements of ``dtype``."""

    dtype: str
    key: str
    numel: int

    @property
    def nbytes(self) -> int:
        return self.numel * ITEMSIZE[self.dtype]

    def __setstate__(self, _state) -> None:
        _refuse_build()


@dataclass(slots=True)
class TensorStub:
    """Stands for a tensor: what ``samples`` reads of one (``shape``, ``dtype``) and where its elements lie."""

    dtype: str
    shape: tuple[int, ...]
    storage: StorageRef
    offset: int
    stride: tuple[int, ...]

    @property
    def contiguous(self) -> bool:
        """Rows follow each other in the storage (the only layout ``torch.save`` of ``.contiguous()`` writes)."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def __setstate__(self, _state) -> None:
        _refuse_build()


def _refuse_build() -> None:
    """Pickle's BUILD on what the reader made: it would set a stub's shape, offset or storage after
    ``_rebuild_tensor_v2`` checked them (torch sets such state aside, as an attribute of the tensor). Not a
    plain pickle: torch.load decides, and the gate reads what it loads."""
    raise NotPlain("the pickle sets state on a tensor or storage after building it (BUILD)")



class _StorageType:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __setstate__(self, _state) -> None:
        _refuse_build()


def _rebuild_tensor_v2(storage, offset, size, stride, *_rest) -> TensorStub:
    if not isinstance(storage, StorageRef):
        raise NotPlain("tensor without a storage reference")
    shape, strides = tuple(map(int, size)), tuple(map(int, stride))
    # Numbers past 2**62 (pickle ints have no bound) would only make the arithmetic below slow; torch refuses
    # them, and negative strides, when it reads values. The 0 appended stands for an empty shape's bound: min and
    # max with a keyword cost twice as much, and this runs for every tensor of every file read.
    if len(strides) != len(shape) or not 0 <= offset < _HUGE or min(shape + (0,)) < 0 or \
            max(shape + strides + (0,)) >= _HUGE:
        raise NotPlain("tensor view with a negative or huge size, stride or offset")
    # The furthest element the view reaches must lie inside its storage: offset + the sum of (d - 1) * s, summed
    # by map in C.
    last = offset + sum(map(mul, shape, strides)) - sum(strides) if 0 not in shape else offset - 1
    if last >= storage.numel:
        raise NotPlain(f"tensor view reaches element {last} of a {storage.numel}-element storage")
    return TensorStub(f"torch.{storage.dtype}", shape, storage, offset, strides)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes | bytearray) -> None:
        # A reader with ``peek``, which the C unpickler prefetches from: over a bare BytesIO it calls ``read``
        # for every opcode, which made unpickling a small sample's pickle cost two and a half times as much.
        super().__init__(io.BufferedReader(io.BytesIO(data), buffer_size=max(len(data), 1)))
        self.storages: dict[str, StorageRef] = {}

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch" and name in _STORAGES:
            return _StorageType(_STORAGES[name])
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise NotPlain(f"global {module}.{name} is not a plain tensor's")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise NotPlain(f"unexpected persistent id {pid!r:.80}")
        key, numel = str(pid[2]), int(pid[4])
        known = self.storages.get(key)
        if known is None and numel >= 0:
            known = self.storages[key] = StorageRef(pid[1].dtype, key, numel)
        elif known is None or (known.dtype, known.numel) != (pid[1].dtype, numel):
            raise NotPlain(f"storage {key} of {numel} {pid[1].dtype} elements (named before as {known})")
        return known


@dataclass(frozen=True)
class Archive:
    """A checked directory, and its ``data.pkl`` (at most ``MAX_PICKLE`` bytes, read exactly)."""

    directory: Directory
    prefix: str
    """``<name>/``: storages are ``<prefix>data/<key>``."""
    pickle: bytes | bytearray


def read_archive(path: str, directory: Directory | None = None) -> Archive:
    """The checked directory (``directory`` when already read) and ``data.pkl``; NotPlain when the file is no
    zip archive or holds no ``data.pkl``, ArchiveRefused when hostile."""
    directory = directory or read_directory(path)
    name = next((n for n in directory.members if n.endswith("/data.pkl") and n.count("/") == 1), None)
    if name is None:
        raise NotPlain("no data.pkl in the archive")
    member = directory.members[name]
    if member.size > MAX_PICKLE:
        raise OversizedPickle(f"its data.pkl declares {member.size} bytes, over the {MAX_PICKLE}-byte limit")
    data = MemberStream(directory, member).read(0, member.size)
    if zlib.crc32(data) != member.crc:
        raise DirectoryMismatch(f"its data.pkl does not match the CRC its directory declares ({member.size} bytes)")
    if len(data) > _SMALL_PICKLE and (b"\x8f" in data or b"\x91" in data):
        _refuse_sets(data)
    return Archive(directory, name[:-len("data.pkl")], data)


def _refuse_sets(data: bytes | bytearray) -> None:
    """Sets cost three times a list per pickle byte, and plain tensors' pickles never hold one."""
    try:
        names = {op.name for op, _, _ in pickletools.genops(data)}
    except ValueError as exc:
        raise NotPlain(f"pickle: {exc}") from exc
    found = names & {"EMPTY_SET", "FROZENSET", "ADDITEMS"}
    if found:
        raise OversizedPickle(f"its {len(data)}-byte data.pkl builds sets ({', '.join(sorted(found))}), which no "
                              "torch.save of tensors, lists and dicts writes")


def read_stubs(archive: Archive):
    """The object the archive's pickle stores, with a ``TensorStub`` for each tensor; raises NotPlain when it
    needs more than plain tensors, SharedContainer when it reaches one container twice (``refuse_shared``), and
    DirectoryMismatch when a storage's member is shorter than its tensors.

    A small pickle is unpickled once per distinct content (``_unpickled_before``): a dataset's files of one token
    count hold the same pickle byte for byte (what differs, the tensors' data and their CRCs, lies in the other
    members), and the stubs are never changed once made, so the files share them. Each file's storages are
    still checked against its own directory."""
    data = archive.pickle
    if len(data) <= MEMO_PICKLE:
        obj, storages = _unpickled_before(bytes(data))
    else:
        obj, storages = _unpickled(data)
    members = archive.directory.members
    for storage in storages:
        member = members.get(f"{archive.prefix}data/{storage.key}")
        if member is None:
            raise NotPlain(f"storage {storage.key} missing")
        if member.size < storage.nbytes:
            raise DirectoryMismatch(f"storage {storage.key} holds {storage.numel} {storage.dtype} elements "
                                    f"({storage.nbytes} bytes) by the pickle but its member {member.size} bytes")
    return obj


def _unpickled(data: bytes | bytearray) -> tuple[Any, tuple[StorageRef, ...]]:
    """The pickle's object with stubs (checked by ``refuse_shared``) and the storages it names."""
    unpickler = _Unpickler(data)
    try:
        obj = unpickler.load()
    except (EOFError, pickle.UnpicklingError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise NotPlain(f"{type(exc).__name__}: {exc}") from exc
    refuse_shared(obj)
    return obj, tuple(unpickler.storages.values())


MEMO_PICKLE = 4 << 10
"""Pickles up to this size are unpickled once per content (a speculators sample's is about 500 bytes; one of 32
layers about 2 KB). With ``_MEMO_ENTRIES`` entries the memo holds at most 1 MiB of pickles, and the objects they
make, at most some 80 bytes per pickle byte, at most about 80 MiB whatever the files hold; a few KB in a real
dataset's."""
_MEMO_ENTRIES = 256
_unpickled_before = lru_cache(maxsize=_MEMO_ENTRIES)(_unpickled)
"""Raises as ``_unpickled`` does (a failure is not kept: the file is read again, as a hostile file should be)."""


def read_structure(path: str):
    """The object ``torch.save`` stored, with ``TensorStub`` for each tensor; raises NotPlain otherwise."""
    return read_stubs(read_archive(path))

_CONTAINERS = (dict, list, tuple, set, frozenset)
_SCALARS = frozenset({int, float, complex, bool, str, bytes, type(None)})


def refuse_shared(obj) -> None:
    """Raise ``SharedContainer`` when ``obj`` reaches one dict, list, set or tuple twice.

    ``torch.save`` of distinct samples never shares a container (pickle keeps each object once and refers back
    to it), so one reached twice is a pickle built to multiply the reader's work: 5000 references to one sample
    holding 1000 references to one tensor would be 5,000,000 layers from 25 KB. The walk visits each object
    once, so it costs what the pickle's bytes do. A tensor reached twice (a duplicated layer) is allowed: the
    value rules judge it; so is a tuple of plain values (a constant, which Python itself shares), which no reader
    walks.
    """
    seen: dict[int, tuple] = {id(obj): ()}
    scalar_tuples: set[int] = set()
    stack: list[tuple[dict | list | tuple | set | frozenset, tuple]] = (
        [(obj, ())] if isinstance(obj, _CONTAINERS) else [])
    while stack:  # each container is marked when first reached, so the first reach is the first in order
        node, path = stack.pop()
        if isinstance(node, dict):
            keys = [(("key", i), key) for i, key in enumerate(node) if isinstance(key, (tuple, frozenset))]
            children: Iterable[tuple[object, object]] = [*keys, *node.items()] if keys else node.items()
        else:
            children = enumerate(node) if isinstance(node, (list, tuple)) else (("member", v) for v in node)
        for step, child in children:
            if not isinstance(child, _CONTAINERS):
                continue
            if isinstance(child, (tuple, frozenset)):
                if id(child) in scalar_tuples:
                    continue
                if all(type(value) in _SCALARS for value in child):
                    scalar_tuples.add(id(child))
                    continue
            where = (path, step)
            first = seen.setdefault(id(child), where)
            if first is not where:
                raise SharedContainer(f"the stored object reaches one {type(child).__name__} of {len(child)} items "
                                      f"at {_where(first)} and again at {_where(where)}: torch.save of distinct "
                                      "samples never shares a container, and reading it once per reference would "
                                      "multiply the work")
            stack.append((child, where))


def _where(path: tuple) -> str:
    steps = []
    while path:
        path, step = path
        steps.append(f"[{step!r:.40}]")
    return "".join(reversed(steps))[-100:] or "the top"
