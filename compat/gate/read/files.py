"""Read one data file's header (or pickle skeleton) into a ``FileView``, by its suffix; never raises for a bad
file: what cannot be read becomes the view's ``ReadFailure``."""

from __future__ import annotations

import os
import stat
import traceback
from dataclasses import replace
from typing import Any

from compat.gate.read.layouts import Layout
from compat.gate.read.metadata import system_path
from compat.gate.read.safetensors_header import HeaderError, read_header, read_header_at
from compat.gate.read.samples import (
    VLLM_TENSORS,
    LayoutMismatch,
    missing_tensors_sample,
    names,
    sample_from_object,
    stacked_sample,
)
from compat.gate.read.source import RemoteFile, StorageError, is_url, open_remote
from compat.gate.read.torch_load import load_error, load_structure
from compat.gate.read.views import FailureKind, FileView, ReadFailure, SampleView
from compat.gate.read.zip_archive import FormatError

NOT_DATA = "move it out of the dataset's directory, or replace it with the data file it stands for"
TORCH_SUFFIXES = frozenset({".pt", ".pth", ".ckpt"})
DATA_SUFFIXES = TORCH_SUFFIXES | {".safetensors"}


def read_file(path: str, forced: Layout | None = None, hidden_size: int | None = None,
              layers: int | None = None, listed_regular: bool = False) -> FileView:
    """Read ``path``'s header (or pickle skeleton) into a FileView; never raises for a bad file.

    ``hidden_size`` and ``layers`` (expected values, if known) only disambiguate EAGLE-3's concatenated layers.
    A path that is not a regular file (a FIFO, a device, a socket, a dangling or looping link) is a finding
    without being opened: a FIFO would block forever, ``/dev/zero`` would never end, and opening some devices
    acts. A safetensors file its directory listing showed as regular (``listed_regular``, from
    ``compat.gate.discover``) is opened without a ``stat`` first (a sixth of its check): its reader opens
    without blocking and reads nothing from what ``fstat`` then shows is not a regular file, which covers a file
    swapped since it was listed. Whatever else a hostile file provokes (a RecursionError, a MemoryError) is a
    finding about that file too.
    """
    if "://" in path and is_url(path):
        return _read_url(path, forced, hidden_size, layers)
    size = 0
    try:
        if listed_regular and path.endswith(".safetensors"):
            return read_safetensors(path, forced)
        if not listed_regular and (system := system_path(path)):  # a link, or a name given: never /proc's
            return FileView(path, 0, failure=_unreadable(f"it resolves to {system}, a system file: never read",
                                                         "SystemFile", fix=NOT_DATA))
        info = os.stat(path)
    except OSError as exc:
        return FileView(path, 0, failure=_cannot_open(exc))
    except Exception as exc:  # noqa: BLE001 - one bad file is one finding; the run goes on
        return _crashed(path, file_size(path), exc)
    if not stat.S_ISREG(info.st_mode):
        return FileView(path, 0, failure=_unreadable(
            f"not a regular file but {_file_kind(info.st_mode)}: only regular files hold data", "NotRegularFile",
            fix=NOT_DATA))
    try:
        size = info.st_size
        if path.endswith(".safetensors"):
            return read_safetensors(path, forced)
        return read_torch(path, forced, hidden_size, layers, size)
    except Exception as exc:  # noqa: BLE001 - one bad file is one finding; the run goes on
        return _crashed(path, size, exc)


def _read_url(url: str, forced: Layout | None, hidden_size: int | None, layers: int | None) -> FileView:
    """``read_file`` of a file named by URL (``compat.gate.read.source``): only its header's byte ranges are read."""
    try:
        source = open_remote(url)
    except OSError as exc:
        return FileView(url, 0, failure=_cannot_open(exc))
    except Exception as exc:  # noqa: BLE001 - one bad file is one finding; the run goes on
        return _crashed(url, 0, exc)
    if not source.is_file:
        return FileView(url, 0, failure=_unreadable("not a file but a directory: only files hold data",
                                                    "NotRegularFile", fix=NOT_DATA))
    try:
        if url.endswith(".safetensors"):
            return read_safetensors(url, forced, source)
        return read_torch(url, forced, hidden_size, layers, source.size)
    except Exception as exc:  # noqa: BLE001 - one bad file is one finding; the run goes on
        return _crashed(url, source.size, exc)


