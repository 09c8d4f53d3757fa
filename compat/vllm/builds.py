"""Turn what the user names (``installed``, a version, a specifier, a wheel, a checkout) into a surface.

With no ``--vllm`` and vLLM installed, the installed files are read statically (as any source tree, its answers
kept in the cache, so a warm audit parses nothing and imports no vLLM); ``installed``, written out, imports it
and asks ``inspect.signature`` (``RuntimeSurface``). Both are the installed build: ``OpenedBuild.installed`` says
so, and the runtime confirmation runs its engines on it either way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from compat import sources
from compat.errors import CompatError
from compat.vllm.cached import CachedSurface
from compat.vllm.runtime import RuntimeSurface, VllmImportError, installed_root
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo, ReadingMethod, Surface


@dataclass(frozen=True)
class OpenedBuild:
    surface: Surface
    note: str | None = None
    """How the default was chosen, or what went wrong on the way (shown in the report)."""
    import_error: VllmImportError | None = None
    installed: bool = False
    """The build is the vLLM installed in this Python (read statically or imported): the one the runtime
    confirmation's engines run."""


def tree_version(root: Path, package: str) -> str | None:
    """The version a tree declares in ``<package>/_version.py`` (setuptools-scm), read statically."""
    path = root / package / "_version.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            if any(isinstance(t, ast.Name) and t.id in ("__version__", "version") for t in stmt.targets):
                return stmt.value.value
    return None


def static_surface(tree: sources.SourceTree, package: str) -> CachedSurface:
    """A static reading of ``tree`` whose answers persist in the cache (a warm audit parses nothing)."""
    if not (tree.root / package / "__init__.py").exists():
        raise CompatError(f"{tree.origin}: no '{package}' package found under {tree.root}")
    version = tree.version or tree_version(tree.root, package)
    build = BuildInfo(package, version, tree.origin, ReadingMethod.STATIC, str(tree.root))
    return CachedSurface(StaticSurface(tree.root, build, package))


def open_build(spec: str | None, package: str = "vllm", version_override: str | None = None) -> OpenedBuild:
    """Open the build ``spec`` names; ``None`` means the installed files read statically when the package is
    installed (``installed`` imports it), else the latest release."""
    if spec is None:
        root = installed_root(package)
        if root is not None:
            opened = _installed_static(root, package)
        else:
            opened = _open("latest", package)
            opened = OpenedBuild(opened.surface, f"--vllm not given: {package} is not installed, so the latest "
                                 "release was read", opened.import_error)
    else:
        opened = _open(spec, package)
    if version_override:
        build = opened.surface.build
        opened.surface.build = BuildInfo(build.name, version_override, build.origin, build.reading, build.root)
    return opened


def _installed_static(root: Path, package: str) -> OpenedBuild:
    """The installed package's files read statically, never imported, with the version its distribution's
    metadata gives (else its ``_version.py``)."""
    owner = sources.installed_distribution(root, package)
    version = owner[1] if owner else tree_version(root, package)
    named = f" (distribution {owner[0]})" if owner and owner[0] != package else ""
    tree = sources.SourceTree(root, package, version, f"installed {package} {version or '(version unknown)'}{named} "
                              f"at {root / package}, read statically (not imported)")
    note = (f"--vllm not given: {package} is installed, so its files were read statically, without importing it "
            f"(--vllm installed imports it and reads signatures with inspect.signature)")
    return OpenedBuild(static_surface(tree, package), note, installed=True)


def _open(spec: str, package: str) -> OpenedBuild:
    if spec == "installed":
        root = installed_root(package)
        if root is None:
            raise CompatError(f"--vllm installed: {package} is not installed in this Python ({_python()})")
        try:
            return OpenedBuild(RuntimeSurface(package), installed=True)
        except VllmImportError as exc:
            tree = sources.SourceTree(root, package, None, f"installed {package} at {root / package} "
                                      "(import failed; read statically instead)")
            return OpenedBuild(static_surface(tree, package), f"import {package} failed, so the installed files "
                               "were read statically", exc)
    path = Path(spec)
    if sources.is_archive(spec):
        return OpenedBuild(static_surface(sources.tree_from_archive(path, f"{path.name}, read statically", package),
                                          package))
    if path.exists() or "/" in spec:
        tree = sources.tree_from_path(path, package)
        return OpenedBuild(static_surface(tree, package))
    return OpenedBuild(static_surface(sources.tree_from_release(package, spec), package))


def _python() -> str:
    import sys

    return sys.executable
