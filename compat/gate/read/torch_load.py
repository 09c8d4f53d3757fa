"""Loading ``torch.save`` files without unpickling arbitrary objects, and without trusting what their archive
claims (``torch_header`` checks it first): the structure when it is plain tensors, else
``torch.load(weights_only=True)`` of the checked archive; tensor values read (stored archive) or inflated
(deflated) on demand, the rows asked and never past what the pickle says a storage needs (``open_values``)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from math import prod
from typing import Any

from compat.gate.read.paths import openable
from compat.gate.read.source import is_url, open_remote
from compat.gate.read.tensors import ITEMSIZE
from compat.gate.read.torch_header import Archive, StorageRef, TensorStub, read_archive, read_stubs, refuse_shared
from compat.gate.read.zip_archive import (
    Directory,
    FormatError,
    MemberStream,
    NotPlain,
    ZipBomb,
    inflation_limit,
    read_directory,
)

INFLATION_BUDGET = 4
"""Reading a deflated archive's values may inflate at most this many times its ``inflation_limit``: a storage
is inflated about once when its tensors are read in order, so only views built to make the reader start a
storage over and over reach it."""


def load_torch(path: str) -> Any:
    """``torch.load`` that never unpickles arbitrary objects, and maps (does not read) tensor data."""
    try:
        return _weights_only(path, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc):
            raise
        # Legacy (pre-zip) torch.save files cannot be memory-mapped; they are small enough to read.
        return _weights_only(path)


def _load_inflating(path: str) -> Any:
    """``torch.load`` of a checked deflated archive: memory-mapping would read compressed bytes as values, so
    torch inflates every storage, together no more than the ``inflation_limit`` the directory was held to."""
    return _weights_only(path)


def _weights_only(path: str, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)`` of ``path`` (whatever bytes its name holds). A refusal keeps its type and
    traceback, but its text becomes the gate's (``_refusal``): torch's advises loading with
    ``weights_only=False``, which would run the code of the very file the gate refused."""
    import torch

    with openable(path) as name:
        try:
            return torch.load(name, map_location="cpu", weights_only=True, mmap=mmap)
        except Exception as exc:
            refusal = _refusal(str(exc))
            if refusal is not None:
                exc.args = (refusal,)
            raise


_REFUSED = "refused to unpickle it: "
_GLOBAL = re.compile(r"GLOBAL (\S+?)(?: was not an allowed global| whose module \S+ is blocked)")
_ADVICE = ("`False`", "trust", "safe_globals", "recommended steps", "documentation of torch.load")
"""Words of the sentences of torch's advice: to load with ``weights_only=False``, or to allow-list the global."""


def _refusal(text: str) -> str | None:
    """What torch.load refused, without its advice; None for a text that is no refusal."""
    found = _GLOBAL.search(text)
    if found:
        return (f"{_REFUSED}Unsupported global: GLOBAL {found[1]}, which no tensor needs: the pickle would call "
                "it (run code) when loaded")
    if "WeightsUnpickler error:" not in text and not any(words in text for words in _ADVICE):
        return None
    said = " ".join(text.rsplit("WeightsUnpickler error:", 1)[-1].split())
    kept = [s for s in re.split(r"(?<=\.) ", said) if not any(words in s for words in _ADVICE)]
    return _REFUSED + (" ".join(kept) or "torch gave no reason")


def load_structure(path: str) -> tuple[Any, bool]:
    """The stored object, and whether it is the stubs of the checked archive's pickle (fast; shared by every file
    whose pickle is the same, so never to be changed: ``read_stubs``) rather than torch.load's answer.

    Raises ``FormatError`` for a file that is neither a zip archive nor a pickle stream, and its subclass
    ``ArchiveRefused`` for an archive whose directory lies or declares too much, or an object that reaches one
    container twice.
    """
    try:
        archive = read_archive(path)
    except NotPlain:
        archive = None  # no zip archive, or no data.pkl in it: torch.load says what it is
    obj = _stubs(archive)
    if obj is not None:
        return obj, True  # refuse_shared ran on it when it was unpickled
    obj = _load_checked(path, archive)
    refuse_shared(obj)
    return obj, False


def _stubs(archive: Archive | None) -> Any:
    """The archive's object with tensor stubs; None when it holds more than plain tensors. The last archive's
    is kept: the gate reads a file's values right after its structure, and unpickling again would cost a fifth
    of reading a small sample's values (``read_directory`` gives the same directory while the file is unchanged)."""
    global _last_stubs
    if archive is None:
        return None
    if _last_stubs is not None and _last_stubs[0] is archive.directory:
        return _last_stubs[1]
    try:
        obj = read_stubs(archive)
    except NotPlain:
        obj = None  # not plain tensors: torch.load (weights only) decides, and says why not
    _last_stubs = (archive.directory, obj)
    return obj

