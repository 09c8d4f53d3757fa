"""Read a safetensors header without touching tensor data: an 8-byte little-endian length, then JSON.

Parsed here rather than through ``safetensors.safe_open`` so a damaged file yields a precise reason
(truncated by how many bytes, which tensor, at which offset) instead of one opaque error, and so a header
check costs one ``open``, one ``fstat`` and (for headers under 4 KiB) one ``read``.

The rules are the reference implementation's (the Rust crate's ``read_metadata`` and ``Metadata::validate``,
behind ``safe_open``): the gate accepts exactly the files it accepts, except dtypes the gate does not know.
Python's ``json`` is more lenient than ``serde_json``, so besides parsing, this reader holds a header to:

- no NaN or Infinity, no unpaired UTF-16 surrogate escape, at most 127 levels of nesting, no number beyond a
  float's range; ``-0`` and integers beyond 64 bits are floats, so no shape or offset;
- a tensor as an object of ``dtype``, ``shape`` and ``data_offsets`` (unknown fields ignored, these three once
  each) or the array ``[dtype, shape, data_offsets]``; a dtype may also be spelled ``{"F32": null}``;
- a repeated tensor name keeps its last entry, though each must parse; ``__metadata__``, at most once, is null
  or an object of strings;
- sorted by offsets, each tensor begins where the previous ends (the first at 0) and spans exactly its shape's
  bytes; the last ends where the file does.
"""

from __future__ import annotations

import gc
import json
import os
import re
import stat
from dataclasses import dataclass
from functools import lru_cache
from math import inf
from operator import itemgetter
from typing import NoReturn

from compat.gate.read.source import RemoteFile
from compat.gate.read.tensors import ITEMSIZE, SAFETENSORS_DTYPES, TensorInfo, shape_text

MAX_HEADER = 100_000_000
"""The safetensors library refuses larger headers; so does the gate."""
MAX_NESTING = 127
"""Levels of arrays and objects ``serde_json`` reads before it gives up, the header object included."""
_FIRST_READ = 4096  # one page: headers of hidden-state files are a few hundred bytes
_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_FIELDS = ("dtype", "shape", "data_offsets")
_SURROGATE = re.compile("[\ud800-\udfff]")  # after decoding, only an unpaired escape leaves one in a str
_DIGITS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))  # bytes.translate: each digit a 0, else space
_HUGE_INTEGER = b"0" * 309  # digits enough to pass the largest float (a regex search costs 50 times more)
_SPACED_KEY = re.compile(r'"\s+:')
_OFFSETS = itemgetter(1)  # of a (name, (begin, end)) item


class HeaderError(Exception):
    """The file is not a readable safetensors file; the message says why and where."""


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    tensors: dict[str, TensorInfo]
    file_size: int
    spans: dict[str, tuple[int, int]]
    """Each tensor's ``data_offsets``: bytes ``begin:end`` of the data, which starts at ``data_start``."""
    data_start: int


def read_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Parse and validate ``path``'s header against its size; raise HeaderError on any inconsistency.

    Linear in the header's size: one C-speed JSON parse, one pass over its entries, one sort by offsets; the
    stricter reading (``_check_strictly``) only for a header whose text hints at what it checks. A 100 MB header
    of 1.4 million tensors costs under twice what ``safe_open`` does, in less memory (benchmarks/gate_speed.py);
    running out of memory on one is said as such. A small header whose bytes (and file size) were parsed
    before is not parsed again (``_parsed_before``). The header returned is shared: not to be changed."""
    return _header(_read, path)


def read_header_at(source: RemoteFile) -> SafetensorsHeader:
    """``read_header`` of a file named by URL: its first ``_FIRST_READ`` bytes, then the rest of its header in one
    range (``compat.gate.read.source``)."""
    return _header(_read_ranges, source)


def _header(read, where) -> SafetensorsHeader:
    length = 0
    try:
        size, raw = read(where)
        length = len(raw)
        if type(raw) is bytes:  # a header read at once: at most _FIRST_READ bytes
            return _parsed_before(raw, size)
        return _parsed(raw, size)
    except MemoryError:
        raise HeaderError(f"header{f' of {length} bytes' if length else ''} is too large to read in the memory "
                          "available") from None


def _parsed(raw: bytes | bytearray, size: int) -> SafetensorsHeader:
    enabled = gc.isenabled()
    gc.disable()  # parsing makes millions of containers and no cycles: the collector's passes would triple the cost
    try:
        length = len(raw)
        document = _parse(raw)
        del raw
        tensors, spans = _tensors(document)
        del document
        _check_layout(tensors, spans, size - 8 - length, 8 + length)
    finally:
        if enabled:
            gc.enable()
    return SafetensorsHeader(tensors, size, spans, 8 + length)


_parsed_before = lru_cache(maxsize=4096)(_parsed)
"""``_parsed`` of a small header, remembered: the files of one dataset differ in their token count, so most
headers of a large dataset repeat one read before (a sample of 300 tokens is like every other of 300 tokens),
and parsing and checking one costs two thirds of a small file's read. At most 4,096 headers of at most 4 KiB are
kept with what they parse to (under 30 MB); an error is not remembered, and raised again each time."""


def forget_headers() -> None:
    """Parse every header again from now on: what one run remembers does not speed up (or hide from) the next."""
    _parsed_before.cache_clear()


def _read(path: str | os.PathLike) -> tuple[int, bytes | bytearray]:
    """The file's size and its header bytes; non-blocking, so a FIFO swapped in for the file cannot hang."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise HeaderError(f"not a regular file (mode {oct(info.st_mode)}); not read")
        size = info.st_size
        head = os.read(fd, _FIRST_READ)
        length = _length(head, size)
        if length <= len(head) - 8:
            return size, head[8:8 + length]
        raw = bytearray(length)  # read in place: a header of 100 MB is not copied while it grows
        got = len(head) - 8
        raw[:got] = head[8:]
        with memoryview(raw) as view:
            while got < length:
                more = os.readv(fd, [view[got:]])
                if not more:
                    raise HeaderError(f"file ended inside the header at byte {8 + got}")
                got += more
    finally:
        os.close(fd)
    return size, raw


