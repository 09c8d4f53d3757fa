"""Read a ``torch.save`` file's structure without loading tensors: the zip directory and ``data.pkl`` only.

``torch.save`` writes a zip archive: ``<name>/data.pkl`` (a pickle whose tensors refer to storages by key)
and one ``<name>/data/<key>`` entry per storage. This reader unpickles ``data.pkl`` with an allow-list of
exactly the globals ``torch.save`` emits for plain tensors (``torch._utils._rebuild_tensor_v2``, typed
storage classes, ``collections.OrderedDict``), turning each tensor into a ``TensorStub`` (dtype, shape, and
where its elements lie), and checks each storage entry is present and large enough. Another global or a file
that is no zip archive raises ``NotPlain``, and the caller falls back to ``torch.load(weights_only=True)``,
the authority on what loads. Costs about a tenth of ``torch.load(mmap=True)`` per small file.

The archive is hostile until checked (``read_directory``): every size it states is held against the file's
real bytes before anything is allocated or inflated, so reading costs what the file's bytes justify whatever
its directory claims. Each member's central-directory entry must agree with its local header (or data
descriptor), members may not overlap, and the sizes they declare must stay within ``inflation_limit``. An
archive that fails is refused (``ArchiveRefused``), never handed to ``torch.load``, whose reader allocates what
the directory claims. ``refuse_shared`` refuses an object that reaches one container twice.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from math import prod
from typing import NamedTuple

from compat.gate.read.tensors import ITEMSIZE

# torch's typed-storage class names (what torch.save pickles) -> dtype names.
_STORAGES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool",
}

INFLATION_BASE = 16 << 20
INFLATION_RATIO = 50
"""An archive may declare at most ``INFLATION_BASE + INFLATION_RATIO * its size`` bytes uncompressed in all.

A stored archive (what ``torch.save`` writes) declares less than its size. Hidden states barely deflate: bf16
layers to 1/1.26 of their size, fp16 and fp32 to 1/1.08 (random mantissa bits), token ids to about 1/2.6, so a
real re-zipped sample declares under 1.3 times its size; only a loss mask of ones (1/450) or all-zero data
compresses far, and those are a small part of a real sample. 50x leaves room for samples that are mostly
padding, while deflated zeros (1/1030, a zip bomb) are refused before a byte is inflated. The base lets a small
file hold anything (16 MiB of zeros deflate to 16 KiB) and bounds what a tiny file can make the gate inflate.
"""
MAX_DIRECTORY = 16 << 20
"""The central directory is read whole: 16 MiB holds some 200,000 entries, where a hidden-state file has one
per stored tensor (a handful per sample)."""
MAX_PICKLE = 4 << 20
"""``data.pkl`` is read and unpickled whole: a tensor costs about 80 bytes of it, so 4 MiB describes some 50,000
tensors (8,000 speculators samples in one file). Unpickling makes at most about 80 bytes of objects per pickle
byte (an empty list or dict per opcode byte), so at most about 320 MiB whatever the pickle holds; sets, which
make 240, are refused in a pickle over ``_SMALL_PICKLE``."""
_SMALL_PICKLE = 64 << 10
_DEFLATE_RATIO = 1032
"""Deflate cannot expand past about 1032 bytes per compressed byte (258-byte matches of 2 bits)."""
_WHOLE = 256 << 10  # files up to this size are read with one read; larger ones by their directory's offsets
_EOCD_SEARCH = (64 << 10) + 22  # the end record sits within its largest comment of the file's end
_HUGE = 1 << 62
_CHUNK = 1 << 20  # the most inflated in one step
_INPUT = 64 << 10  # the most compressed bytes a stream holds


class FormatError(Exception):
    """Not a torch.save file the gate reads: neither a zip archive nor a pickle stream, or an archive refused."""


class ArchiveRefused(FormatError):
    """Refused before reading: what the archive claims contradicts its bytes or a stated limit. The message,
    one line, says what it claims and what it contradicts."""

    def __init__(self, message: str) -> None:
        text = " ".join(message.split())
        super().__init__(text if len(text) <= 300 else text[:299] + "…")


class ZipBomb(ArchiveRefused):
    """The archive declares (or inflates to) more than ``inflation_limit`` of its size."""


class DirectoryMismatch(ArchiveRefused):
    """The central directory disagrees with the local headers, the data, the file's size or the pickle."""


