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

A header may be 100 MB of a million entries, so it is walked an entry at a time (``_walk``) rather than parsed
whole: its memory is about twice its size, not ten times (docs/performance.md).
"""

from __future__ import annotations

import gc
import json
import os
import re
import stat
from _json import scanstring  # the C function json's decoder reads a string with
from array import array
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from json import JSONDecodeError
from math import inf
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
_WHITESPACE = re.compile(r"[ \t\n\r]*").match  # JSON's whitespace
_SPACE = frozenset(" \t\n\r")
NAMES_KEPT = 8
"""Tensor names a header keeps beyond those asked for: the first in sorted order, to show in a message."""


class HeaderError(Exception):
    """The file is not a readable safetensors file; the message says why and where."""


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    tensors: dict[str, TensorInfo]
    """The tensors named in ``read_header``'s ``only`` that the header has; every tensor when ``only`` is None."""
    file_size: int
    spans: dict[str, tuple[int, int]]
    """Each of ``tensors``' ``data_offsets``: bytes ``begin:end`` of the data, which starts at ``data_start``."""
    data_start: int
    count: int = 0
    """How many tensors the header has (a repeated name once)."""
    first: tuple[str, ...] = ()
    """Its first ``NAMES_KEPT`` tensor names in sorted order, to name them in a message."""


def read_header(path: str | os.PathLike, only: frozenset[str] | None = None) -> SafetensorsHeader:
    """Parse and validate ``path``'s header against its size; raise HeaderError on any inconsistency. Of its
    tensors, those named in ``only`` are kept (all when None); the others are checked, counted and forgotten.

    Linear in the header's size and near its size in memory: the text is walked entry by entry (``_walk``), each
    entry parsed by the C scanner alone, and what is kept of the others is three integers each (where its name
    is, where its data begins and ends); one sort by offsets checks the data layout. A 100 MB header of 1.4
    million tensors costs about twice the time ``safe_open`` takes, in a fifth of its memory
    (benchmarks/gate_speed.py); running out of memory on one is said as such. A small header whose bytes (and
    file size) were parsed before is not parsed again (``_parsed_before``). The header returned is shared: not to
    be changed."""
    return _header(_read, path, only)


def read_header_at(source: RemoteFile, only: frozenset[str] | None = None) -> SafetensorsHeader:
    """``read_header`` of a file named by URL: its first ``_FIRST_READ`` bytes, then the rest of its header in one
    range (``compat.gate.read.source``)."""
    return _header(_read_ranges, source, only)


def _header(read, where, only: frozenset[str] | None) -> SafetensorsHeader:
    length = 0
    try:
        size, raw = read(where)
        length = len(raw)
        if type(raw) is bytes:  # a header read at once: at most _FIRST_READ bytes
            return _parsed_before(raw, size, only)
        text, exact = _decoded(raw)
        del raw  # the bytes go before the walk: a large header is held once, as text
        return _from_text(text, length, exact, size, only)
    except MemoryError:
        raise HeaderError(f"header{f' of {length} bytes' if length else ''} is too large to read in the memory "
                          "available") from None


def _parsed(raw: bytes, size: int, only: frozenset[str] | None) -> SafetensorsHeader:
    text, exact = _decoded(raw)
    return _from_text(text, len(raw), exact, size, only)


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


# An entry is read as dicts, which is all it needs unless a key repeats in it or a string holds an escape: then
# _check_strictly reads it again as pairs. Reading every integer through _json_int costs a call each, so only
# headers holding "-0" or a huge integer take it.
_DECODER = json.JSONDecoder(parse_float=_json_float, parse_constant=_no_constant)
_EXACT_DECODER = json.JSONDecoder(parse_float=_json_float, parse_constant=_no_constant, parse_int=_json_int)
_PAIRS_DECODER = json.JSONDecoder(object_pairs_hook=tuple, parse_float=_json_float, parse_constant=_no_constant,
                                  parse_int=_json_int)


