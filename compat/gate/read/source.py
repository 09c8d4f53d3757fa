"""Data files named by URL (``s3://``, ``gs://``, ``file://``, ``memory://``: any fsspec protocol), read by byte
ranges; local files never come here (their readers keep their own descriptors, ``os.pread`` and ``mmap``).

A ``RemoteFile`` reads only what a reader asks: a small read (a header, a zip member's local header) fetches one
``BLOCK`` from its offset and keeps it, so the next small read nearby costs no request; a large one (tensor
values, in the chunks ``--values`` asks) is fetched exactly and kept nowhere. Every request is retried with
backoff while the storage fails transiently (the client library's own retries run first, inside each attempt);
one that still fails raises ``StorageError``, which the readers report as a storage error, never as damaged
data. A short answer counts as a failure: the listing gave the file's size, and a reader is never handed fewer
bytes than that size promises.

``python -m compat.gate --storage-option KEY=VALUE`` (``configure``) passes options to every URL's filesystem
(``endpoint_url``, ``anon``, ``key``...), after fsspec's own configuration (``FSSPEC_S3_ENDPOINT_URL`` and the
like) and the storage's (``AWS_*``).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard

from compat.errors import CompatError

BLOCK = 4 << 10
"""What a small read fetches from its offset, and keeps (at most ``_BLOCKS`` per file)."""
_BLOCKS = 64
ATTEMPTS = 5
"""Tries of one request before its file is reported unreadable (``StorageError``)."""
BACKOFF = 0.2
"""Seconds before the first retry, doubled before each next."""
COPY_CHUNK = 8 << 20
"""A file ``torch.load`` must read itself (``local_copy``) is copied in chunks of this size."""
MAX_TEXT = 16 << 20

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_EXTRAS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs")}
_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError, TypeError,
              NotImplementedError, KeyError)
"""Failures a retry cannot mend: a file gone or refused, a call the filesystem does not take."""

_options: dict[str, Any] = {}


class StorageError(OSError):
    """A request to the storage still failed after ``ATTEMPTS`` tries: the file's bytes were not judged."""


def is_url(path: object) -> TypeGuard[str]:
    """``protocol://...``: a file of an fsspec filesystem, not a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def configure(options: Mapping[str, Any]) -> None:
    """The storage options every URL's filesystem is opened with from now on (``--storage-option``)."""
    _options.clear()
    _options.update(options)


def configured() -> dict[str, Any]:
    """The storage options ``configure`` set: what a worker process is given, to read URLs as this process does."""
    return dict(_options)


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--storage-option``: the value as JSON when it reads as JSON (``true``, ``3``,
    ``{"region_name": "x"}``), else as text."""
    import json

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CompatError(f"--storage-option {text!r}: expected KEY=VALUE (e.g. endpoint_url=http://127.0.0.1:9000)")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path it names there; CompatError when none can be opened."""
    protocol = url.split("://", 1)[0].lower()
    try:
        import fsspec
    except ImportError:
        raise CompatError(f"{url}: reading URLs needs fsspec: pip install 'vllm-compat[{_extra(protocol)}]'") from None
    try:
        return fsspec.core.url_to_fs(url, **_options)
    except ImportError as exc:
        package, extra = _EXTRAS.get(protocol, (None, None))
        need = f"{package}: pip install 'vllm-compat[{extra}]'" if package else f"what fsspec names ({exc})"
        raise CompatError(f"{url}: reading {protocol}:// URLs needs {need}") from None
    except ValueError as exc:
        if "not known" in str(exc).lower():
            raise CompatError(f"{url}: unknown storage protocol {protocol!r} (fsspec knows no such filesystem)") \
                from None
        raise CompatError(f"{url}: {type(exc).__name__}: {exc}") from None
    except TypeError as exc:
        raise CompatError(f"{url}: the storage options do not suit {protocol}:// ({exc})") from None


def _extra(protocol: str) -> str:
    return _EXTRAS.get(protocol, (None, "s3"))[1]


def retried(what: str, call, *args, **kwargs):
    """``call(*args, **kwargs)``, tried ``ATTEMPTS`` times while it fails transiently; StorageError after."""
    for attempt in range(ATTEMPTS):
        try:
            return call(*args, **kwargs)
        except _PERMANENT:
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure of a request may pass: it is tried again
            error = exc
        if attempt + 1 < ATTEMPTS:
            time.sleep(BACKOFF * 2 ** attempt)
    message = " ".join(str(error).split()) or "no message"
    raise StorageError(f"storage error: {what} failed {ATTEMPTS} times, last with {type(error).__name__}: "
                       f"{message[:300]}") from error


class _Short(Exception):
    """The storage answered fewer bytes than asked of a file the listing says holds them."""