class OversizedPickle(ArchiveRefused):
    """``data.pkl`` is larger than ``MAX_PICKLE``, or holds what a pickle of plain tensors never does."""


class SharedContainer(ArchiveRefused):
    """The stored object reaches one container twice."""


class NotPlain(Exception):
    """Not a plain tensor archive this reader vouches for; use torch.load."""


def inflation_limit(file_size: int) -> int:
    """The most uncompressed bytes an archive of ``file_size`` bytes may declare (``INFLATION_RATIO``)."""
    return INFLATION_BASE + INFLATION_RATIO * file_size


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


class Member(NamedTuple):
    """One zip member, checked against its local header: data at ``offset``, ``compressed`` bytes long."""

    name: str
    method: int
    """0 stored, 8 deflated."""
    offset: int
    compressed: int
    size: int
    crc: int


@dataclass(frozen=True)
class Directory:
    """A zip archive's members, each checked against the file (``read_directory``)."""

    path: str
    file_size: int
    members: dict[str, Member]
    whole: bytes | None = None
    """The file's bytes, when it is small enough to have been read in one read."""

    @property
    def stored(self) -> bool:
        """Every member stored (no compression): tensors can be memory-mapped."""
        return all(m.method == 0 for m in self.members.values())

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer at the end of the file)."""
        if self.whole is not None:
            return self.whole[offset:offset + length]
        with open(self.path, "rb", buffering=0) as handle:
            return os.pread(handle.fileno(), length, offset)


_EOCD = struct.Struct("<4s4H2LH")
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_LOCAL = struct.Struct("<4s5H3L2H")
_DESCRIPTOR, _DESCRIPTOR64 = struct.Struct("<3L"), struct.Struct("<LQQ")
_FULL32, _FULL16 = 0xFFFFFFFF, 0xFFFF


def read_directory(path: str) -> Directory:
    """The archive's members, each checked; raises NotPlain for a file that is no zip archive (torch.load says
    what it is) and ``ArchiveRefused`` for an archive whose directory lies or declares too much.

    The last directory read is kept while its file is unchanged (same inode, size and modification time): the
    gate reads a file's values right after its header, and checking again would cost a tenth of loading it.
    """
    global _last_read
    with open(path, "rb", buffering=0) as handle:
        info = os.fstat(handle.fileno())
        identity = (path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if _last_read is not None and _last_read[0] == identity:
            return _last_read[1]
        size = info.st_size
        source = _Source(handle.fileno(), size)
        cd_offset, cd_size, count = _end_record(source, size)
        if cd_size > MAX_DIRECTORY:
            raise ArchiveRefused(f"its central directory is {cd_size} bytes, over the {MAX_DIRECTORY}-byte limit")
        members = _members(source, cd_offset, cd_size, count)
    declared = sum(m.size for m in members.values())
    if declared > inflation_limit(size):
        raise ZipBomb(f"its {len(members)} members declare {declared} bytes uncompressed from a {size}-byte file "
                      f"({declared / max(size, 1):.0f}x), over the limit of {INFLATION_BASE >> 20} MiB + "
                      f"{INFLATION_RATIO}x its size: a zip bomb, or data that is mostly zeros")
    directory = Directory(path, size, members, source.whole)
    _last_read = (identity, directory)
    return directory


_last_read: tuple[tuple, Directory] | None = None


class _Source:
    """A file's bytes: all of them for a small file (one read), else read where asked."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.whole = _read_exactly(fd, 0, size) if size <= _WHOLE else None

    def at(self, offset: int, length: int) -> tuple[bytes, int]:
        """A buffer holding the ``length`` bytes at ``offset`` (fewer at the end of the file), and their start
        in it: the whole file, or just those bytes."""
        if self.whole is not None:
            return self.whole, offset
        return os.pread(self.fd, length, offset), 0


