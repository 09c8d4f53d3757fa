"""A small client for the package index (PEP 691 JSON, PEP 503 HTML as fallback).

Releases are resolved here and their files downloaded once into the cache; nothing is
installed or imported. The index is the one pip is configured with.
"""

from __future__ import annotations

import configparser
import hashlib
import html.parser
import json
import os
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from compat.cache import atomic_write_bytes, atomic_write_text, cache_dir
from compat.errors import IndexUnreachable, UnknownVersion

DEFAULT_INDEX = "https://pypi.org/simple"
LISTING_TTL_S = 3600
_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    version: Version
    is_sdist: bool
    pure_python: bool
    sha256: str | None
    yanked: bool
    uploaded: datetime | None = None
    """When the file was uploaded (PEP 700 ``upload-time``; None from an index that does not say)."""


def index_url() -> str:
    """The index to read: $COMPAT_INDEX_URL, $PIP_INDEX_URL, pip's config files, else PyPI."""
    for var in ("COMPAT_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(var):
            return os.environ[var].rstrip("/")
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config"))
    candidates = ["/etc/pip.conf", "/etc/xdg/pip/pip.conf", os.path.join(xdg, "pip", "pip.conf"),
                  os.path.join(home, ".pip", "pip.conf")]
    if os.environ.get("PIP_CONFIG_FILE"):
        candidates.append(os.environ["PIP_CONFIG_FILE"])
    found = DEFAULT_INDEX
    for path in candidates:
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        for section in ("global", "download", "install"):
            if parser.has_option(section, "index-url"):
                found = parser.get(section, "index-url").strip()
    return found.rstrip("/")


def _fetch(url: str, accept: str | None = None, timeout: float = 60.0) -> tuple[bytes, str]:
    # Imported here: HTTP and TLS cost tens of milliseconds to import, and a warm audit never fetches.
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise UnknownVersion(f"the package index at {url} has no such project (HTTP 404)") from exc
        raise IndexUnreachable(f"package index request {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise IndexUnreachable(f"cannot reach the package index at {url}: {reason}") from exc


class _LinkParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def _parse_listing(body: bytes, content_type: str, base: str) -> list[dict[str, Any]]:
    if "json" in content_type:
        return list(json.loads(body)["files"])
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", "replace"))
    files = []
    for link in parser.links:
        href = link.get("href") or ""
        url = urllib.parse.urljoin(base, href)
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        fragment = urllib.parse.urlsplit(url).fragment
        hashes = dict([fragment.split("=", 1)]) if "=" in fragment else {}
        files.append({"filename": filename, "url": url.split("#", 1)[0], "hashes": hashes,
                      "yanked": "data-yanked" in link})
    return files


def _uploaded(entry: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(entry["upload-time"])
    except (KeyError, TypeError, ValueError):
        return None


def _to_index_file(entry: dict[str, Any]) -> IndexFile | None:
    name = entry["filename"]
    try:
        if name.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(name)
            pure = all(tag.abi == "none" and tag.platform == "any" for tag in tags)
            return IndexFile(name, entry["url"], version, False, pure,
                             entry.get("hashes", {}).get("sha256"), bool(entry.get("yanked")), _uploaded(entry))
        if name.endswith((".tar.gz", ".zip")):
            _, version = parse_sdist_filename(name)
            return IndexFile(name, entry["url"], version, True, True,
                             entry.get("hashes", {}).get("sha256"), bool(entry.get("yanked")), _uploaded(entry))
    except (InvalidVersion, ValueError):
        return None
    return None


def list_files(project: str, *, refresh: bool = False) -> list[IndexFile]:
    """Every release file of ``project`` on the index (listing cached for an hour)."""
    project = canonicalize_name(project)
    base = f"{index_url()}/{project}/"
    cached = cache_dir() / "index" / f"{project}.json"
    entries = None
    if not refresh and cached.exists() and time.time() - cached.stat().st_mtime < LISTING_TTL_S:
        try:
            entries = json.loads(cached.read_text())
        except (OSError, ValueError):
            entries = None
    if entries is None:
        body, content_type = _fetch(base, _JSON_ACCEPT)
        try:
            entries = _parse_listing(body, content_type, base)
        except (ValueError, KeyError) as exc:
            raise IndexUnreachable(f"the package index at {base} answered with an unreadable listing: {exc}") from exc
        atomic_write_text(cached, json.dumps(entries))
    files = [f for f in map(_to_index_file, entries) if f is not None]
    return files


def parse_request(text: str) -> tuple[str, SpecifierSet | None]:
    """'latest' -> (latest, None); '0.16.0' -> ==0.16.0; '>=0.12,<0.17' -> that set."""
    text = text.strip()
    if text in ("latest", ""):
        return "latest", None
    try:
        Version(text)
        return "exact", SpecifierSet(f"=={text}")
    except InvalidVersion:
        pass
    try:
        return "range", SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise UnknownVersion(f"'{text}' is neither a version, a specifier, nor 'latest'") from exc


def releases(project: str) -> list[Version]:
    """Release versions with a usable file, oldest first (yanked and pre-releases excluded)."""
    versions = {f.version for f in list_files(project) if not f.yanked and not f.version.is_prerelease}
    return sorted(versions)


def resolve(project: str, request: str, available: Sequence[Version] | None = None) -> Version:
    """The single release ``request`` names: the newest one matching it; among ``available`` when given (else the
    index's ``releases``)."""
    kind, spec = parse_request(request)
    available = releases(project) if available is None else sorted(available)
    if spec is None:
        if not available:
            raise UnknownVersion(f"the package index lists no release of {project}")
        return available[-1]
    matching = [v for v in available if v in spec]
    if not matching and kind == "exact":
        exact = next((f.version for f in list_files(project) if f.version in spec), None)
        if exact is not None:
            return exact
    if not matching:
        near = ", ".join(str(v) for v in available[-5:])
        raise UnknownVersion(f"no release of {project} matches '{request}' (newest: {near})")
    return matching[-1]


def resolve_range(project: str, request: str) -> list[Version]:
    """Every release matching a specifier, oldest first."""
    _, spec = parse_request(request)
    available = releases(project)
    return [v for v in available if spec is None or v in spec]


def choose_file(project: str, version: Version) -> IndexFile:
    """The file whose Python sources we read: what ``pip install`` puts on disk, so a wheel before the sdist.

    A pure-Python wheel first, then a compiled wheel (Linux x86-64 first; only its Python files are fetched, with
    range requests), the sdist only for a release without wheels. An sdist is not what runs: vLLM's ships stale
    placeholders for what its build generates or copies in (``vllm/vllm_flash_attn``, ``vllm/third_party``)."""
    files = [f for f in list_files(project) if f.version == version]
    if not files:
        raise UnknownVersion(f"the package index has no files for {project} {version}")
    return min(files, key=_reading_order)


def _reading_order(file: IndexFile) -> tuple[int, str]:
    if not file.is_sdist:
        return (0 if file.pure_python else 1 if "linux" in file.filename and "x86_64" in file.filename
                else 2 if "linux" in file.filename else 3), file.filename
    return (4 if file.filename.endswith(".tar.gz") else 5), file.filename


def download(file: IndexFile) -> Path:
    """Download ``file`` into the cache once; verify its sha256 when the index gives one."""
    target = cache_dir() / "dists" / file.filename
    if target.exists():
        return target
    body, _ = _fetch(file.url, timeout=600.0)
    if file.sha256 and hashlib.sha256(body).hexdigest() != file.sha256:
        raise IndexUnreachable(f"download of {file.filename} does not match the index's sha256")
    atomic_write_bytes(target, body)
    return target