class RemoteFile:
    """One file of a filesystem, its size and identity read once (from the listing when the filesystem keeps
    it), its bytes read by range; ``fetched`` counts the bytes that crossed the wire."""

    def __init__(self, url: str, fs: Any, path: str, info: Mapping[str, Any]) -> None:
        self.url, self.fs, self.path = url, fs, path
        self.is_file = info.get("type", "file") == "file"
        self.size = int(info.get("size") or 0)
        tag = next((info[k] for k in ("ETag", "etag", "md5Hash", "mtime", "LastModified", "created") if k in info),
                   None)
        self.identity = (url, self.size, str(tag))
        self.fetched = 0
        self._blocks: list[tuple[int, bytes]] = []

    def read(self, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset`` (fewer at the end of the file)."""
        end = min(self.size, offset + length)
        if end <= offset:
            return b""
        for start, block in self._blocks:
            if start <= offset and end <= start + len(block):
                return block[offset - start:end - start]
        if end - offset >= BLOCK:
            return self._fetch(offset, end)
        block = self._fetch(offset, min(self.size, offset + BLOCK))
        self.keep(offset, block)
        return block[:end - offset]

    def keep(self, offset: int, data: bytes) -> None:
        """Serve later reads within ``data`` (the bytes at ``offset``, fetched by the caller) from it."""
        self._blocks.append((offset, data))
        if len(self._blocks) > _BLOCKS:
            del self._blocks[0]

    def readinto(self, into: memoryview, offset: int) -> None:
        """Fill ``into`` with the bytes at ``offset``; EOFError when the file (by its listed size) ends first."""
        if offset + len(into) > self.size:
            raise EOFError(f"the file ends at byte {self.size}, inside a tensor its header places there: it changed "
                           "since it was read")
        into[:] = self.read(offset, len(into))

    def _fetch(self, start: int, end: int) -> bytes:
        data = retried(f"reading bytes {start}..{end} of {self.url}", self._range, start, end)
        self.fetched += len(data)
        return data

    def _range(self, start: int, end: int) -> bytes:
        data = self.fs.cat_file(self.path, start=start, end=end)
        if len(data) != end - start:
            raise _Short(f"the storage answered {len(data)} of the {end - start} bytes asked")
        return bytes(data)


_opened: dict[str, RemoteFile] | None = None


@contextmanager
def one_check() -> Iterator[None]:
    """Within the block (one file's check: ``compat.gate.filestep``), ``open_remote`` of a URL opened before in
    it gives the same ``RemoteFile``: its size looked up once, the blocks it kept shared. Reading a file's header,
    its zip directory and its values opens it up to three times, and where the filesystem has no listing cached
    (a worker process) each open was a request (S3: a ``HEAD``)."""
    global _opened
    outer, _opened = _opened, {} if _opened is None else _opened
    try:
        yield
    finally:
        _opened = outer


def open_remote(url: str) -> RemoteFile:
    """``url`` opened for range reads; FileNotFoundError when it is not there, StorageError when the storage
    does not answer."""
    if _opened is not None and url in _opened:
        return _opened[url]
    fs, path = filesystem(url)
    info = retried(f"looking up {url}", fs.info, path)
    remote = RemoteFile(url, fs, path, info)
    if _opened is not None:
        _opened[url] = remote
    return remote


def read_text(url: str) -> str:
    """A small text file (``data_config.json``) named by URL."""
    source = open_remote(url)
    if source.size > MAX_TEXT:
        raise ValueError(f"{source.size} bytes, over the {MAX_TEXT}-byte limit of a configuration file")
    return source.read(0, source.size).decode()


@contextmanager
def local_copy(url: str) -> Iterator[str]:
    """A temporary local copy of ``url`` (written in ``COPY_CHUNK`` reads, never held whole), for what only a
    library that opens files by name reads (``torch.load`` of a legacy file or of a pickle that is not plain
    tensors); removed after the block, where a memory map of it stays valid."""
    source = open_remote(url)
    handle, name = tempfile.mkstemp(prefix="compat-gate-", suffix=os.path.splitext(url)[1])
    try:
        with os.fdopen(handle, "wb") as out:
            for offset in range(0, source.size, COPY_CHUNK):
                out.write(source.read(offset, COPY_CHUNK))
        yield name
    finally:
        os.unlink(name)


def listed_stamp(info: Mapping[str, Any]) -> tuple[int, int, str | None] | None:
    """What says a listed file is unchanged (``compat.gate.state``), from what its listing gave, no request of
    its own: its size and ETag (S3, GCS, Azure: a digest of its bytes, the same in a listing and a ``HEAD``), or,
    where the filesystem keeps no ETag (``memory://``, ``file://``), its size and modification time in
    nanoseconds (to the microsecond: a listing may give a float where a lookup gives a datetime). None where it
    keeps neither: such a file is never recorded."""
    size = int(info.get("size") or 0)
    etag = next((info[k] for k in ("ETag", "etag") if info.get(k)), None)
    if etag is not None:
        return size, 0, str(etag)
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        micros = _microseconds(info.get(key))
        if micros is not None:
            return size, micros * 1000, None
    return None


def _microseconds(value: Any) -> int | None:
    """A time as a filesystem lists it (seconds since the epoch, a datetime, ISO text) in microseconds."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return (value - _EPOCH) // _MICROSECOND
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return round(value * 1e6)
    return None


def listing(url: str) -> tuple[bool, dict[str, tuple[int, int, str | None] | None]]:
    """Whether ``url`` names one file, and the files under it (itself when it is one): each path relative to
    ``url`` (``""`` for the file itself) with its ``listed_stamp``. CompatError when nothing is there."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)  # a listing kept from an earlier run in this process may be stale
    try:
        info = retried(f"looking up {url}", fs.info, path)
    except FileNotFoundError:
        raise CompatError(f"{url}: no such file or directory") from None
    except StorageError as exc:
        raise CompatError(f"{url}: {exc}") from None
    if info.get("type", "file") == "file":
        return True, {"": listed_stamp(info)}
    try:
        found = retried(f"listing {url}", fs.find, path, detail=True)
    except StorageError as exc:
        raise CompatError(f"{url}: {exc}") from None
    top = path.rstrip("/") + "/"
    return False, {name[len(top):]: listed_stamp(entry) for name, entry in found.items()
                   if name.startswith(top) and entry.get("type", "file") == "file"}


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    try:
        return bool(retried(f"looking up {url}", fs.isfile, path))
    except OSError:
        return False
