"""Builds named by URL: the Python files of a remote wheel read with HTTP range requests, whole archives
downloaded once, and one commit of a git repository as a source archive.

vLLM's per-commit wheels hold hundreds of megabytes of compiled code around a few tens of megabytes of
Python. ``RangeFile`` is a read-only file over a URL that fetches only the byte ranges read; the standard
``zipfile`` module reads the archive's directory through it, and the members the audit needs (``.py``, the
metadata) are fetched first in a few coalesced requests. A server that ignores ``Range`` sends the whole
file, which is then read from memory: the fallback is a plain download.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.parse
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from compat.cache import atomic_write_bytes, atomic_write_text, cache_dir
from compat.errors import BadArchive, CompatError, IndexUnreachable

TIMEOUT_S = 120.0
_GAP = 256 * 1024
"""Members closer than this are fetched in one request (a request costs more than a few hundred KiB)."""


@dataclass
class Transfer:
    """What reading a remote archive cost."""

    size: int = 0
    fetched: int = 0
    requests: int = 0
    ranged: bool = True

    @property
    def ratio(self) -> float:
        return self.fetched / self.size if self.size else 1.0


class RangeFile(io.RawIOBase):
    """A seekable, read-only file over ``url`` that fetches the ranges read (and keeps them)."""

    def __init__(self, url: str, transfer: Transfer | None = None) -> None:
        super().__init__()
        self.url = url
        self.transfer = transfer or Transfer()
        self.pos = 0
        self._spans: list[tuple[int, bytes]] = []
        self._lock = threading.Lock()
        self._whole: bytes | None = None
        tail = self._get(f"bytes=-{64 * 1024}")
        if tail is None:
            return  # the whole file arrived: read from memory
        self.size, data = tail
        self._keep(self.size - len(data), data)

    # ---- HTTP ----------------------------------------------------------------------------
    def _get(self, byte_range: str) -> tuple[int, bytes] | None:
        """Fetch a range: (file size, bytes) on 206; None when the server sent the whole file instead."""
        import urllib.request  # here: http.client and email cost an audit that downloads nothing 15 ms

        request = urllib.request.Request(self.url, headers={"Range": byte_range, "Accept-Encoding": "identity"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                body = response.read()
                status = response.status
                content_range = response.headers.get("Content-Range", "")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise IndexUnreachable(f"cannot fetch {self.url}: {type(exc).__name__}: {exc}") from exc
        with self._lock:
            self.transfer.requests += 1
            self.transfer.fetched += len(body)
        if status == 206 and "/" in content_range:
            total = content_range.rsplit("/", 1)[1]
            if total.isdigit():
                self.transfer.size = int(total)
                return int(total), body
        self._whole = body
        self.size = self.transfer.size = len(body)
        self.transfer.ranged = False
        return None

    def _keep(self, start: int, data: bytes) -> None:
        with self._lock:
            self._spans.append((start, data))

    def _cached(self, start: int, end: int) -> bytes | None:
        with self._lock:
            for begin, data in self._spans:
                if begin <= start and end <= begin + len(data):
                    return data[start - begin:end - begin]
        return None

    def prefetch(self, ranges: list[tuple[int, int]], workers: int = 4) -> None:
        """Fetch these [start, end) ranges, merged where close, in parallel."""
        if self._whole is not None or not ranges:
            return
        merged: list[list[int]] = []
        for start, end in sorted(ranges):
            if merged and start - merged[-1][1] <= _GAP:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])

        def one(span: list[int]) -> None:
            got = self._get(f"bytes={span[0]}-{min(span[1], self.size) - 1}")
            if got is not None:
                self._keep(span[0], got[1])

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, merged))

    # ---- the file protocol ---------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        if self._whole is not None:
            data = self._whole[self.pos:end]
        else:
            cached = self._cached(self.pos, end)
            if cached is None:
                got = self._get(f"bytes={self.pos}-{end - 1}")
                data = got[1] if got is not None else (self._whole or b"")[self.pos:end]
                if got is not None:
                    self._keep(self.pos, data)
            else:
                data = cached
        self.pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def installed_path(path: PurePosixPath) -> PurePosixPath:
    """Where a wheel member lands when installed: ``name.data/purelib/pkg/x.py`` (and ``platlib``) is ``pkg/x.py``."""
    parts = path.parts
    if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
        return PurePosixPath(*parts[2:])
    return path


def _wanted(name: str) -> bool:
    path = PurePosixPath(name)
    return path.suffix == ".py" or path.name in ("METADATA", "PKG-INFO")


def wheel_sources(url: str, transfer: Transfer | None = None) -> Path:
    """The Python files (and metadata) of the wheel at ``url``, in a cache directory; read once."""
    dest = cache_dir() / "remote" / _key(url)
    if (dest / ".complete").exists():
        return dest
    transfer = transfer or Transfer()
    try:
        handle = RangeFile(url, transfer)
        archive = zipfile.ZipFile(handle)
        members = [info for info in archive.infolist() if _wanted(info.filename) and _safe(info.filename)]
        # A local header is 30 bytes, the name and an extra field the directory does not always repeat.
        handle.prefetch([(m.header_offset, m.header_offset + 30 + len(m.filename.encode()) + len(m.extra) + 1024
                          + m.compress_size) for m in members])
        staging = Path(tempfile.mkdtemp(dir=_mkdir(dest.parent), prefix=".stage-"))
        for member in members:
            target = staging.joinpath(*installed_path(PurePosixPath(member.filename)).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(member))
    except (zipfile.BadZipFile, EOFError, ValueError, KeyError) as exc:
        raise BadArchive(f"{url}: not a readable wheel: {type(exc).__name__}: {exc}") from exc
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(staging, dest)
    atomic_write_text(dest / ".complete", f"{transfer.fetched} of {transfer.size} bytes\n")
    return dest


def download(url: str) -> Path:
    """A whole file (an sdist, a wheel from a server without ranges), downloaded once into the cache."""
    name = PurePosixPath(urlparse(url).path).name or "download"
    target = cache_dir() / "remote" / f"{_key(url)}-{name}"
    if target.exists():
        return target
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            body = response.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise IndexUnreachable(f"cannot fetch {url}: {type(exc).__name__}: {exc}") from exc
    atomic_write_bytes(target, body)
    return target


def git_commit(url: str, ref: str) -> Path:
    """The files of one commit of a git repository, as a source tree in the cache (nothing is built).

    GitHub repositories are fetched as the commit's source archive; any other URL (``file://`` included) with
    a shallow fetch of that one ref."""
    dest = cache_dir() / "remote" / _key(f"{url}@{ref}")
    if (dest / ".complete").exists():
        return dest
    _mkdir(dest.parent)
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".stage-"))
    parsed = urllib.parse.urlparse(url)
    try:
        if parsed.netloc == "github.com":
            archive = download(f"https://github.com{parsed.path.removesuffix('.git')}/archive/{ref}.tar.gz")
            shutil.unpack_archive(str(archive), str(staging), filter="data")
            tops = [p for p in staging.iterdir() if p.is_dir()]
            source = tops[0] if len(tops) == 1 else staging
        else:
            repo = staging / "repo"
            _git("init", "-q", str(repo))
            _git("-C", str(repo), "fetch", "-q", "--depth", "1", url, ref)
            _git("-C", str(repo), "checkout", "-q", "FETCH_HEAD")
            shutil.rmtree(repo / ".git")
            source = repo
    except (OSError, shutil.ReadError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else exc
        raise CompatError(f"cannot read {url}@{ref}: {detail}") from exc
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(source, dest)
    shutil.rmtree(staging, ignore_errors=True)
    (dest / ".complete").touch()
    return dest


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True, text=True, timeout=600)


def _safe(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
