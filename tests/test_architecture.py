"""The shape of the code: no import cycles, no private names crossing modules, reader handles kept private.

The import graph is read from the sources with ``ast``, counting every import: at module level, inside
functions and under ``if TYPE_CHECKING`` (a cycle hidden in a function is still a cycle).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAPPED = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
PACKAGES = {"compat": "compat", **MAPPED}
"""Each package checked, by its import name, and the directory its modules are read from: ``compat.probes`` and
``compat.fixers`` from ``probes/`` and ``fixers/`` (not from ``compat/probes/``, a checkout's stand-in)."""
HANDLE_READERS = {"compat.vllm.definitions", "compat.vllm.runtime"}
"""The modules that own ``Found.handle``: each reads it only through its own accessor."""


def modules() -> dict[str, Path]:
    found = {}
    for package, directory in PACKAGES.items():
        for path in (ROOT / directory).rglob("*.py"):
            parts = list(path.relative_to(ROOT / directory).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module imported, name imported from it or None) for every import statement of a module."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.append((full, None) if full in known else (base, alias.name))
    return [(module, imported) for module, imported in out if module in known and module != name]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {module for module, _ in imports(name, path, known)} for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_no_private_name_is_imported_across_modules():
    known = modules()
    private = [f"{name} imports {module}.{imported}" for name, path in known.items()
               for module, imported in imports(name, path, known)
               if imported and imported.startswith("_") and not imported.startswith("__")]
    assert private == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_surface_handles_are_read_only_by_the_reading_that_made_them(name):
    path = modules()[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    indexed = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Subscript)
               and isinstance(node.value, ast.Attribute) and node.value.attr == "handle"]
    assert indexed == [], f"{path}: handles indexed by position at lines {indexed}"
    if name not in HANDLE_READERS:
        reads = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                 and node.attr == "handle" and isinstance(node.ctx, ast.Load)]
        assert reads == [], f"{path}: reads .handle at lines {reads} (use the reading's accessor)"


def test_architecture_md_names_only_files_that_exist():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:compat|probes|fixers|tests|benchmarks)/[\w/]+\.py)`", text))
    assert named, "ARCHITECTURE.md names no files"
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_no_code_imports_probes_or_fixers_by_their_top_level_names():
    """An installed wheel has no top-level ``probes`` or ``fixers`` (they install as ``compat.probes`` and
    ``compat.fixers``): an import by the old name works in a checkout, where the repository root is on the path,
    and fails everywhere else."""
    found = []
    for path in [*modules().values(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] in ("probes", "fixers")]
    assert not found, found


@pytest.mark.parametrize("package", ["compat.probes", "compat.fixers"])
def test_a_plug_in_module_is_named_for_what_it_registers(package):
    """``probes/reply_shape.py`` registers ``reply-shape``: the module is the registered name (``-`` as ``_``), or
    its plural where the singular is a Python keyword or reads as one (``imports``: ``import``)."""
    import importlib
    import pkgutil

    registered = importlib.import_module(package)
    attribute = "PROBE" if package.endswith("probes") else "FIXER"
    wrong = []
    for info in pkgutil.iter_modules(registered.__path__):
        value = getattr(importlib.import_module(f"{package}.{info.name}"), attribute, None)
        if value is not None and info.name not in {value.name.replace("-", "_"), value.name + "s",
                                                   value.name.replace("-", "_") + "es"}:
            wrong.append(f"{info.name}.py registers {value.name}")
    assert not wrong, wrong
