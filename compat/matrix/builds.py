"""The builds a ``--vllm`` value names (parsed by ``compat.buildspec``, the same in every tool), and how each is
opened: releases of the package index, a local wheel, sdist or source directory, a URL of a wheel or sdist (a
wheel's Python files are read with HTTP range requests), ``git+URL@REF`` (the files of one commit).

With ``--index-url`` or ``--find-links`` (vLLM's per-commit nightly index, a directory of wheels), versions and
specifiers are found there by ``unearth``, the finder PDM uses: several indexes and find-links at once,
yanked releases left out, pre-releases on request. Without them, the package index pip is configured with is
read by ``compat.sources.index``, whose cached listing keeps a warm matrix off the network.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from compat import buildspec
from compat.buildspec import BuildSpec, Form
from compat.errors import CompatError, UnknownVersion
from compat.matrix.result import Column
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


def columns_for(spec: str | BuildSpec, request: Request) -> list[Column]:
    """The builds ``spec`` names (``compat.buildspec``: the same meaning in every tool), oldest release first."""
    parsed = spec if isinstance(spec, BuildSpec) else buildspec.parse(spec)
    if parsed.form is Form.INSTALLED:
        return [Column("installed", "installed")]
    if parsed.form is Form.GIT:
        url, ref = parsed.value, parsed.ref
        return [Column(f"{PurePosixPath(urllib.parse.urlparse(url).path).stem}@{ref}", f"git+{url}@{ref}")]
    if parsed.form is Form.URL:
        name = PurePosixPath(urllib.parse.urlparse(parsed.value).path).name
        return [Column(name, parsed.value, _version_from_filename(name))]
    if parsed.form is Form.PATH:
        path = Path(parsed.value)
        return [Column(path.name, str(path), _version_from_filename(path.name))]
    if request.index_urls or request.find_links:
        return _found(parsed, request)
    if parsed.form in (Form.LATEST, Form.VERSION) or not parsed.many:
        version = str(index.resolve(request.target, "latest" if parsed.form is Form.LATEST else parsed.value))
        return [Column(version, version, version)]
    found = [str(v) for v in index.resolve_range(request.target, parsed.value)
             if request.pre or not v.is_prerelease]
    if not found:
        raise UnknownVersion(f"no {request.target} release matches {parsed.value}")
    return [Column(v, v, v) for v in found]


def resolved(spec: BuildSpec, columns: list[Column]) -> str:
    """What a tool says it resolved ``spec`` to: ``>=0.12,<0.17 (every release matching ...) -> 0.12.0, ...``."""
    labels = [c.label for c in columns]
    shown = ", ".join(labels) if len(labels) <= 8 else f"{', '.join(labels[:3])}, ..., {', '.join(labels[-2:])}"
    return f"--vllm {spec.text} ({spec.describe()}) -> {shown or 'no build'}" + (
        f" ({len(labels)} builds)" if len(labels) > 1 else "")


def _found(parsed: BuildSpec, request: Request) -> list[Column]:
    """Versions from the given indexes and find-links (unearth); each column opens the file found there."""
    from unearth import PackageFinder

    finder = PackageFinder(index_urls=request.index_urls, find_links=request.find_links,
                           ignore_compatibility=True)
    if parsed.form is Form.LATEST:
        requirement = request.target
    elif parsed.form is Form.VERSION:
        requirement = f"{request.target}=={parsed.value}"
    else:
        requirement = f"{request.target}{parsed.value}"
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
    if not parsed.many:
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


def one_build(text: str, request: Request, tool: str, flag: str = "--vllm") -> tuple[str, str]:
    """For a tool that reads one build: what ``open_build`` opens for ``text``, and the line saying what it resolved
    to. A spec naming several builds (a specifier: every matching release) is refused, never narrowed silently."""
    parsed = buildspec.parse(text, flag)
    columns = columns_for(parsed, request)
    if len(columns) != 1:
        shown = ", ".join(c.label for c in columns[:3]) + (", ..." if len(columns) > 3 else "")
        raise CompatError(f"{tool} reads one build, and {flag} {text} names {parsed.describe()} ({len(columns)} "
                          f"builds: {shown}); write newest:{parsed.value} for the newest, or use compat.matrix for "
                          "all of them")
    return local_spec(columns[0], request), resolved(parsed, columns).replace("--vllm", flag, 1)