def _decoded(raw: bytes | bytearray) -> tuple[str, bool]:
    """The header as text, and whether it must be read with every integer checked (``_json_int``): only a header
    holding ``-0`` or an integer of 309 digits (past a float's range) needs that, and checking each costs a call."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise HeaderError(f"header is not UTF-8: {exc.reason} at byte {8 + exc.start}") from None
    return text, "-0" in text or _huge_integer(raw)


def _huge_integer(raw: bytes | bytearray) -> bool:
    """Whether ``raw`` holds a run of 309 digits; looked for a megabyte at a time, so the map of digits is never
    the header's size."""
    step, more = 1 << 20, len(_HUGE_INTEGER) - 1
    return len(raw) > more and any(_HUGE_INTEGER in raw[at:at + step + more].translate(_DIGITS)
                                   for at in range(0, len(raw) - more, step))


@dataclass(slots=True)
class _Walked:
    """What ``_walk`` keeps of a header: the tensors asked for, and of every entry where its name is in the text
    and its data offsets (three integers in arrays, not objects), and its name's hash until repeats are found."""
    text: str
    scan: Callable
    kept: dict[str, tuple[TensorInfo, tuple[int, int]]]
    at: array
    begins: array
    ends: array
    hashes: array
    """Each entry's name's hash: a repeated name is looked for among equal hashes only."""
    wrong_size: set[int]
    """Offsets ``begin << 64 | end`` of entries whose span is not their shape's bytes (reported in layout order)."""
    first: list[str]


def _from_text(text: str, length: int, exact: bool, size: int, only: frozenset[str] | None) -> SafetensorsHeader:
    enabled = gc.isenabled()
    gc.disable()  # a large header's entries make millions of objects and no cycles: the collector would only cost
    try:
        try:
            walked = _walk(text, exact, only)
        except RecursionError:
            raise _too_deep() from None
        except ValueError as exc:  # JSONDecodeError, or a number or constant JSON does not have
            raise HeaderError(f"header (bytes 8..{8 + length}) is not valid JSON: {exc}") from None
        shadowed = _shadowed(walked)
        _check_layout(walked, shadowed, size - 8 - length, 8 + length)
    finally:
        if enabled:
            gc.enable()
    tensors = {name: info for name, (info, _) in walked.kept.items()}
    spans = {name: span for name, (_, span) in walked.kept.items()}
    return SafetensorsHeader(tensors, size, spans, 8 + length, len(walked.at) - len(shadowed), tuple(walked.first))


def _walk(text: str, exact: bool, only: frozenset[str] | None) -> _Walked:
    """Each entry of the header object in turn: its name, then its value by the C scanner (``__metadata__`` string
    by string, ``_walk_metadata``). A JSON error ends the walk at once; the first entry the crate's types refuse
    is raised after the walk, so an error of JSON anywhere (or nesting deeper than ``MAX_NESTING``) is what a
    header that has both is refused for, as serde_json, which parses before it reads, refuses it."""
    decoder = _EXACT_DECODER if exact else _DECODER
    scan = decoder.raw_decode  # one value at an index, by the C scanner
    escaped = "\\u" in text
    spaced = _SPACED_KEY.search(text) is not None
    walked = _Walked(text, scan, {}, array("q"), array("Q"), array("Q"), array("q"), set(), [])
    at, begins, ends, hashes, first, kept = walked.at, walked.begins, walked.ends, walked.hashes, walked.first, \
        walked.kept
    refused: HeaderError | None = None
    deep = metadata = False
    idx = _skip(text, 0)
    if text[idx:idx + 1] != "{":
        _not_an_object(text, decoder)
    idx = _skip(text, idx + 1)
    closed = text[idx:idx + 1] == "}"
    while not closed:
        if text[idx:idx + 1] != '"':
            raise JSONDecodeError("Expecting property name enclosed in double quotes", text, idx)
        where = idx
        name, idx = scanstring(text, idx + 1, True)
        if text[idx:idx + 1] != ":":  # the walk's whitespace is skipped inline: most headers have none
            idx = _skip(text, idx)
            if text[idx:idx + 1] != ":":
                raise JSONDecodeError("Expecting ':' delimiter", text, idx)
        idx += 1
        if text[idx:idx + 1] in _SPACE:
            idx = _skip(text, idx)
        start = idx
        if name == "__metadata__":
            if metadata and refused is None:
                refused = HeaderError("'__metadata__' appears twice in the header")
            metadata = True
            fault, idx, too_deep = _walk_metadata(text, idx, scan, escaped)
            deep = deep or too_deep
        else:
            value, idx = scan(text, idx)
            fault = None
            if refused is None:
                try:  # a dict shows as many keys as its text has '":', unless a key repeats, is spaced from its
                    # colon, or a string holds the pair: then it is read again as pairs
                    keys = len(value) if type(value) is dict else 0
                    if (escaped and text.find("\\u", where, idx) >= 0) or (spaced and _SPACED_KEY.search(
                            text, start, idx)) or text.count('":', start, idx) != keys:
                        _check_strictly(text, name, start)
                    dtype, dims, span = _read_entry(name, value)
                except HeaderError as exc:
                    fault = exc
                else:
                    begins.append(span[0])
                    ends.append(span[1])
                    at.append(where)
                    hashes.append(hash(name))
                    if not _sized(dtype, dims, span):
                        walked.wrong_size.add(span[0] << 64 | span[1])
                    if only is None or name in only:
                        kept[name] = TensorInfo(name, dtype, dims), span
                    if len(first) < NAMES_KEPT or name < first[-1]:
                        _keep_first(first, name)
            if fault is not None or refused is not None:  # what the refused entry and those after it hold
                deep = deep or _deeper(value, 2)
        refused = refused or fault
        separator = text[idx:idx + 1]
        if separator in _SPACE:
            idx = _skip(text, idx)
            separator = text[idx:idx + 1]
        if separator == ",":
            idx += 1
            if text[idx:idx + 1] in _SPACE:
                idx = _skip(text, idx)
        elif separator == "}":
            closed = True
        else:
            raise JSONDecodeError("Expecting ',' delimiter", text, idx)
    idx = _skip(text, idx + 1)
    if idx != len(text):
        raise JSONDecodeError("Extra data", text, idx)
    if deep:
        raise _too_deep()
    if refused is not None:
        raise refused
    return walked