def _read_ranges(source: RemoteFile) -> tuple[int, bytes | bytearray]:
    """``_read`` of a file by byte ranges: its size as listed, its first page, then what the header needs more."""
    size = source.size
    head = source.read(0, _FIRST_READ)
    length = _length(head, size)
    if length <= len(head) - 8:
        return size, head[8:8 + length]
    raw = bytearray(length)
    got = len(head) - 8
    raw[:got] = head[8:]
    with memoryview(raw) as view:
        source.readinto(view[got:], 8 + got)
    return size, raw


def _length(head: bytes, size: int) -> int:
    """The header length the first bytes state, checked against the file's size and the limit."""
    if len(head) < 8:
        raise HeaderError(f"file has {size} bytes, fewer than the 8-byte header length of a safetensors file")
    length = int.from_bytes(head[:8], "little")
    if length > size - 8:
        raise HeaderError(f"header length field says {length} bytes but only {size - 8} follow it (byte 0): "
                          "truncated, or not a safetensors file")
    if length > MAX_HEADER:
        raise HeaderError(f"header length field says {length} bytes, over the {MAX_HEADER}-byte limit (byte 0)")
    return length


def _json_float(text: str) -> float:
    value = float(text)
    if value in (inf, -inf):
        raise ValueError(f"number {text[:24]}{'…' if len(text) > 24 else ''} is out of range")
    return value


def _json_int(text: str) -> int | float:
    if len(text) <= 21 and text != "-0":
        value = int(text)
        if _I64_MIN <= value <= _U64_MAX:
            return value
    return _json_float(text)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


# Objects are read as dicts, the last of a repeated key winning, which is all a header needs unless it repeats a
# key: then _check_strictly reads it again as pairs. Reading every integer through _json_int costs a call each,
# so only headers holding "-0" or a huge integer take it.
_DECODER = json.JSONDecoder(parse_float=_json_float, parse_constant=_no_constant)
_EXACT_DECODER = json.JSONDecoder(parse_float=_json_float, parse_constant=_no_constant, parse_int=_json_int)
_PAIRS_DECODER = json.JSONDecoder(object_pairs_hook=tuple, parse_float=_json_float, parse_constant=_no_constant,
                                  parse_int=_json_int)


def _parse(raw: bytes | bytearray) -> dict:
    """The header as JSON; HeaderError where serde_json would not read it into the crate's types.

    Nesting is checked where it can be deep: an entry of the crate's types nests three levels at most, so only
    what the crate ignores (unknown fields, ``_entry``) or refuses (``_tensors``) is walked for it."""
    try:
        text = raw.decode()
        exact = "-0" in text or (len(raw) >= 309 and _HUGE_INTEGER in raw.translate(_DIGITS))
        document = (_EXACT_DECODER if exact else _DECODER).decode(text)
    except UnicodeDecodeError as exc:
        raise HeaderError(f"header is not UTF-8: {exc.reason} at byte {8 + exc.start}") from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:
        raise HeaderError(f"header (bytes 8..{8 + len(raw)}) is not valid JSON: {exc}") from None
    if type(document) is not dict:
        _check_nesting(document)
        raise HeaderError(f"header is {_show(document)}, not a JSON object")
    if "\\u" in text or _SPACED_KEY.search(text) or text.count('":') != _keys(document):
        _check_strictly(text)
    return document


