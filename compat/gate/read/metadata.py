"""Small JSON metadata beside the data (``data_config.json``, a model's ``config.json``) read within bounds.

A configuration file is a few kilobytes: one over ``MAX_BYTES`` is refused from its size before a byte is read, a
special file (a FIFO, a device, a socket) from its mode before it is opened (opening a FIFO waits for a writer),
and a name that resolves into ``/proc``, ``/sys`` or ``/dev`` is never read at all (``/proc/self/environ``
holds the environment). Text must be UTF-8 JSON nested at most ``MAX_DEPTH`` deep (Python's reader recurses once
per level) with no ``NaN``/``Infinity`` (not JSON). Every refusal is a ``ValueError`` whose message says what was
found; the caller names the file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
SYSTEM = ("/proc", "/sys", "/dev")
"""Where a file name never leads: what is there is the machine's or the process's, not a dataset's."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def system_path(path: str | os.PathLike[str]) -> str | None:
    """Where ``path`` resolves to, when that is under ``/proc``, ``/sys`` or ``/dev``; None otherwise."""
    real = os.path.realpath(path)
    return real if any(real == top or real.startswith(top + "/") for top in SYSTEM) else None


def _kind(mode: int) -> str | None:
    return None if stat.S_ISREG(mode) else next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def read_local(path: str | os.PathLike[str], limit: int = MAX_BYTES) -> bytes:
    """The bytes of a small local file, refused (``ValueError``) where it is a system file, a special file or
    over ``limit`` bytes."""
    system = system_path(path)
    if system is not None:
        raise ValueError(f"it resolves to {system}, a system file: never read")
    kind = _kind(os.stat(path).st_mode)
    if kind is not None:
        raise ValueError(f"{kind}, not a file: not opened")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        opened = os.fstat(fd)  # what was opened, should the name have changed since
        kind = _kind(opened.st_mode)
        if kind is not None:
            raise ValueError(f"{kind}, not a file")
        if opened.st_size > limit:
            raise ValueError(f"{opened.st_size} bytes, over the {limit}-byte limit of a configuration file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"over the {limit}-byte limit of a configuration file (it grew while read)")
    return b"".join(chunks)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a writer of JSON never writes it)")


def loads(data: bytes | str) -> Any:
    """The JSON value ``data`` holds, refused (``ValueError``) where it is not UTF-8, nested deeper than
    ``MAX_DEPTH`` or holds ``NaN``/``Infinity``."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > MAX_DEPTH:
                raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return json.loads(text, parse_constant=_not_json)
