"""A zip archive read without trusting it: its directory checked against the file's bytes before anything is
read, and its members read (inflated when deflated) only as far as asked and declared.

Every size a zip archive states is held against the file's real bytes before anything is allocated or
inflated, so reading costs what the file's bytes justify whatever its directory claims (``read_directory``):
each member's central-directory entry must agree with its local header (or data descriptor), members may not
overlap, and the sizes they declare must stay within ``inflation_limit``. An archive that fails is refused
(``ArchiveRefused``): it is never handed to ``torch.load``, whose reader allocates what the directory claims.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

from compat.gate.read.source import RemoteFile, is_url, open_remote

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

_DEFLATE_RATIO = 1032
"""Deflate cannot expand past about 1032 bytes per compressed byte (258-byte matches of 2 bits)."""
_WHOLE = 256 << 10  # files up to this size are read with one read; larger ones by their directory's offsets
_EOCD_SEARCH = (64 << 10) + 22  # the end record sits within its largest comment of the file's end
_REMOTE_TAIL = 16 << 10  # by URL, the end read first: the end records and the directory of a few dozen members

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


class NotPlain(Exception):
    """Not a plain tensor archive this reader vouches for; use torch.load."""


def inflation_limit(file_size: int) -> int:
    """The most uncompressed bytes an archive of ``file_size`` bytes may declare (``INFLATION_RATIO``)."""
    return INFLATION_BASE + INFLATION_RATIO * file_size


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
    remote: RemoteFile | None = None
    """A file named by URL: its bytes are read by range through this."""

    @property
    def stored(self) -> bool:
        """Every member stored (no compression): tensors can be memory-mapped."""
        return all(m.method == 0 for m in self.members.values())

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer at the end of the file)."""
        if self.whole is not None:
            return self.whole[offset:offset + length]
        if self.remote is not None:
            return self.remote.read(offset, length)
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in for the file cannot hang it
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)

_EOCD = struct.Struct("<4s4H2LH")
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
# The fields the checks use, the others skipped (x): signature, flags, method, CRC, compressed and uncompressed
# sizes, the lengths of name and extra field (and comment), and (central) the local header's offset.
_CENTRAL = struct.Struct("<4s4x2H4x3L3H8xL")
_LOCAL = struct.Struct("<4s2x2H4x3L2H")
_DESCRIPTOR, _DESCRIPTOR64 = struct.Struct("<3L"), struct.Struct("<LQQ")
_SIGNED_DESCRIPTOR = struct.Struct("<4s3L")
_FULL32, _FULL16 = 0xFFFFFFFF, 0xFFFF


def read_directory(path: str) -> Directory:
    """The archive's members, each checked; raises NotPlain for a file that is no zip archive (torch.load says
    what it is) and ``ArchiveRefused`` for an archive whose directory lies or declares too much.

    The last directory read is kept while its file is unchanged (same inode, size and modification time; for a
    URL, its size and ETag): the gate reads a file's values right after its header, and checking again would
    cost a tenth of loading it. A file named by URL is read by ranges (``_RemoteSource``): its end, its central
    directory, each member's local header, and nothing of its tensors.
    """
    if "://" in path and is_url(path):
        remote = open_remote(path)
        if _last_read is not None and _last_read[0] == remote.identity:
            return _last_read[1]
        return _checked(path, remote.size, _RemoteSource(remote), remote.identity)
    # os.open, not open(): no file object to build and close for each of many small files; O_NONBLOCK as in
    # Directory.read.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        identity = (path, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if _last_read is not None and _last_read[0] == identity:
            return _last_read[1]
        return _checked(path, info.st_size, _Source(fd, info.st_size), identity)
    finally:
        os.close(fd)


def _checked(path: str, size: int, source: _Bytes, identity: tuple) -> Directory:
    global _last_read
    cd_offset, cd_size, count = _end_record(source, size)
    if cd_size > MAX_DIRECTORY:
        raise ArchiveRefused(f"its central directory is {cd_size} bytes, over the {MAX_DIRECTORY}-byte limit")
    members, declared = _members(source, cd_offset, cd_size, count)
    if declared > inflation_limit(size):
        raise ZipBomb(f"its {len(members)} members declare {declared} bytes uncompressed from a {size}-byte file "
                      f"({declared / max(size, 1):.0f}x), over the limit of {INFLATION_BASE >> 20} MiB + "
                      f"{INFLATION_RATIO}x its size: a zip bomb, or data that is mostly zeros")
    directory = Directory(path, size, members, source.whole, source.remote)
    _last_read = (identity, directory)
    return directory

_last_read: tuple[tuple, Directory] | None = None


class _Source:
    """A file's bytes: all of them for a small file (one read), else read where asked."""

    remote = None

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.whole = _read_exactly(fd, 0, size) if size <= _WHOLE else None

    def at(self, offset: int, length: int) -> tuple[bytes, int]:
        """A buffer holding the ``length`` bytes at ``offset`` (fewer at the end of the file), and their start
        in it: the whole file, or just those bytes."""
        if self.whole is not None:
            return self.whole, offset
        return os.pread(self.fd, length, offset), 0

    def tail(self, size: int) -> tuple[int, bytes, int]:
        """Where the search for the end record begins, and a buffer of the bytes from there (``at``'s form)."""
        window = max(0, size - _EOCD_SEARCH)
        return (window, *self.at(window, size - window))


