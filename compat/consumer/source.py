"""Open a consumer's source, whatever the user names: a path, a wheel or sdist, an installed distribution,
or a requirement fetched from the package index (never installed)."""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from compat import sources
from compat.errors import CompatError


def open_consumer(spec: str, target: str = "vllm") -> sources.SourceTree:
    """A consumer: a path, a wheel/sdist, an installed distribution, or a requirement from the index."""
    path = Path(spec)
    if sources.is_archive(spec):
        return sources.tree_from_archive(path, f"{path.name}")
    if path.exists() or spec.endswith(".py") or "/" in spec:
        return sources.tree_from_path(path)
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise CompatError(f"--consumer {spec!r}: not a path, an archive, or a requirement ({exc})") from exc
    if not req.specifier:
        import importlib.metadata  # only a bare distribution name needs it

        try:
            importlib.metadata.distribution(req.name)
            return sources.tree_from_installed(req.name)
        except importlib.metadata.PackageNotFoundError:
            return sources.tree_from_release(canonicalize_name(req.name), "latest")
    return sources.tree_from_release(canonicalize_name(req.name), str(req.specifier))
