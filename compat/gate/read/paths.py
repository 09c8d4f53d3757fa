"""A path the tensor libraries can open whatever bytes its name holds.

Python keeps a file name that is not UTF-8 as a ``str`` with lone surrogates (``os.fsdecode``); the safetensors
library refuses such a path ("is not valid UTF-8") and ``torch.load`` cannot encode it, so a good file would be
called damaged for its name alone. Such a file is opened by its bytes and handed over as the name of its open
descriptor (``/proc/self/fd/N``), which both memory-map like the file itself. A file named by URL is handed over
as a temporary local copy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from compat.gate.read.source import is_url, local_copy


@contextmanager
def openable(path: str) -> Iterator[str]:
    """``path`` itself when it is UTF-8, else the name of a descriptor open on it, valid inside the block; a file
    named by URL is copied first (``local_copy``): the libraries open files by name."""
    if "://" in path and is_url(path):
        with local_copy(path) as name:
            yield name
        return
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        yield path
        return
    fd = os.open(os.fsencode(path), os.O_RDONLY)
    try:
        yield f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else f"/dev/fd/{fd}"
    finally:
        os.close(fd)