def _walk_metadata(text: str, idx: int, scan: Callable, escaped: bool) -> tuple[HeaderError | None, int, bool]:
    """``__metadata__``'s value at ``idx``, string by string (a million of them are never one dict): what is wrong
    with it, where it ends, and whether it nests too deep."""
    if text[idx:idx + 1] != "{":
        value, end = scan(text, idx)
        try:
            _check_metadata(value)
        except HeaderError as exc:
            return exc, end, _deeper(value, 2)
        return None, end, False
    fault, deep = None, False
    idx = _skip(text, idx + 1)
    closed = text[idx:idx + 1] == "}"
    while not closed:
        if text[idx:idx + 1] != '"':
            raise JSONDecodeError("Expecting property name enclosed in double quotes", text, idx)
        key, idx = scanstring(text, idx + 1, True)
        idx = _skip(text, idx)
        if text[idx:idx + 1] != ":":
            raise JSONDecodeError("Expecting ':' delimiter", text, idx)
        idx = _skip(text, idx + 1)
        if text[idx:idx + 1] == '"':
            value, idx = scanstring(text, idx + 1, True)
            if escaped and fault is None:
                fault = _unpaired(key) or _unpaired(value)
        else:
            value, idx = scan(text, idx)
            if fault is None:
                fault = HeaderError(f"'__metadata__' value {_quote(key)} is {_show(value)}, not a string")
            deep = deep or _deeper(value, 3)
        idx, closed = _next_item(text, idx, "}")
    return fault, idx + 1, deep


def _next_item(text: str, idx: int, close: str) -> tuple[int, bool]:
    """After an item of an array or object: where the next item begins, or where ``close`` ends the container
    (and True)."""
    idx = _skip(text, idx)
    separator = text[idx:idx + 1]
    if separator == close:
        return idx, True
    if separator != ",":
        raise JSONDecodeError("Expecting ',' delimiter", text, idx)
    return _skip(text, idx + 1), False


def _skip(text: str, idx: int) -> int:
    """Past JSON's whitespace at ``idx`` (most often none: a call of the regex only where there is some)."""
    if text[idx:idx + 1] not in _SPACE:
        return idx
    space = _WHITESPACE(text, idx)
    return space.end() if space else idx


