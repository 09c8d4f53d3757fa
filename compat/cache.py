"""Where downloaded releases and parsed surfaces are kept, and atomic file writes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO


def cache_dir() -> Path:
    """The cache root: $COMPAT_CACHE_DIR, else $XDG_CACHE_HOME/compat, else ~/.cache/compat."""
    explicit = os.environ.get("COMPAT_CACHE_DIR")
    if explicit:
        root = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(base) / "compat"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask is process-wide and the matrix writes from threads


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    with _replacing(path, "wb") as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[TextIO]:
    """A text file (UTF-8) written in parts that replaces ``path`` when the block ends without an exception:
    readers see the old file or the new one, never half (a report too large to hold as one string)."""
    with _replacing(path, "w") as handle:
        yield handle


@contextlib.contextmanager
def _replacing(path: Path, mode: str) -> Iterator[Any]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_UMASK)  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