def _read_exactly(fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    while len(data) < length:
        more = os.pread(fd, length - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data


def _end_record(source: _Source, size: int) -> tuple[int, int, int]:
    """Central directory offset, size and entry count, from the end record (zip64 when it says so)."""
    window = max(0, size - _EOCD_SEARCH)
    tail, base = source.at(window, size - window)
    at = tail.rfind(b"PK\x05\x06", base)
    if at < 0 or at + _EOCD.size > len(tail):
        raise NotPlain("no zip end record")
    _, disk, cd_disk, _, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
    end = window + at - base
    if at - base >= _EOCD64_LOCATOR.size and tail[at - 20:at - 16] == b"PK\x06\x07":
        # torch.save writes zip64 end records whatever the size
        record_at = _EOCD64_LOCATOR.unpack_from(tail, at - 20)[2]
        record, start = source.at(record_at, _EOCD64.size)
        if record_at >= end or len(record) - start < _EOCD64.size or record[start:start + 4] != b"PK\x06\x06":
            raise DirectoryMismatch(f"no zip64 end record at byte {record_at}, where its locator puts it")
        _, length, _, _, disk, cd_disk, _, count64, size64, offset64 = _EOCD64.unpack_from(record, start)
        if record_at + 12 + length != end - _EOCD64_LOCATOR.size:
            raise DirectoryMismatch(f"its zip64 end record at byte {record_at} does not end at its locator")
        for short, full, full_mark in ((count, count64, _FULL16), (cd_size, size64, _FULL32),
                                       (cd_offset, offset64, _FULL32)):
            if short not in (full, full_mark):
                raise DirectoryMismatch(f"its end record and zip64 end record disagree ({short} and {full})")
        count, cd_size, cd_offset, end = count64, size64, offset64, record_at
    elif _FULL32 in (cd_size, cd_offset) or count == _FULL16:
        raise DirectoryMismatch("its end record defers to a zip64 end record that is not there")
    if disk or cd_disk:
        raise ArchiveRefused("it is one part of a multi-disk archive")
    if cd_offset + cd_size != end:
        raise DirectoryMismatch(f"its central directory ({cd_size} bytes at byte {cd_offset}) does not end where its "
                                f"end record begins (byte {end})")
    return cd_offset, cd_size, count


def _members(source: _Source, cd_offset: int, cd_size: int, count: int) -> dict[str, Member]:
    """Each central directory entry, checked alone and against its local header (or data descriptor): same
    name, method, sizes and CRC; then no two members may overlap, nor run into the central directory."""
    cd, pos = source.at(cd_offset, cd_size)
    end, whole = pos + cd_size, source.whole
    members: dict[str, Member] = {}
    spans = []
    for _ in range(count):
        if end - pos < 46 or cd[pos:pos + 4] != b"PK\x01\x02":
            raise DirectoryMismatch(f"its end record counts {count} entries but entry {len(members)} is not there")
        (_, _, _, flags, method, _, _, crc, compressed, size, nlen, elen, clen, _, _, _,
         header) = _CENTRAL.unpack_from(cd, pos)
        raw = cd[pos + 46:pos + 46 + nlen]
        if _FULL32 in (compressed, size, header):
            size, compressed, header = _zip64(cd[pos + 46 + nlen:pos + 46 + nlen + elen], size, compressed, header)
        pos += 46 + nlen + elen + clen
        name = raw.decode("utf-8", "surrogateescape")
        if flags & 1 or method not in (0, 8) or compressed != size or header + 30 + nlen + compressed > cd_offset:
            _check_entry(name, flags, method, compressed, size, header + 30 + nlen, cd_offset)
        if name in members:
            raise DirectoryMismatch(f"two members are named {name!r}")
        # The local header: same name and method, and the same sizes there or in the descriptor after the data.
        head, at = (whole, header) if whole is not None else source.at(header, 30 + nlen)
        (sig, _, lflags, lmethod, _, _, lcrc, lcompressed, lsize, lnlen,
         lelen) = _LOCAL.unpack_from(head, at) if len(head) - at >= 30 else (b"",) + (0,) * 10
        if sig != b"PK\x03\x04" or head[at + 30:at + 30 + nlen] != raw or lnlen != nlen or lmethod != method:
            raise DirectoryMismatch(f"no local header for {name!r} at byte {header}, where the directory puts it "
                                    "(or one for another name or method)")
        data = header + 30 + nlen + lelen
        if lflags & 8:  # sizes follow the data, in a descriptor
            tail, at = (whole, data + compressed) if whole is not None else source.at(data + compressed, 24)
            stop = data + compressed + _descriptor(tail, at, crc, compressed, size, name)
        else:
            stop = data + compressed
            if (lcrc, lcompressed, lsize) != (crc, compressed, size):
                _check_local(source, name, header + 30 + nlen, lelen, (lcrc, lcompressed, lsize),
                             (crc, compressed, size))
        spans.append((header, stop, name))
        members[name] = Member(name, method, data, compressed, size, crc)
    if pos > end:
        raise DirectoryMismatch(f"its {count} entries run past the {cd_size} bytes of its central directory")
    spans.sort()
    for (_, stop, name), (start, _, after) in zip(spans, spans[1:] + [(cd_offset, 0, "the central directory")]):
        if stop > start:
            raise DirectoryMismatch(f"member {name!r} runs to byte {stop}, past the start of {after!r} at byte "
                                    f"{start}: the directory overstates its size")
    return members


def _check_entry(name: str, flags: int, method: int, compressed: int, size: int, data: int, cd_offset: int) -> None:
    if flags & 1:
        raise ArchiveRefused(f"member {name!r} is encrypted")
    if method not in (0, 8):
        raise ArchiveRefused(f"member {name!r} uses compression method {method}; only stored and deflated members "
                             "are read")
    if method == 0 and compressed != size:
        raise DirectoryMismatch(f"stored member {name!r} declares {size} bytes but {compressed} compressed")
    if method == 8 and size > _DEFLATE_RATIO * compressed + 64:
        raise ZipBomb(f"member {name!r} declares {size} bytes from {compressed} deflated, more than deflate can "
                      "produce")
    if data + compressed > cd_offset:
        raise DirectoryMismatch(f"member {name!r} declares {compressed} bytes, more than lie between its header "
                                f"and the central directory (byte {cd_offset})")


def _check_local(source: _Source, name: str, extra_at: int, elen: int, local: tuple, central: tuple) -> None:
    """Raise unless the local header's CRC and sizes (zip64 when marked so) are the directory's."""
    crc, compressed, size = local
    if _FULL32 in (compressed, size):
        extra, at = source.at(extra_at, elen)
        size, compressed, _ = _zip64(extra[at:at + elen], size, compressed, 0)
    if (crc, compressed, size) != central:
        raise DirectoryMismatch(f"member {name!r}: the directory declares {central[2]} bytes ({central[1]} "
                                f"compressed, CRC {central[0]:08x}) but its local header {size} ({compressed} "
                                f"compressed, CRC {crc:08x})")


def _zip64(extra: bytes, size: int, compressed: int, header: int) -> tuple[int, int, int]:
    """Sizes and offset from a zip64 extra field, for the fields the fixed part marks as full."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            values, at = [], pos + 4
            for value in (size, compressed, header):
                if value == _FULL32:
                    if at + 8 > pos + 4 + length:
                        break
                    value = struct.unpack_from("<Q", extra, at)[0]
                    at += 8
                values.append(value)
            if len(values) == 3:
                return values[0], values[1], values[2]
        pos += 4 + length
    raise DirectoryMismatch("a member's sizes are marked zip64 but its zip64 field is missing or short")


def _descriptor(raw: bytes, at: int, crc: int, compressed: int, size: int, name: str) -> int:
    """The length of the data descriptor at ``raw[at:]``; raises unless it repeats the directory's CRC and sizes."""
    start = at + 4 if raw[at:at + 4] == b"PK\x07\x08" else at
    if len(raw) >= start + 12 and _DESCRIPTOR.unpack_from(raw, start) == (crc, compressed, size):
        return start + 12 - at
    if len(raw) >= start + 20 and _DESCRIPTOR64.unpack_from(raw, start) == (crc, compressed, size):
        return start + 20 - at
    raise DirectoryMismatch(f"member {name!r}: the directory declares {size} bytes ({compressed} compressed), which "
                            "the data descriptor after its data does not repeat")


class MemberStream:
    """A member's content read forward from its start, inflated when deflated: never more than its ``compressed``
    bytes in, nor more than asked out; reading before the position starts over. ``spent`` counts bytes out."""

    def __init__(self, directory: Directory, member: Member) -> None:
        self.directory, self.member = directory, member
        self.spent = 0
        self._start()

    def _start(self) -> None:
        self._inflater = zlib.decompressobj(-15) if self.member.method == 8 else None
        self.position = 0
        self._fed = 0
        self._pending = b""

    def read(self, begin: int, end: int) -> bytes | bytearray:
        """Bytes ``begin:end`` of the content; raises DirectoryMismatch past its declared size or when it ends
        sooner."""
        if end > self.member.size:
            raise DirectoryMismatch(f"member {self.member.name!r} declares {self.member.size} bytes, fewer than the "
                                    f"{end} needed")
        if self.member.method == 0:
            data = self.directory.read(self.member.offset + begin, end - begin)
            if len(data) != end - begin:
                raise DirectoryMismatch(f"member {self.member.name!r} is cut short by the end of the file")
            self.spent += len(data)
            return data
        if begin < self.position:
            self._start()
        self._inflate(begin - self.position, keep=False)
        return self._inflate(end - begin, keep=True)

    def _inflate(self, wanted: int, keep: bool) -> bytearray:
        out = bytearray()
        while wanted > 0:
            if not self._pending:
                left = self.member.compressed - self._fed
                if self._inflater.eof or left <= 0:
                    raise DirectoryMismatch(f"member {self.member.name!r} inflates to {self.position} bytes, fewer "
                                            f"than the {self.position + wanted} needed")
                self._pending = self.directory.read(self.member.offset + self._fed, min(_INPUT, left))
                if not self._pending:
                    raise DirectoryMismatch(f"member {self.member.name!r} is cut short by the end of the file")
                self._fed += len(self._pending)
            try:
                piece = self._inflater.decompress(self._pending, min(wanted, _CHUNK))
            except zlib.error as exc:
                raise DirectoryMismatch(f"member {self.member.name!r} is declared deflated but its data is not a "
                                        f"deflate stream ({exc})") from exc
            self._pending = self._inflater.unconsumed_tail
            self.position += len(piece)
            self.spent += len(piece)
            wanted -= len(piece)
            if keep:
                out += piece
        return out


class _StorageType:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def _rebuild_tensor_v2(storage, offset, size, stride, *_rest) -> TensorStub:
    if not isinstance(storage, StorageRef):
        raise NotPlain("tensor without a storage reference")
    shape, strides = tuple(map(int, size)), tuple(map(int, stride))
    # Numbers past 2**62 (pickle ints have no bound) would only make the arithmetic below slow; torch refuses
    # them, and negative strides, when it reads values.
    if len(strides) != len(shape) or not 0 <= offset < _HUGE or min(shape, default=0) < 0 or \
            max(shape + strides, default=0) >= _HUGE:
        raise NotPlain("tensor view with a negative or huge size, stride or offset")
    # The furthest element the view reaches must lie inside its storage.
    last = offset + sum((d - 1) * s for d, s in zip(shape, strides)) if prod(shape) else offset - 1
    if last >= storage.numel:
        raise NotPlain(f"tensor view reaches element {last} of a {storage.numel}-element storage")
    return TensorStub(f"torch.{storage.dtype}", shape, storage, offset, strides)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
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


def _refuse_sets(data: bytes) -> None:
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
    needs more than plain tensors, and DirectoryMismatch when a storage's member is shorter than its tensors."""
    unpickler = _Unpickler(archive.pickle)
    try:
        obj = unpickler.load()
    except (EOFError, pickle.UnpicklingError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise NotPlain(f"{type(exc).__name__}: {exc}") from exc
    members = archive.directory.members
    for storage in unpickler.storages.values():
        member = members.get(f"{archive.prefix}data/{storage.key}")
        if member is None:
            raise NotPlain(f"storage {storage.key} missing")
        if member.size < storage.nbytes:
            raise DirectoryMismatch(f"storage {storage.key} holds {storage.numel} {storage.dtype} elements "
                                    f"({storage.nbytes} bytes) by the pickle but its member {member.size} bytes")
    return obj


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
    stack: list[tuple[object, tuple]] = [(obj, ())] if isinstance(obj, _CONTAINERS) else []
    while stack:  # each container is marked when first reached, so the first reach is the first in order
        node, path = stack.pop()
        if isinstance(node, dict):
            keys = [(("key", i), key) for i, key in enumerate(node) if isinstance(key, (tuple, frozenset))]
            children = [*keys, *node.items()] if keys else node.items()
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