def _keys(document: dict) -> int:
    """Keys in the header and in the objects it holds: fewer than the text has when a key repeats."""
    count = len(document)
    for value in document.values():
        if type(value) is dict:
            count += len(value)
    return count


def _check_strictly(text: str) -> None:
    """What serde_json refuses and Python's json reads: deep nesting, unpaired surrogate escapes, and repeated
    keys where the crate's types allow none."""
    try:
        document = _PAIRS_DECODER.decode(text)
    except RecursionError:  # read once already: only a stack a little fuller fails here
        raise _too_deep() from None
    _check_values(document)
    _check_repeats(document)


def _check_nesting(value: object, level: int = 1) -> None:
    """Raise unless ``value``, at ``level``, nests no deeper than serde_json reads; each container visited once."""
    stack = [(value, level)]
    while stack:
        value, level = stack.pop()
        if type(value) is dict:
            value = value.values()
        elif type(value) is not list:
            continue
        if level > MAX_NESTING:
            raise _too_deep()
        stack.extend((item, level + 1) for item in value if type(item) in (dict, list))


def _check_values(document: tuple) -> None:
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, level = stack.pop()
        if type(value) is str:
            if found := _SURROGATE.search(value):
                raise HeaderError(f"header string {_quote(value)} holds an unpaired UTF-16 surrogate escape "
                                  f"\\u{ord(found.group()):04x}, which the safetensors library refuses")
        elif type(value) is list or type(value) is tuple:
            if level > MAX_NESTING:
                raise _too_deep()
            items = value if type(value) is list else [part for pair in value for part in pair]
            stack.extend((item, level + 1) for item in items)


def _check_repeats(document: tuple) -> None:
    """No second ``__metadata__``, no field of a tensor twice, a dtype object of one key; and every entry of a
    repeated name valid on its own, though only the last counts."""
    if [key for key, _ in document].count("__metadata__") > 1:
        raise HeaderError("'__metadata__' appears twice in the header")
    for name, value in document:
        if name == "__metadata__":
            continue
        if type(value) is tuple:
            keys = [key for key, _ in value]
            for field in _FIELDS:
                if keys.count(field) > 1:
                    raise _bad(name, f"'{field}' appears twice")
            code = dict(value).get("dtype")
        else:
            code = value[0] if type(value) is list and value else None
        if type(code) is tuple and len(code) > 1:
            raise _bad(name, f"dtype is an object of {len(code)} keys, not a string")
        _entry(name, _as_dicts(value))


def _as_dicts(value: object) -> object:
    """Pairs back into dicts, the last of a repeated key winning, as ``json.loads`` would have read them."""
    if type(value) is tuple:
        return {key: _as_dicts(item) for key, item in value}
    return [_as_dicts(item) for item in value] if type(value) is list else value


def _too_deep() -> HeaderError:
    return HeaderError(f"header nests arrays or objects deeper than the {MAX_NESTING} levels the safetensors library "
                       "reads")


def _tensors(document: dict) -> tuple[dict[str, TensorInfo], dict[str, tuple[int, int]]]:
    """Each tensor's info and its ``(begin, end)`` data offsets, by name. Each entry leaves the document once
    read, so the parsed header and what is made of it never both sit in memory whole. serde_json refuses deep
    nesting before the crate's types see anything, so an entry refused is reported so only when the header
    nests no deeper."""
    tensors, spans = {}, {}
    for name in list(document):
        value = document.pop(name)
        try:
            if name == "__metadata__":
                _check_metadata(value)
            else:
                tensors[name], spans[name] = _entry(name, value)
        except HeaderError:
            _check_nesting(value, 2)
            _check_nesting(document)
            raise
    return tensors, spans


def _check_metadata(value: object) -> None:
    if value is None:
        return
    if type(value) is not dict:
        raise HeaderError(f"'__metadata__' is {_show(value)}, not an object of strings")
    for key, item in value.items():
        if type(item) is not str:
            raise HeaderError(f"'__metadata__' value {_quote(key)} is {_show(item)}, not a string")


def _entry(name: str, value: object) -> tuple[TensorInfo, tuple[int, int]]:
    """One tensor's entry as the crate's TensorInfo reads it: an object (unknown fields ignored) or an array."""
    if type(value) is dict:
        try:
            code, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
        except KeyError as missing:
            raise _bad(name, f"no {missing} in its entry") from None
        if len(value) > 3:  # fields the crate ignores, which serde_json still reads
            _check_nesting([item for key, item in value.items() if key not in _FIELDS], 2)
    elif type(value) is list and len(value) == 3:
        code, shape, offsets = value
    else:
        kind = f"an array of {len(value)}" if type(value) is list else _show(value)
        raise _bad(name, f"entry is {kind}, neither an object of dtype, shape and data_offsets nor an array of 3")
    dtype, dims, span = _dtype(name, code), _sizes(name, "shape", shape), _sizes(name, "data_offsets", offsets)
    if len(span) != 2:
        raise _bad(name, f"data_offsets is an array of {len(span)}, not [begin, end]")
    return TensorInfo(name, dtype, dims), span


