"""Where source code comes from, for both sides: a path, a wheel or sdist, an installed distribution, or a
release fetched once from the package index (``index``) and cached, never installed or imported."""

from compat.sources.trees import (
    SourceTree,
    installed_distribution,
    is_archive,
    tree_from_archive,
    tree_from_installed,
    tree_from_path,
    tree_from_release,
)

__all__ = ["SourceTree", "installed_distribution", "is_archive", "tree_from_archive", "tree_from_installed",
           "tree_from_path", "tree_from_release"]
