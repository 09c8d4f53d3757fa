"""Which files a gate run checks: data files under the given paths, in natural order, their common root, and
speculators' ``data_config.json`` when one is there."""

from __future__ import annotations

import os
import re
from pathlib import Path

from compat.errors import CompatError
from compat.gate.read.files import DATA_SUFFIXES

DATA_CONFIG = "data_config.json"
_DIGITS = re.compile(r"(\d+)")


def natural_key(path: str) -> tuple:
    """``data_2.pt`` before ``data_10.pt`` (directories compare as text, names by their numbers)."""
    head, _, name = path.rpartition(os.sep)
    return head, tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


def _walk(top: str, out: list[str]) -> None:
    # os.scandir, not os.walk + pathlib: listing 100k files must cost less than checking them.
    with os.scandir(top) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue  # dot-files are other tools' in-progress writes (atomic renames), not data
            if entry.is_dir():
                _walk(entry.path, out)
            elif os.path.splitext(entry.name)[1] in DATA_SUFFIXES:
                out.append(entry.path)


def discover(paths: tuple[Path, ...]) -> tuple[list[str], Path, Path | None]:
    """Data files under ``paths`` (natural order), their common root, and a data_config.json if one is there."""
    files: list[str] = []
    configs: list[Path] = []
    for path in paths:
        if not path.exists():
            raise CompatError(f"{path}: no such file or directory")
        if path.is_file():
            if path.name == DATA_CONFIG:
                configs.append(path)
            else:
                files.append(os.path.abspath(path))  # named explicitly: read whatever its suffix
            continue
        if (path / DATA_CONFIG).is_file():
            configs.append(path / DATA_CONFIG)
        _walk(os.path.abspath(path), files)
    if not files:
        shown = ", ".join(map(str, paths))
        raise CompatError(f"no hidden-state files ({', '.join(sorted(DATA_SUFFIXES))}) under {shown}")
    files = sorted(set(files), key=natural_key)
    root = Path(os.path.commonpath([os.path.abspath(p if p.is_dir() else p.parent) for p in paths]))
    first_dir = Path(os.path.dirname(files[0]))
    if not configs and (first_dir / DATA_CONFIG).is_file():
        configs.append(first_dir / DATA_CONFIG)
    return files, root, configs[0] if configs else None