def _dtype(name: str, code: object) -> str:
    if type(code) is dict and len(code) == 1 and None in code.values():
        (code,) = code  # serde's other spelling of an enum: {"F32": null}
    if type(code) is not str:
        raise _bad(name, f"dtype is {_show(code)}, not a string")
    dtype = SAFETENSORS_DTYPES.get(code)
    if dtype is None:
        raise _bad(name, f"unknown dtype {_quote(code)}")
    return dtype


def _sizes(name: str, field: str, value: object) -> tuple[int, ...]:
    """``value`` as unsigned 64-bit integers (Rust's ``usize``), as the crate reads a shape or offsets."""
    if type(value) is not list:
        raise _bad(name, f"{field} is {_show(value)}, not an array")
    for i, item in enumerate(value):
        if type(item) is not int or not 0 <= item <= _U64_MAX:
            raise _bad(name, f"{field}[{i}] is {_show(item)}, not an integer from 0 to 2**64-1")
    return tuple(value)


def _check_layout(tensors: dict[str, TensorInfo], spans: dict[str, tuple[int, int]], body: int,
                  data_start: int) -> None:
    """The crate's order: by offsets, each tensor where the previous ends and of its size; then the file's end."""
    end, previous = 0, None
    for name, (begin, stop) in sorted(spans.items(), key=_OFFSETS):
        if stop < begin:
            raise _bad(name, f"data_offsets [{begin}, {stop}] end before they begin")
        if begin != end:
            raise _bad(name, _misplaced(begin, stop, end, previous))
        _check_size(tensors[name], begin, stop)
        end, previous = stop, name
    if end > body and previous is not None:  # past the body: some tensor ends there
        raise HeaderError(f"tensor {_quote(previous)} ends at byte {data_start + end} but the file has "
                          f"{data_start + body} bytes: truncated ({end - body} bytes missing)")
    if end < body:
        raise HeaderError(f"{body - end} bytes follow the last tensor (ends at byte {data_start + end} of "
                          f"{data_start + body}): the safetensors library refuses such files")


def _misplaced(begin: int, stop: int, end: int, previous: str | None) -> str:
    where = f"data_offsets [{begin}, {stop}]"
    if previous is None:
        return f"{where} leave data bytes 0..{begin} unused: the first tensor must begin at 0"
    if begin < end:
        return f"{where} overlap tensor {_quote(previous)}, which ends at {end}"
    return f"{where} leave a gap of {begin - end} bytes after tensor {_quote(previous)}, which ends at {end}"


def _check_size(info: TensorInfo, begin: int, end: int) -> None:
    count = _elements(info.shape)
    need = None if count is None else count * ITEMSIZE[info.dtype]
    if need is None or need * 8 > _U64_MAX:
        raise _bad(info.key, f"shape {_shape(info.shape)} of {info.dtype} overflows 64 bits (the safetensors "
                             "library counts its size in bits)")
    if end - begin != need:
        raise _bad(info.key, f"{_shape(info.shape)} {info.dtype} needs {need} bytes but its data_offsets "
                             f"[{begin}, {end}] span {end - begin}")


def _elements(dims: tuple[int, ...]) -> int | None:
    """The crate's checked product of a shape: None once it passes 64 bits, even if a later dimension is 0.
    Stopping there also bounds the work: ``prod`` of a hostile shape of 10**5 huge dimensions takes minutes."""
    count = 1
    for size in dims:
        count *= size
        if count > _U64_MAX:
            return None
    return count


def _bad(name: str, reason: str) -> HeaderError:
    return HeaderError(f"tensor {_quote(name)}: {reason}")


def _quote(text: str, limit: int = 60) -> str:
    """``text`` quoted, at most ``limit`` characters of it: names in a hostile header may be megabytes long."""
    return repr(text[:limit]) + ("…" if len(text) > limit else "")


def _show(value: object) -> str:
    """A JSON value for a message, bounded: numbers as written, strings quoted and cut, containers by kind."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int) and not _I64_MIN <= value <= _U64_MAX:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"the string {_quote(value)}"
    return "an array" if isinstance(value, list) else "an object"


def _shape(dims: tuple[int, ...]) -> str:
    return shape_text(dims) if len(dims) <= 8 else shape_text(dims[:8])[:-1] + ", …]"
