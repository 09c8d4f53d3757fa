"""Modules of a source tree: which file holds a module, and what each top-level name is bound to.

Only the modules a query needs are parsed, each once. Bindings follow runtime semantics where
they can be read off the code: names under ``if TYPE_CHECKING`` do not exist at run time (they
are kept apart, for annotations), the first branch of an ``if``/``try`` wins over its
alternative, and a later top-level binding replaces an earlier one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from compat.syntax import absolute_module, is_type_checking, parse_source


class BindingKind(StrEnum):
    """What statement binds a module-level name."""

    DEF = "def"
    """``def name`` (or ``async def``)."""
    CLASS = "class"
    """``class name``."""
    IMPORT = "import"
    """``from m import name``."""
    MODULE = "module"
    """``import m`` (or ``import m as name``)."""
    ASSIGN = "assign"
    """``name = ...``, ``name: T = ...`` or another assignment."""


@dataclass(frozen=True)
class Binding:
    kind: BindingKind
    node: ast.AST
    module: str | None = None
    name: str | None = None


@dataclass
class ModuleInfo:
    name: str
    path: Path
    relpath: str
    tree: ast.Module
    is_package: bool
    bindings: dict[str, Binding] = field(default_factory=dict)
    type_bindings: dict[str, Binding] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    lazy: dict[str, tuple[str, str]] = field(default_factory=dict)
    has_getattr: bool = False


class SourceIndex:
    """Finds and parses the modules of one top-level package inside a source root."""

    def __init__(self, root: Path, package: str) -> None:
        self.root = Path(root)
        self.package = package
        self._modules: dict[str, ModuleInfo | None] = {}
        self._texts: list[tuple[Path, bytes]] | None = None
        self.parsed_files: list[Path] = []

    def texts(self) -> list[tuple[Path, bytes]]:
        """Every ``.py`` file of the package and its bytes, in path order (a file that cannot be read left out).
        Read once: the searches of the whole build by text (where a name is defined, which modules call a
        method, which name a config's field) each needed every file, and a cold audit makes a dozen of them."""
        if self._texts is None:
            texts = []
            for path in sorted((self.root / self.package).rglob("*.py")):
                try:
                    texts.append((path, path.read_bytes()))
                except OSError:
                    continue
            self._texts = texts
        return self._texts

    def is_internal(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".")

    def module_file(self, module: str) -> tuple[Path, bool] | None:
        if not self.is_internal(module):
            return None
        base = self.root.joinpath(*module.split("."))
        init = base / "__init__.py"
        if init.is_file():
            return init, True
        py = base.with_suffix(".py")
        if py.is_file():
            return py, False
        return None

    def exists(self, module: str) -> bool:
        return self.module_file(module) is not None

    def module(self, name: str) -> ModuleInfo | None:
        """The parsed module, or None when the tree has no such module."""
        if name in self._modules:
            return self._modules[name]
        found = self.module_file(name)
        if found is None:
            self._modules[name] = None
            return None
        path, is_package = found
        source = path.read_bytes()
        tree = parse_source(source, str(path))
        self.parsed_files.append(path)
        info = ModuleInfo(name, path, path.relative_to(self.root).as_posix(), tree, is_package)
        _collect(info, tree.body, info.bindings, info.type_bindings, runtime=True)
        self._modules[name] = info
        return info


def _collect(info: ModuleInfo, body: list[ast.stmt], out: dict[str, Binding], type_out: dict[str, Binding],
             runtime: bool) -> None:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[stmt.name] = Binding(BindingKind.DEF, stmt)
            if stmt.name == "__getattr__" and runtime:
                info.has_getattr = True
        elif isinstance(stmt, ast.ClassDef):
            out[stmt.name] = Binding(BindingKind.CLASS, stmt)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    out[alias.asname] = Binding(BindingKind.MODULE, stmt, module=alias.name)
                else:
                    top = alias.name.split(".")[0]
                    out[top] = Binding(BindingKind.MODULE, stmt, module=top)
        elif isinstance(stmt, ast.ImportFrom):
            module = absolute_module(info.name, info.is_package, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    if runtime:
                        info.star_imports.append(module)
                    continue
                out[alias.asname or alias.name] = Binding(BindingKind.IMPORT, stmt, module=module, name=alias.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                continue
            for target in targets:
                for name in target_names(target):
                    out[name] = Binding(BindingKind.ASSIGN, stmt)
            value = stmt.value
            if runtime and isinstance(value, ast.Dict):
                _read_lazy_map(info, value)
        elif isinstance(stmt, ast.If):
            if is_type_checking(stmt.test):
                _collect(info, stmt.body, type_out, type_out, runtime=False)
                _collect_alternative(info, stmt.orelse, out, type_out, runtime, replace=True)
            else:
                _collect_branches(info, stmt.body, stmt.orelse, out, type_out, runtime)
        elif isinstance(stmt, ast.Try):
            alternatives = [s for h in stmt.handlers for s in h.body]
            _collect_branches(info, stmt.body + stmt.orelse, alternatives, out, type_out, runtime)
            _collect(info, stmt.finalbody, out, type_out, runtime)
        elif isinstance(stmt, (ast.With, ast.For, ast.While)):
            _collect(info, stmt.body, out, type_out, runtime)


def _collect_branches(info: ModuleInfo, primary: list[ast.stmt], alternative: list[ast.stmt],
                      out: dict[str, Binding], type_out: dict[str, Binding], runtime: bool) -> None:
    first: dict[str, Binding] = {}
    _collect(info, primary, first, type_out, runtime)
    _collect_alternative(info, alternative, out, type_out, runtime, replace=False, keep=first)
    out.update(first)


def _collect_alternative(info: ModuleInfo, body: list[ast.stmt], out: dict[str, Binding],
                         type_out: dict[str, Binding], runtime: bool, replace: bool,
                         keep: dict[str, Binding] | None = None) -> None:
    second: dict[str, Binding] = {}
    _collect(info, body, second, type_out, runtime)
    for name, binding in second.items():
        if replace or name not in (keep or {}):
            out[name] = binding


def target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in target_names(e)]
    return []


def _read_lazy_map(info: ModuleInfo, node: ast.Dict) -> None:
    """``{"LLM": ".entrypoints.llm:LLM"}``: the lazy-attribute tables vLLM's ``__getattr__`` reads."""
    entries: dict[str, tuple[str, str]] = {}
    for key, value in zip(node.keys, node.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and ":" in value.value:
            module, _, attr = value.value.partition(":")
        elif isinstance(value, ast.Tuple) and len(value.elts) == 2 and \
                isinstance(first := value.elts[0], ast.Constant) and isinstance(first.value, str) and \
                isinstance(second := value.elts[1], ast.Constant) and isinstance(second.value, str):
            module, attr = first.value, second.value
        else:
            return
        if module.startswith("."):
            level = len(module) - len(module.lstrip("."))
            module = absolute_module(info.name, info.is_package, level, module.lstrip("."))
        entries[key.value] = (module, attr)
    info.lazy.update(entries)


def getattr_names(tree: ast.Module) -> dict[str, ast.stmt] | None:
    """The names a module's ``__getattr__(name)`` serves, when it serves a fixed set: each return sits under a
    test of ``name`` against string constants (``if name == "current_platform"``, ``name in ("a", "b")``) or
    returns one of the module's own globals; anything else (a computed lookup) is None: not known statically."""
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)
    if function is None or not function.args.args:
        return None
    param = function.args.args[0].arg
    served: dict[str, ast.stmt] = {}

    def constants(test: ast.expr) -> list[str] | None:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) and \
                test.left.id == param:
            right = test.comparators[0]
            values = right.elts if isinstance(test.ops[0], ast.In) and isinstance(right, (ast.Tuple, ast.List,
                                                                                          ast.Set)) else [right]
            if isinstance(test.ops[0], (ast.Eq, ast.In)) and all(isinstance(v, ast.Constant) and isinstance(
                    v.value, str) for v in values):
                return [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        return None

    def own_global(value: ast.expr | None) -> bool:  # globals()[name]
        return isinstance(value, ast.Subscript) and isinstance(value.value, ast.Call) and \
            getattr(value.value.func, "id", "") == "globals"

    def walk(body: list[ast.stmt], names: list[str] | None) -> bool:
        for stmt in body:
            if isinstance(stmt, ast.If):
                found = constants(stmt.test)
                if found is not None:
                    served.update({n: stmt for n in found})
                if not walk(stmt.body, found if found is not None else names) or not walk(stmt.orelse, names):
                    return False
            elif isinstance(stmt, ast.Return):
                if names is None and not own_global(stmt.value):
                    return False
            elif isinstance(stmt, (ast.Try, ast.With, ast.For, ast.While)):
                return False
        return True

    return served if walk(function.body, None) else None