_last_stubs: tuple[Directory, Any] | None = None


def _load_checked(path: str, archive: Archive | None) -> Any:
    if archive is None:
        if "://" in path and is_url(path):
            remote = open_remote(path)
            magic, size = remote.read(0, 4), remote.size
        else:
            with open(path, "rb") as handle:
                magic = handle.read(4)
                size = os.fstat(handle.fileno()).st_size
        if magic[:2] != b"PK" and magic[:1] != b"\x80":
            # torch.save writes a zip archive (or, before 1.6, a pickle stream): anything else is another format.
            raise FormatError(f"not a torch.save file (a zip archive or pickle stream): it starts with {magic!r}")
        if magic == b"PK\x03\x04" and _cut_short(path):
            # torch.load would say "failed finding central directory", or fail to open it (EINVAL).
            raise FormatError(f"truncated: {size} bytes of a zip archive whose end, the central directory that "
                              "lists its members, is missing (a write or copy cut short)")
    if archive is None or archive.directory.stored:
        return load_torch(path)
    return _load_inflating(path)


def _cut_short(path: str) -> bool:
    """A file that begins as a zip archive but has no end record: the end of what torch.save wrote is missing."""
    try:
        read_directory(path)
    except NotPlain:
        return True
    return False


def load_error(exc: Exception) -> str:
    """The informative sentence of torch.load's long error texts."""
    text = str(exc)
    if text.startswith(_REFUSED):
        return f"torch.load(weights_only=True) {text}"
    first = " ".join(text.split()).split(". ")[0][:240] or "(no message)"
    return f"torch.load(weights_only=True) failed: {first}"


@contextmanager
def open_values(path: str) -> Iterator[Any]:
    """The stored object with tensors whose values can be read: ``InflatedTensor``s that read (stored archive,
    what ``torch.save`` writes) or inflate (deflated) only the rows asked for, where the pickle holds plain
    tensors; else torch.load's, memory-mapped from a stored archive. The file's structure was read first
    (``load_structure``); its directory is checked again unless unchanged since, and raises as it did."""
    try:
        directory = read_directory(path)
    except NotPlain:
        yield load_torch(path)  # a legacy (pre-zip) file, or none: torch.load says which
        return
    archive = read_archive(path, directory)
    obj = _stubs(archive)
    if obj is not None and _native_byte_order(archive) and (not directory.stored or _contiguous(obj)):
        yield _inflated(obj, _Inflater(archive))
    elif directory.stored:
        yield load_torch(path)  # views into shared storages: mapped, not read whole
    else:
        obj = _load_inflating(path)
        refuse_shared(obj)
        yield obj


def _contiguous(obj: Any, depth: int = 0) -> bool:
    """Every tensor a sample can hold (as ``_inflated`` reaches them) lies row after row in its storage."""
    if isinstance(obj, TensorStub):
        return obj.contiguous
    if depth >= 3:
        return True
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return all(_contiguous(value, depth + 1) for value in values)


def _native_byte_order(archive: Archive) -> bool:
    member = archive.directory.members.get(f"{archive.prefix}byteorder")
    if member is None:
        return sys.byteorder == "little"  # what torch assumes of an archive that does not say
    return member.size < 8 and bytes(MemberStream(archive.directory, member).read(0, member.size)) == \
        sys.byteorder.encode()


def _inflated(obj: Any, inflater: _Inflater, depth: int = 0) -> Any:
    """``obj`` with each ``TensorStub`` a sample can hold (a file's list, a sample's dict, a layer list) made an
    ``InflatedTensor``."""
    if isinstance(obj, TensorStub):
        return InflatedTensor(obj, inflater)
    if depth >= 3:
        return obj
    if isinstance(obj, dict):
        return {key: _inflated(value, inflater, depth + 1) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_inflated(value, inflater, depth + 1) for value in obj]
    return obj


