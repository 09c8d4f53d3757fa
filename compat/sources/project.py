"""What a consumer's own project files declare: its name and its requirements, each with where it was read.

Read in this order, each file contributing what it says: ``pyproject.toml`` (``[project] name``, ``dependencies``
then ``[project.optional-dependencies]``), ``setup.cfg`` (``[metadata] name``, ``[options] install_requires``), the
``requirements*.txt`` files of the project's root (``requirements.txt`` first). The name is the first one given; a
requirement keeps its place in that order, so the first that names a distribution is the one its project put first.
Installed or wheel metadata (``METADATA``) comes after these, read by ``compat.sources.trees``.
"""

from __future__ import annotations

import configparser
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from compat.errors import CompatError

PROJECT_FILES = ("pyproject.toml", "setup.cfg")


@dataclass(frozen=True)
class Declared:
    """What a project's own files say: its name and requirements (as written), with where each was read."""

    root: Path
    name: str | None = None
    name_at: str | None = None
    requires: tuple[str, ...] = ()
    requires_at: tuple[str, ...] = ()
    """Where each requirement of ``requires`` was read: ``pyproject.toml:12 [project] dependencies``."""
    version: str | None = None
    """``[project] version`` or ``setup.cfg``'s ``[metadata] version`` when written there as a plain string (a
    dynamic version is the build backend's to compute: not read)."""


def has_project(directory: Path) -> bool:
    return any((directory / f).is_file() for f in PROJECT_FILES) or any(directory.glob("requirements*.txt"))


def project_above(path: Path) -> Path | None:
    """The nearest directory at or above ``path`` (a file's own directory first) that holds a project file; the
    search never leaves a repository (a directory holding ``.git`` is the last one looked in)."""
    directory = path if path.is_dir() else path.parent
    for candidate in (directory, *directory.parents):
        if has_project(candidate):
            return candidate
        if (candidate / ".git").exists():
            return None
    return None


def read_declared(root: Path) -> Declared:
    """What the project files directly in ``root`` declare. A malformed ``pyproject.toml`` or ``setup.cfg`` (or a
    requirement in one that is no requirement) is a ``CompatError`` naming the file: pip would refuse it too."""
    name = name_at = version = None
    requires: list[tuple[str, str]] = []
    for read in (_pyproject, _setup_cfg, _requirements_txt):
        found_name, found_at, found_version, found = read(root)
        if name is None and found_name:
            name, name_at = found_name, found_at
        version = version or found_version
        requires += found
    return Declared(root, name, name_at, tuple(r for r, _ in requires), tuple(at for _, at in requires), version)


def _line_of(lines: list[str], text: str, start: int = 0) -> int | None:
    """The 1-based line at or after ``start`` that holds ``text`` as a quoted string."""
    for number in range(start, len(lines)):
        if f'"{text}"' in lines[number] or f"'{text}'" in lines[number]:
            return number + 1
    return None


def _header_line(lines: list[str], header: str) -> int:
    return next((i for i, line in enumerate(lines) if line.strip().replace(" ", "") == header), 0)


def _checked(file: str, key: str, items: object) -> list[str]:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise CompatError(f"{file}: {key} is not a list of requirement strings")
    for item in items:
        try:
            Requirement(item)
        except InvalidRequirement as exc:
            raise CompatError(f"{file}: {key}: {item!r} is not a requirement ({exc})") from exc
    return items


def _pyproject(root: Path) -> tuple[str | None, str | None, str | None, list[tuple[str, str]]]:
    path = root / "pyproject.toml"
    if not path.is_file():
        return None, None, None, []
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CompatError(f"{path}: not a readable pyproject.toml ({type(exc).__name__}: {exc})") from exc
    project = data.get("project", {})
    if not isinstance(project, dict):
        raise CompatError(f"{path}: [project] is not a table")
    lines = text.splitlines()
    name = project.get("name")
    if name is not None and not isinstance(name, str):
        raise CompatError(f"{path}: [project] name is not a string")
    name_line = _line_of(lines, name, _header_line(lines, "[project]")) if name else None
    name_at = _at("pyproject.toml", name_line, "[project] name")
    found = []
    start = _header_line(lines, "[project]")
    for item in _checked(str(path), "[project] dependencies", project.get("dependencies", [])):
        found.append((item, _at("pyproject.toml", _line_of(lines, item, start), "[project] dependencies")))
    # The extras come after every main requirement: a main dependency is what always installs, and an extra (vLLM
    # is often one: heavy, and needed only to generate data or serve) is read only where no main one names vLLM.
    extras = project.get("optional-dependencies", {})
    if not isinstance(extras, dict):
        raise CompatError(f"{path}: [project.optional-dependencies] is not a table")
    start = _header_line(lines, "[project.optional-dependencies]")
    for extra, items in extras.items():
        key = f"[project.optional-dependencies] {extra}"
        for item in _checked(str(path), key, items):
            found.append((item, _at("pyproject.toml", _line_of(lines, item, start), key)))
    version = project.get("version")
    return name, name_at, version if isinstance(version, str) and version.strip() else None, found


def _at(file: str, line: int | None, key: str) -> str:
    return f"{file}:{line} {key}" if line else f"{file} {key}"


def _setup_cfg(root: Path) -> tuple[str | None, str | None, str | None, list[tuple[str, str]]]:
    path = root / "setup.cfg"
    if not path.is_file():
        return None, None, None, []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        text = path.read_text(encoding="utf-8")
        parser.read_string(text, str(path))
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        message = " ".join(str(exc).split())
        raise CompatError(f"{path}: not a readable setup.cfg ({type(exc).__name__}: {message})") from exc
    lines = text.splitlines()
    name = parser.get("metadata", "name", fallback=None) or None
    found = []
    start = _header_line(lines, "[options]")
    for item in (line.strip() for line in parser.get("options", "install_requires", fallback="").splitlines()):
        if not item or item.startswith("#"):
            continue
        try:
            Requirement(item)
        except InvalidRequirement as exc:
            raise CompatError(f"{path}: [options] install_requires: {item!r} is not a requirement ({exc})") from exc
        line = next((i + 1 for i in range(start, len(lines)) if lines[i].strip() == item), None)
        found.append((item, _at("setup.cfg", line, "[options] install_requires")))
    version = parser.get("metadata", "version", fallback=None) or None
    if version is not None and ":" in version:
        version = None  # attr: or file: (setuptools computes it)
    return name, "setup.cfg [metadata] name" if name else None, version, found


def _requirements_txt(root: Path) -> tuple[None, None, None, list[tuple[str, str]]]:
    files = sorted(root.glob("requirements*.txt"), key=lambda p: (p.name != "requirements.txt", p.name))
    found = []
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            text = line.split(" #", 1)[0].strip()
            if not text or text.startswith(("#", "-")):
                continue  # comments and pip's options (-r, -e, --index-url ...) name no requirement here
            try:
                Requirement(text)
            except InvalidRequirement:
                continue  # a URL or path pip reads: not a requirement of a named distribution
            found.append((text, f"{path.name}:{number}"))
    return None, None, None, found