def _crashed(path: str, size: int, exc: Exception) -> FileView:
    return FileView(path, size, failure=_unreadable(one_line(exc), type(exc).__name__,
                                                    traceback.format_exc(limit=-8)))


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _file_kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), f"mode {oct(mode)}")


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, at most ``limit`` characters, never empty."""
    text = " ".join(str(exc).split()) or f"{type(exc).__name__} with no message"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _unreadable(message: str, error_type: str, tb: str | None = None, fix: str | None = None) -> ReadFailure:
    return ReadFailure(FailureKind.UNREADABLE, message, error_type, tb, fix)


STORAGE_FIX = ("the storage failed, not the file: check its health and credentials and run the gate again (the "
               "file's bytes were not judged)")


def _cannot_open(exc: OSError) -> ReadFailure:
    if isinstance(exc, StorageError):
        return _unreadable(one_line(exc, 600), type(exc).__name__, fix=STORAGE_FIX)
    return _unreadable(f"cannot open: {exc.strerror or one_line(exc)}", type(exc).__name__)


def read_safetensors(path: str, forced: Layout | None, source: RemoteFile | None = None) -> FileView:
    try:
        header = read_header(path, VLLM_TENSORS) if source is None else read_header_at(source, VLLM_TENSORS)
    except HeaderError as exc:
        return FileView(path, file_size(path, source), failure=_unreadable(str(exc), type(exc).__name__))
    except OSError as exc:
        return FileView(path, file_size(path, source), failure=_cannot_open(exc))
    tensors = header.tensors
    layout = forced or Layout.VLLM_SAFETENSORS
    if layout is not Layout.VLLM_SAFETENSORS:
        return FileView(path, header.file_size, failure=ReadFailure(
            FailureKind.LAYOUT_MISMATCH, f"--layout {layout.value} reads torch.save files; this is a safetensors "
            f"file with tensors {names(header.first, header.count) or '(none)'}", LayoutMismatch.__name__))
    hs, ids = tensors.get("hidden_states"), tensors.get("token_ids")
    if hs is None or ids is None:
        return FileView(path, header.file_size, (missing_tensors_sample(path, header),))
    return FileView(path, header.file_size, (stacked_sample(path, hs, ids),))


def read_torch(path: str, forced: Layout | None, hidden_size: int | None, layers: int | None, size: int) -> FileView:
    try:
        obj, shared = load_structure(path)
        samples = _samples_of_shared(path, obj, forced, hidden_size, layers) if shared else \
            _samples(path, obj, forced, hidden_size, layers)
    except LayoutMismatch as exc:
        return FileView(path, size, failure=ReadFailure(FailureKind.LAYOUT_MISMATCH, str(exc), type(exc).__name__))
    except FormatError as exc:  # not a torch.save file, or an archive refused unread (ArchiveRefused)
        return FileView(path, size, failure=_unreadable(one_line(exc), type(exc).__name__))
    except OSError as exc:
        return FileView(path, size, failure=_cannot_open(exc))
    except Exception as exc:  # noqa: BLE001 - any failure to load is a finding about this file, not a crash
        return FileView(path, size, failure=_unreadable(load_error(exc), type(exc).__name__,
                                                        traceback.format_exc(limit=-8)))
    return FileView(path, size, samples)


def _samples(path: str, obj: Any, forced: Layout | None, hidden_size: int | None,
             layers: int | None) -> tuple[SampleView, ...]:
    items = list(enumerate(obj)) if isinstance(obj, (list, tuple)) else [(None, obj)]
    if not items:
        raise LayoutMismatch("holds an empty list")
    return tuple(sample_from_object(path, i, item, forced, hidden_size, layers) for i, item in items)


def _samples_of_shared(path: str, obj: Any, forced: Layout | None, hidden_size: int | None,
                       layers: int | None) -> tuple[SampleView, ...]:
    """``_samples`` of stubs that files with the same pickle share (``load_structure``): made once per object and
    hints, and given each file's path. A view says nothing of its file but its path (``SampleView.file``), so
    files of one token count share their tensors' views too, and a worker's results pickle each only once."""
    key = (id(obj), forced, hidden_size, layers)
    known = _views_of.get(key)
    if known is None or known[0] is not obj:  # the memo holds its objects, so an id names one object while kept
        if len(_views_of) >= _VIEWS_KEPT:
            _views_of.clear()
        known = _views_of[key] = (obj, _samples(path, obj, forced, hidden_size, layers))
    return tuple(replace(s, file=path) for s in known[1])


_VIEWS_KEPT = 256
"""As many as ``torch_header`` keeps unpickled pickles."""
_views_of: dict[tuple[int, Layout | None, int | None, int | None], tuple[Any, tuple[SampleView, ...]]] = {}


def file_size(path: str, source: RemoteFile | None = None) -> int:
    """The size of ``path`` in bytes (``source``'s as listed, for a URL); 0 when it cannot be stat'ed."""
    if source is not None:
        return source.size
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
