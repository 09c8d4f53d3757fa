"""What ``--vllm`` values name, as matrix columns, and how each is opened.

- a version (``0.12.0``), ``latest``, or a specifier (``>=0.11``, ``>=0.11,<0.20``): releases;
- a local wheel, sdist or source directory (a checkout of some vLLM commit);
- a URL of a wheel or sdist (a wheel's Python files are read with HTTP range requests);
- ``git+URL@REF``: the files of one commit.

With ``--index-url`` or ``--find-links`` (vLLM's per-commit nightly index, a directory of wheels), versions and
specifiers are found there by ``unearth``, the finder PDM uses: several indexes and find-links at once,
yanked releases left out, pre-releases on request. Without them, the package index pip is configured with is
read by ``compat.sources.index``, whose cached listing keeps a warm matrix off the network.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from compat.errors import CompatError, UnknownVersion
from compat.matrix.model import Column
from compat.sources import index, remote


@dataclass
class Request:
    """What to audit against: the ``--vllm`` values, and where releases are found."""

    specs: list[str]
    index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    pre: bool = False
    target: str = "vllm"


def is_release_spec(spec: str) -> bool:
    """A plain version: opened as a release of the package index."""
    try:
        Version(spec)
    except InvalidVersion:
        return False
    return True


def _is_url(spec: str) -> bool:
    return urllib.parse.urlparse(spec).scheme in ("http", "https", "file")


def _version_from_filename(name: str) -> str | None:
    if name.endswith(".whl"):
        try:
            return str(parse_wheel_filename(name)[1])
        except InvalidWheelFilename:
            return None
    stem = name.removesuffix(".tar.gz").removesuffix(".zip")
    tail = stem.rpartition("-")[2]
    return tail if is_release_spec(tail) else None


def columns_for(spec: str, request: Request) -> list[Column]:
    spec = spec.strip()
    if not spec:
        return []
    if spec.startswith("git+"):
        url, _, ref = spec[4:].rpartition("@")
        if not url or not ref:
            raise CompatError(f"{spec}: a git build is git+URL@REF")
        return [Column(f"{PurePosixPath(urllib.parse.urlparse(url).path).stem}@{ref}", spec)]
    if _is_url(spec):
        name = PurePosixPath(urllib.parse.urlparse(spec).path).name
        return [Column(name, spec, _version_from_filename(name))]
    path = Path(spec)
    if path.exists():
        return [Column(path.name, str(path.resolve()), _version_from_filename(path.name))]
    if request.index_urls or request.find_links:
        return _found(spec, request)
    if spec == "latest" or is_release_spec(spec):
        version = str(index.resolve(request.target, spec))
        return [Column(version, version, version)]
    try:
        SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise CompatError(f"{spec}: not a version, specifier, path, URL or git+URL@REF") from exc
    found = [str(v) for v in index.resolve_range(request.target, spec)
             if request.pre or not v.is_prerelease]
    if not found:
        raise UnknownVersion(f"no {request.target} release matches {spec}")
    return [Column(v, v, v) for v in found]


def _found(spec: str, request: Request) -> list[Column]:
    """Versions from the given indexes and find-links (unearth); each column opens the file found there."""
    from unearth import PackageFinder

    finder = PackageFinder(index_urls=request.index_urls, find_links=request.find_links,
                           ignore_compatibility=True)
    if spec == "latest":
        requirement = request.target
    elif is_release_spec(spec):
        requirement = f"{request.target}=={spec}"
    else:
        requirement = f"{request.target}{spec}"
    try:
        packages = finder.find_matches(requirement, allow_yanked=False, allow_prereleases=request.pre or None)
    except Exception as exc:  # noqa: BLE001 - any finder failure is one clear line
        raise CompatError(f"cannot search {', '.join(request.index_urls + request.find_links)} for {requirement}: "
                          f"{type(exc).__name__}: {exc}") from exc
    by_version: dict[str, list] = {}
    for package in packages:
        by_version.setdefault(str(package.version), []).append(package.link)
    if not by_version:
        raise UnknownVersion(f"no {requirement} in {', '.join(request.index_urls + request.find_links)}")
    versions = sorted(by_version, key=Version)
    if spec == "latest":
        versions = versions[-1:]
    return [Column(v, _choose(by_version[v]), v) for v in versions]


def _choose(links: list) -> str:
    """The file whose Python sources are read: what pip installs, so a pure-Python wheel, else a compiled wheel
    (Linux x86-64 first, read with range requests so its compiled parts cost nothing), else the sdist."""
    def rank(link) -> tuple[int, str]:
        name = link.filename
        if name.endswith("-none-any.whl"):
            return 0, name
        if name.endswith(".whl"):
            return (1 if "linux" in name and "x86_64" in name else 2), name
        return 3, name
    best = sorted(links, key=rank)[0]
    return best.file_path.as_posix() if best.is_file else best.url_without_fragment


def local_spec(column: Column, request: Request) -> str:
    """What ``open_build`` opens for this column: a release version, or a local path fetched into the cache."""
    spec = column.spec
    if spec.startswith("git+"):
        url, _, ref = spec[4:].rpartition("@")
        return str(remote.git_commit(url, ref))
    if _is_url(spec):
        parsed = urllib.parse.urlparse(spec)
        if parsed.scheme == "file":
            return urllib.parse.unquote(parsed.path)
        if spec.endswith(".whl"):
            return str(remote.wheel_sources(spec))
        return str(remote.download(spec))
    return spec