def _not_an_object(text: str, decoder: json.JSONDecoder) -> NoReturn:
    """Refuse a header that is JSON but no object, or not JSON; an array is read element by element, as the
    object is, so a large one is never held whole."""
    idx = _skip(text, 0)
    if text[idx:idx + 1] != "[":
        document = decoder.decode(text)
        _check_nesting(document)
        raise HeaderError(f"header is {_show(document)}, not a JSON object")
    deep = False
    idx = _skip(text, idx + 1)
    closed = text[idx:idx + 1] == "]"
    while not closed:
        value, idx = decoder.raw_decode(text, idx)
        deep = deep or _deeper(value, 2)
        idx, closed = _next_item(text, idx, "]")
    idx = _skip(text, idx + 1)
    if idx != len(text):
        raise JSONDecodeError("Extra data", text, idx)
    if deep:
        raise _too_deep()
    raise HeaderError("header is an array, not a JSON object")


def _keep_first(first: list[str], name: str) -> None:
    if name not in first:
        insort(first, name)
        del first[NAMES_KEPT:]


def _check_strictly(text: str, name: str, start: int) -> None:
    """What serde_json refuses and Python's json reads, in the entry ``name`` whose value is at ``start``: unpaired
    surrogate escapes, deep nesting, a field twice, a dtype object of several keys (read again as pairs)."""
    if found := _SURROGATE.search(name):
        raise _surrogate(name, found.group())
    pairs, _ = _PAIRS_DECODER.raw_decode(text, start)
    _check_values(pairs, 2)
    if type(pairs) is tuple:
        keys = [key for key, _ in pairs]
        for field in _FIELDS:
            if keys.count(field) > 1:
                raise _bad(name, f"'{field}' appears twice")
        code = dict(pairs).get("dtype")
    else:
        code = pairs[0] if type(pairs) is list and pairs else None
    if type(code) is tuple and len(code) > 1:
        raise _bad(name, f"dtype is an object of {len(code)} keys, not a string")


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


def _deeper(value: object, level: int) -> bool:
    try:
        _check_nesting(value, level)
    except HeaderError:
        return True
    return False


def _check_values(value: object, level: int = 1) -> None:
    """No string with an unpaired surrogate, no nesting past ``MAX_NESTING``, in a value read as pairs."""
    stack: list[tuple[object, int]] = [(value, level)]
    while stack:
        value, level = stack.pop()
        if type(value) is str:
            if found := _SURROGATE.search(value):
                raise _surrogate(value, found.group())
        elif type(value) is list or type(value) is tuple:
            if level > MAX_NESTING:
                raise _too_deep()
            items = value if type(value) is list else [part for pair in value for part in pair]
            stack.extend((item, level + 1) for item in items)


def _surrogate(value: str, found: str) -> HeaderError:
    return HeaderError(f"header string {_quote(value)} holds an unpaired UTF-16 surrogate escape "
                       f"\\u{ord(found):04x}, which the safetensors library refuses")


def _unpaired(value: str) -> HeaderError | None:
    found = _SURROGATE.search(value)
    return None if found is None else _surrogate(value, found.group())


def _shadowed(walked: _Walked) -> set[int]:
    """The entries a later entry of the same name replaces (the crate keeps a repeated name's last entry): found
    among entries of equal name hashes, their names read again from the text."""
    ordered = sorted(walked.hashes)
    repeated = {one for one, other in zip(ordered, islice(ordered, 1, None)) if one == other}
    del ordered
    shadowed: set[int] = set()
    if repeated:
        last: dict[str, int] = {}
        for ordinal, key in enumerate(walked.hashes):
            if key in repeated:
                name = _name_at(walked, ordinal)
                if name in last:
                    shadowed.add(last[name])
                last[name] = ordinal
    walked.hashes = array("q")
    return shadowed


def _check_layout(walked: _Walked, shadowed: set[int], body: int, data_start: int) -> None:
    """The crate's order: by offsets, each tensor where the previous ends and of its size; then the file's end.
    Offsets are sorted as one integer each (``begin << 64 | end``); a tensor is read again from the text only to
    say what is wrong with it."""
    pairs = zip(walked.begins, walked.ends)
    if shadowed:
        keys = [begin << 64 | stop for ordinal, (begin, stop) in enumerate(pairs) if ordinal not in shadowed]
    else:
        keys = [begin << 64 | stop for begin, stop in pairs]
    keys.sort()
    end, wrong = 0, walked.wrong_size
    for position, key in enumerate(keys):
        begin, stop = key >> 64, key & _U64_MAX
        if stop < begin or begin != end or (wrong and key in wrong):
            _check_one(walked, shadowed, keys, position)
        end = stop
    if end > body:  # past the body: some tensor ends there
        last = _name_at(walked, _ordinal(walked, shadowed, keys, len(keys) - 1))
        raise HeaderError(f"tensor {_quote(last)} ends at byte {data_start + end} but the file has "
                          f"{data_start + body} bytes: truncated ({end - body} bytes missing)")
    if end < body:
        raise HeaderError(f"{body - end} bytes follow the last tensor (ends at byte {data_start + end} of "
                          f"{data_start + body}): the safetensors library refuses such files")