class _Inflater:
    """The storages of one archive, read (inflated when deflated) for its ``InflatedTensor``s within one budget
    of bytes. It keeps at most ``_STREAMS`` streams (each a 32 KiB window and a read of compressed bytes), the
    last block read (parts of one row range are asked one after another) and the last storage inflated whole."""

    _STREAMS = 64

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self.budget = INFLATION_BUDGET * inflation_limit(archive.directory.file_size)
        self.spent = 0
        self._streams: dict[int, MemberStream] = {}  # by tensor, oldest first
        self._block: tuple[tuple, Any] | None = None
        self._whole: tuple[str, Any] | None = None

    def rows(self, tensor: InflatedTensor, begin: int, end: int, numpy: bool, make):
        """``make(bytes)`` of bytes ``begin:end`` of ``tensor``'s storage, read forward by its own stream (``numpy``:
        ``make`` makes a numpy array, not a torch tensor)."""
        key = (id(tensor), begin, end, numpy)
        if self._block is not None and self._block[0] == key:
            return self._block[1]
        self._block = None
        stream = self._streams.pop(id(tensor), None) or self._stream(tensor.stub.storage)
        self._streams[id(tensor)] = stream
        if len(self._streams) > self._STREAMS:
            del self._streams[next(iter(self._streams))]
        self._block = (key, make(self._read(stream, begin, end)))
        return self._block[1]

    def whole(self, storage: StorageRef):
        """The storage's bytes as a uint8 tensor (the last one asked for is kept)."""
        import torch

        if self._whole is None or self._whole[0] != storage.key:
            self._whole = None  # let the previous storage go before the next is built
            data = self._read(self._stream(storage), 0, storage.nbytes)
            self._whole = (storage.key, torch.frombuffer(data, dtype=torch.uint8) if data else
                           torch.empty(0, dtype=torch.uint8))
        return self._whole[1]

    def _stream(self, storage: StorageRef) -> MemberStream:
        directory = self.archive.directory
        return MemberStream(directory, directory.members[f"{self.archive.prefix}data/{storage.key}"])

    def _read(self, stream: MemberStream, begin: int, end: int) -> bytearray:
        before = stream.spent
        data = stream.read(begin, end)
        self.spent += stream.spent - before
        if self.spent > self.budget:
            raise ZipBomb(f"reading its tensors inflated over {self.budget} bytes ({INFLATION_BUDGET}x its inflation "
                          "limit): views that make the reader inflate their storages again and again")
        return data if isinstance(data, bytearray) else bytearray(data)


class InflatedTensor:
    """A tensor of an archive, read on demand. Rows ``a:b`` of a contiguous tensor (what ``torch.save`` of
    ``.contiguous()`` writes) are read alone from a stored member; from a deflated one its storage is inflated
    only up to them, continuing where the last read stopped, so a sample read in order is inflated once. Either
    way it never sits in memory whole (of a single row, only the columns asked for); other views (of a deflated
    archive) inflate their storage whole. ``tensor[rows, ...]`` and ``tensor[:]`` are what the value reader asks."""

    def __init__(self, stub: TensorStub, inflater: _Inflater) -> None:
        self.stub = stub
        self.shape = stub.shape
        self._inflater = inflater

    @property
    def dtype(self):
        import torch

        return getattr(torch, self.stub.storage.dtype)

    def __getitem__(self, index):
        """``index`` of the tensor, a torch tensor."""
        return self._get(index, False)

    def array(self, index):
        """``index`` of the tensor, a numpy array of its dtype's storage (``arrays.STORAGE``)."""
        return self._get(index, True)

    def _get(self, index, numpy: bool):
        rows, rest = (index[0], index[1:]) if isinstance(index, tuple) else (index, ())
        if not (self.stub.contiguous and self.shape and _forward(rows)):
            storage = self._inflater.whole(self.stub.storage).view(self.dtype)
            got = storage.as_strided(self.shape, self.stub.stride, self.stub.offset)[index]
            if numpy:
                from compat.gate.read.arrays import from_torch

                return from_torch(got)
            return got  # views of a deflated archive only: torch reads them
        start, stop, _ = rows.indices(self.shape[0])
        stop = max(start, stop)
        width = self.shape[1] if len(self.shape) > 1 else 1
        lo, hi = 0, width
        if stop - start == 1 and len(self.shape) > 1 and rest and _forward(rest[0]):
            lo, hi, _ = rest[0].indices(width)  # one row: only the columns asked for
            hi = max(lo, hi)
            rest = (slice(None), *rest[1:])
        block = self._read(start, stop, lo, hi, numpy)
        return block[(slice(None), *rest)] if rest else block

    def _read(self, start: int, stop: int, lo: int, hi: int, numpy: bool):
        """Rows ``start:stop`` (of a single row, its elements ``lo:hi`` along the second dimension)."""
        inner = prod(self.shape[2:])
        width = self.shape[1] if len(self.shape) > 1 else 1
        itemsize = ITEMSIZE[self.stub.storage.dtype]
        first = self.stub.offset + (start * width + lo) * inner
        count = (stop - start) * width * inner if (lo, hi) == (0, width) else (hi - lo) * inner
        shape = (stop - start,) if len(self.shape) == 1 else (stop - start, hi - lo, *self.shape[2:])

        def make(data: bytearray):
            if numpy:
                from compat.gate.read.arrays import frombuffer

                return frombuffer(data, self.stub.storage.dtype, shape)
            import torch

            flat = torch.frombuffer(data, dtype=self.dtype) if data else torch.empty(0, dtype=self.dtype)
            return flat.view(shape)

        return self._inflater.rows(self, first * itemsize, (first + count) * itemsize, numpy, make)


def _forward(index) -> bool:
    return isinstance(index, slice) and index.step in (None, 1)