class _RemoteSource:
    """A file named by URL, read by ranges (``RemoteFile``): its last ``_REMOTE_TAIL`` bytes first (all of it when
    that is the whole file), the rest of the end-record search only when they hold no end record."""

    def __init__(self, remote: RemoteFile) -> None:
        self.remote = remote
        self.whole: bytes | None = None

    def at(self, offset: int, length: int) -> tuple[bytes, int]:
        if self.whole is not None:
            return self.whole, offset
        return self.remote.read(offset, length), 0

    def tail(self, size: int) -> tuple[int, bytes, int]:
        window = max(0, size - _REMOTE_TAIL)
        tail = self.remote.read(window, size - window)
        if window == 0:
            self.whole = tail
        elif tail.rfind(b"PK\x05\x06") < 0:  # a comment of more than _REMOTE_TAIL bytes follows it
            window = max(0, size - _EOCD_SEARCH)
            tail = self.remote.read(window, size - window)
        self.remote.keep(window, tail)
        return window, tail, 0


_Bytes = _Source | _RemoteSource
"""Where an archive's bytes are read from: a local file or a URL."""


def _read_exactly(fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    while len(data) < length:
        more = os.pread(fd, length - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data


def _end_record(source: _Bytes, size: int) -> tuple[int, int, int]:
    """Central directory offset, size and entry count, from the end record (zip64 when it says so)."""
    window, tail, base = source.tail(size)
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


def _members(source: _Bytes, cd_offset: int, cd_size: int, count: int) -> tuple[dict[str, Member], int]:
    """Each central directory entry, checked alone and against its local header (or data descriptor): same
    name, method, sizes and CRC; then no two members may overlap, nor run into the central directory. Also
    returns the uncompressed bytes they declare in all.

    The loop runs for every member of every file read (a dozen per torch.save sample, most of the header
    read's cost): each step unpacks only the fields it checks (``_CENTRAL``, ``_LOCAL``) and leaves the
    messages, and the rarer checks, to functions called when a fast test fails.
    """
    cd, pos = source.at(cd_offset, cd_size)
    end, whole = pos + cd_size, source.whole
    members: dict[str, Member] = {}
    spans = []
    declared = 0
    for _ in range(count):
        if end - pos < 46:
            raise _missing_entry(count, len(members))
        sig, flags, method, crc, compressed, size, nlen, elen, clen, header = _CENTRAL.unpack_from(cd, pos)
        if sig != b"PK\x01\x02":
            raise _missing_entry(count, len(members))
        name_at = pos + 46
        raw = cd[name_at:name_at + nlen]
        if _FULL32 in (compressed, size, header):
            size, compressed, header = _zip64(cd[name_at + nlen:name_at + nlen + elen], size, compressed, header)
        pos = name_at + nlen + elen + clen
        name = raw.decode("utf-8", "surrogateescape")
        if flags & 1 or method not in (0, 8) or compressed != size or header + 30 + nlen + compressed > cd_offset:
            _check_entry(name, flags, method, compressed, size, header + 30 + nlen, cd_offset)
        if name in members:
            raise DirectoryMismatch(f"two members are named {name!r}")
        # The local header: same name and method, and the same sizes there or in the descriptor after the data.
        head, at = (whole, header) if whole is not None else source.at(header, 30 + nlen)
        try:
            sig, lflags, lmethod, lcrc, lcompressed, lsize, lnlen, lelen = _LOCAL.unpack_from(head, at)
        except struct.error:  # the file ends before it
            sig = None
        if sig != b"PK\x03\x04" or lnlen != nlen or lmethod != method or head[at + 30:at + 30 + nlen] != raw:
            raise DirectoryMismatch(f"no local header for {name!r} at byte {header}, where the directory puts it "
                                    "(or one for another name or method)")
        data = header + 30 + nlen + lelen
        stop = data + compressed
        if lflags & 8:  # sizes follow the data, in a descriptor
            tail, at = (whole, stop) if whole is not None else source.at(stop, 24)
            try:  # torch.save's form: signed, 32-bit sizes; _descriptor reads the others
                signed = _SIGNED_DESCRIPTOR.unpack_from(tail, at) == (b"PK\x07\x08", crc, compressed, size)
            except struct.error:  # the file ends before it
                signed = False
            stop += 16 if signed else _descriptor(tail, at, crc, compressed, size, name)
        elif lcrc != crc or lcompressed != compressed or lsize != size:
            _check_local(source, name, header + 30 + nlen, lelen, (lcrc, lcompressed, lsize),
                         (crc, compressed, size))
        spans.append((header, stop, name))
        members[name] = _member(Member, (name, method, data, compressed, size, crc))
        declared += size
    if pos > end:
        raise DirectoryMismatch(f"its {count} entries run past the {cd_size} bytes of its central directory")
    spans.sort()
    spans.append((cd_offset, 0, "the central directory"))
    for (_, stop, name), (start, _, after) in zip(spans, spans[1:]):
        if stop > start:
            raise DirectoryMismatch(f"member {name!r} runs to byte {stop}, past the start of {after!r} at byte "
                                    f"{start}: the directory overstates its size")
    return members, declared


_member = tuple.__new__
"""Builds a ``Member`` from a tuple of its fields: a third of the cost of calling ``Member(...)``."""


def _missing_entry(count: int, found: int) -> DirectoryMismatch:
    return DirectoryMismatch(f"its end record counts {count} entries but entry {found} is not there")


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


def _check_local(source: _Bytes, name: str, extra_at: int, elen: int, local: tuple, central: tuple) -> None:
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
        self._inflater = zlib.decompressobj(-15)  # used only for a deflated member (method 8)
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