def _check_one(walked: _Walked, shadowed: set[int], keys: list[int], position: int) -> None:
    """Raise what is wrong with the tensor at ``position`` in offset order, if anything: it ends before it begins,
    it is not where the previous one ends, or its span is not its shape's bytes."""
    info, (begin, stop) = _entry_at(walked, _ordinal(walked, shadowed, keys, position))
    if stop < begin:
        raise _bad(info.key, f"data_offsets [{begin}, {stop}] end before they begin")
    end = keys[position - 1] & _U64_MAX if position else 0
    if begin != end:
        previous = _name_at(walked, _ordinal(walked, shadowed, keys, position - 1)) if position else None
        raise _bad(info.key, _misplaced(begin, stop, end, previous))
    _check_size(info, begin, stop)


def _ordinal(walked: _Walked, shadowed: set[int], keys: list[int], position: int) -> int:
    """Which entry is ``position``-th in offset order: of entries with the same offsets, the sort kept their order
    in the header."""
    key = keys[position]
    run = position - bisect_left(keys, key)
    begin, stop = key >> 64, key & _U64_MAX
    for ordinal, span in enumerate(zip(walked.begins, walked.ends)):
        if span == (begin, stop) and ordinal not in shadowed:
            if not run:
                return ordinal
            run -= 1
    raise AssertionError(f"no entry at data offsets [{begin}, {stop}]")


def _name_at(walked: _Walked, ordinal: int) -> str:
    return scanstring(walked.text, walked.at[ordinal] + 1, True)[0]


def _entry_at(walked: _Walked, ordinal: int) -> tuple[TensorInfo, tuple[int, int]]:
    text = walked.text
    name, idx = scanstring(text, walked.at[ordinal] + 1, True)
    value, _ = walked.scan(text, _skip(text, _skip(text, idx) + 1))
    return _entry(name, value)


def _sized(dtype: str, dims: tuple[int, ...], span: tuple[int, int]) -> bool:
    """Whether ``span`` holds exactly the bytes of a ``dims`` tensor of ``dtype`` (``_check_size`` says how not)."""
    count = _elements(dims)
    need = None if count is None else count * ITEMSIZE[dtype]
    return need is not None and need * 8 <= _U64_MAX and span[1] - span[0] == need


def _too_deep() -> HeaderError:
    return HeaderError(f"header nests arrays or objects deeper than the {MAX_NESTING} levels the safetensors library "
                       "reads")


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
    dtype, dims, span = _read_entry(name, value)
    return TensorInfo(name, dtype, dims), span


def _read_entry(name: str, value: object) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """``_entry``'s dtype, shape and data offsets, no TensorInfo made: most entries of a large header are checked
    and forgotten."""
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
    dtype = SAFETENSORS_DTYPES.get(code) if type(code) is str else None
    if dtype is None:
        dtype = _dtype(name, code)
    dims, span = _sizes(name, "shape", shape), _sizes(name, "data_offsets", offsets)
    if len(span) != 2:
        raise _bad(name, f"data_offsets is an array of {len(span)}, not [begin, end]")
    begin, end = span
    return dtype, dims, (begin, end)


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
    if type(value) is list:
        for item in value:
            if type(item) is not int or item < 0 or item > _U64_MAX:
                break
        else:
            return tuple(value)
        for i, item in enumerate(value):
            if type(item) is not int or not 0 <= item <= _U64_MAX:
                raise _bad(name, f"{field}[{i}] is {_show(item)}, not an integer from 0 to 2**64-1")
    raise _bad(name, f"{field} is {_show(value)}, not an array")


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
