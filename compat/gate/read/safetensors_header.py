"""Read a safetensors header without touching tensor data: an 8-byte little-endian length, then JSON.

Parsed here rather than through ``safetensors.safe_open`` so a damaged file yields a precise reason
(truncated by how many bytes, which tensor, at which offset) instead of one opaque error, and so a header
check costs one ``open``, one ``fstat`` and (for headers under 4 KiB) one ``read``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from math import prod

from compat.gate.read.tensors import ITEMSIZE, SAFETENSORS_DTYPES, TensorInfo

MAX_HEADER = 100_000_000
"""The safetensors library refuses larger headers; so does the gate."""
_FIRST_READ = 4096  # one page: headers of hidden-state files are a few hundred bytes


class HeaderError(Exception):
    """The file is not a readable safetensors file; the message says why and where."""


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    tensors: dict[str, TensorInfo]
    file_size: int


def read_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Parse and validate ``path``'s header against its size; raise HeaderError on any inconsistency."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        head = os.read(fd, _FIRST_READ)
        if len(head) < 8:
            raise HeaderError(f"file has {size} bytes, fewer than the 8-byte header length of a safetensors file")
        length = int.from_bytes(head[:8], "little")
        if length > size - 8:
            raise HeaderError(f"header length field says {length} bytes but only {size - 8} follow it (byte 0): "
                              "truncated, or not a safetensors file")
        if length > MAX_HEADER:
            raise HeaderError(f"header length field says {length} bytes, over the {MAX_HEADER}-byte limit (byte 0)")
        raw = head[8:8 + length]
        while len(raw) < length:
            more = os.read(fd, length - len(raw))
            if not more:
                raise HeaderError(f"file ended inside the header at byte {8 + len(raw)}")
            raw += more
    finally:
        os.close(fd)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(f"header (bytes 8..{8 + length}) is not valid JSON: {type(exc).__name__}: {exc}") from exc
    if not isinstance(header, dict):
        raise HeaderError(f"header is a JSON {type(header).__name__}, not an object")
    header.pop("__metadata__", None)
    body = size - 8 - length
    tensors: dict[str, TensorInfo] = {}
    last_end = 0
    for name, entry in header.items():
        try:
            code, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            dims = tuple(int(d) for d in shape)
        except (TypeError, KeyError, ValueError) as exc:
            raise HeaderError(f"tensor {name!r}: malformed header entry {json.dumps(entry)[:120]} "
                              f"({type(exc).__name__}: {exc})") from exc
        dtype = SAFETENSORS_DTYPES.get(code)
        if dtype is None:
            raise HeaderError(f"tensor {name!r}: unknown dtype {code!r}")
        if any(d < 0 for d in dims) or not (0 <= begin <= end):
            raise HeaderError(f"tensor {name!r}: invalid shape {list(dims)} or offsets [{begin}, {end}]")
        need = prod(dims) * ITEMSIZE[dtype]
        if end - begin != need:
            raise HeaderError(f"tensor {name!r}: {list(dims)} {dtype} needs {need} bytes but its offsets "
                              f"[{begin}, {end}] span {end - begin}")
        if end > body:
            raise HeaderError(f"tensor {name!r} ends at byte {8 + length + end} but the file has {size} bytes: "
                              f"truncated ({8 + length + end - size} bytes missing)")
        last_end = max(last_end, end)
        tensors[name] = TensorInfo(name, dtype, dims)
    if last_end != body:
        raise HeaderError(f"{body - last_end} bytes follow the last tensor (ends at byte {8 + length + last_end} of "
                          f"{size}): the safetensors library refuses such files")
    return SafetensorsHeader(tensors, size)
