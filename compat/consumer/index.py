"""The first pass over a consumer: its own classes, functions and return annotations, across files.

The module walk (``compat.consumer.visitor``) reads the index to follow values through the consumer's
code: ``self`` in a class that extends vLLM's worker, a call of a helper annotated to return a vLLM
class, a method inherited from a base defined in another file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from compat.location import Location
from compat.syntax import FunctionNode

EXTENSION_KEYWORDS = ("worker_extension_cls",)



@dataclass(frozen=True)
class ConsumerModule:
    """One parsed file of the consumer."""

    module: str
    relpath: str
    tree: ast.Module
    lines: list[str]


@dataclass
class IndexedClass:
    """A class the consumer defines: its methods and its bases (qualnames of the same module)."""

    qualname: str
    node: ast.ClassDef
    module: str
    methods: dict[str, FunctionNode] = field(default_factory=dict)
    bases: tuple[str, ...] = ()

    def own_names(self) -> set[str]:
        """Names the class itself defines: methods, class-body assignments, ``self.x``/``cls.x`` stores."""
        names: set[str] = set(self.methods)
        for stmt in self.node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if isinstance(t, ast.Name):
                        names.add(t.id)
        for method in self.methods.values():
            for sub in ast.walk(method):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and isinstance(
                        sub.value, ast.Name) and sub.value.id in ("self", "cls"):
                    names.add(sub.attr)
        return names


class ConsumerIndex:
    """The consumer's classes, functions (with their files and return annotations) and worker extensions."""

    def __init__(self) -> None:
        self.classes: dict[str, IndexedClass] = {}
        self.functions: dict[str, FunctionNode] = {}
        self.function_files: dict[str, str] = {}
        self.function_modules: dict[str, str] = {}
        """Function qualname -> the module it is defined in (its names resolve there)."""
        self.modules: dict[str, ConsumerModule] = {}
        self.return_annotations: dict[str, ast.expr] = {}
        self.extensions: list[tuple[str, Location]] = []
        """``worker_extension_cls="pkg.mod.Class"`` arguments, in the order found (duplicates kept)."""
        self.imports: dict[str, dict[str, str]] = {}
        """Module -> {name it binds at top level: the dotted name it imports}."""
        self._lineages: dict[str, tuple[IndexedClass, ...]] = {}
        self._declared: dict[str, frozenset[str]] = {}
        self._extension_names: frozenset[str] | None = None

    def add(self, module: ConsumerModule, text: str) -> None:
        """Index one module (``text``: its source, to skip the walk for extensions when it names none)."""

        def inner(body: list[ast.stmt], prefix: str) -> None:
            """Functions defined inside a function, as ``outer.inner`` (a forward installed with
            ``types.MethodType(inner, model)`` is one of them), and classes made there (``class Patched(base)``
            over a base fetched at run time, then installed by ``setattr``), as ``outer.Patched``."""
            for stmt in body:
                if isinstance(stmt, ast.ClassDef):
                    walk([stmt], prefix, None)
                elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualname = f"{prefix}.{stmt.name}"
                    self.functions.setdefault(qualname, stmt)
                    self.function_files.setdefault(qualname, module.relpath)
                    self.function_modules.setdefault(qualname, module.module)
                    inner(stmt.body, qualname)
                elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                    for block in (stmt.body, getattr(stmt, "orelse", []), getattr(stmt, "finalbody", []),
                                  *(h.body for h in getattr(stmt, "handlers", []))):
                        inner(block, prefix)

        def walk(body: list[ast.stmt], prefix: str, owner: IndexedClass | None) -> None:
            for stmt in body:
                if isinstance(stmt, ast.ClassDef):
                    qualname = f"{prefix}.{stmt.name}"
                    bases = tuple(f"{module.module}.{b.id}" for b in stmt.bases if isinstance(b, ast.Name))
                    info = IndexedClass(qualname, stmt, module.module, bases=bases)
                    self.classes[qualname] = info
                    walk(stmt.body, qualname, info)
                elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualname = f"{prefix}.{stmt.name}"
                    self.functions[qualname] = stmt
                    self.function_files[qualname] = module.relpath
                    self.function_modules[qualname] = module.module
                    if owner is not None:
                        owner.methods[stmt.name] = stmt
                    if stmt.returns is not None:
                        self.return_annotations[qualname] = stmt.returns
                    inner(stmt.body, qualname)
                elif isinstance(stmt, (ast.If, ast.Try)):
                    walk(stmt.body, prefix, owner)
                    walk(getattr(stmt, "orelse", []), prefix, owner)

        self.modules[module.module] = module
        self.imports[module.module] = _top_level_imports(module)
        walk(module.tree.body, module.module, None)
        # Non-ASCII source may spell a keyword with characters that normalise to it: walk those always.
        if any(k in text for k in EXTENSION_KEYWORDS) or not text.isascii():
            self.extensions.extend(_extension_arguments(module))
        self._lineages.clear()
        self._declared.clear()
        self._extension_names = None

    def link(self) -> None:
        """Resolve each class's bases imported from the consumer's other modules (``from .base_worker import
        RblnNixlWorkerBase``), through re-exports, once every module is indexed."""
        for info in self.classes.values():
            info.bases = tuple(self._resolve(base) for base in info.bases)
        self._lineages.clear()
        self._declared.clear()

    def _resolve(self, qualname: str, depth: int = 0) -> str:
        if qualname in self.classes or depth > 4:
            return qualname
        module, _, name = qualname.rpartition(".")
        target = self.imports.get(module, {}).get(name)
        return self._resolve(target, depth + 1) if target is not None else qualname

    def definition(self, module: str, name: str) -> str | None:
        """The qualname of ``module.name`` when the consumer defines it (a class or a function)."""
        qualname = f"{module}.{name}"
        return qualname if qualname in self.classes or qualname in self.functions else None

    def is_worker_extension(self, info: IndexedClass) -> bool:
        """The class (or a base) is named as a ``worker_extension_cls``: its ``self`` is vLLM's worker."""
        if self._extension_names is None:
            self._extension_names = frozenset(name for name, _ in self.extensions)
        names = self._extension_names
        return info.qualname in names or any(b in names for b in info.bases)

    def find_method(self, info: IndexedClass, name: str) -> tuple[IndexedClass, FunctionNode] | None:
        """The class that defines method ``name`` for ``info`` (itself first, then its bases, breadth first)."""
        seen: set[str] = set()
        stack = [info]
        while stack:
            current = stack.pop(0)
            if current.qualname in seen:
                continue
            seen.add(current.qualname)
            if name in current.methods:
                return current, current.methods[name]
            stack.extend(self.classes[b] for b in current.bases if b in self.classes)
        return None

    def lineage(self, info: IndexedClass) -> tuple[IndexedClass, ...]:
        """The class and every indexed class it derives from."""
        found = self._lineages.get(info.qualname)
        if found is None:
            classes: dict[str, IndexedClass] = {}
            stack = [info]
            while stack:
                current = stack.pop()
                if current.qualname in classes:
                    continue
                classes[current.qualname] = current
                stack.extend(self.classes[b] for b in current.bases if b in self.classes)
            found = self._lineages[info.qualname] = tuple(classes.values())
        return found

    def declared_names(self, info: IndexedClass) -> frozenset[str]:
        """Names the class or its indexed bases define in their source (see ``IndexedClass.own_names``)."""
        found = self._declared.get(info.qualname)
        if found is None:
            names: set[str] = set()
            for current in self.lineage(info):
                names |= current.own_names()
            found = self._declared[info.qualname] = frozenset(names)
        return found


def _top_level_imports(module: ConsumerModule) -> dict[str, str]:
    """``from a.b import C as D`` at the top level (``if``/``try`` blocks included): ``{"D": "a.b.C"}``; relative
    imports resolved against the module's package."""
    found: dict[str, str] = {}
    package = module.module.split(".")
    if not module.relpath.endswith("__init__.py"):
        package = package[:-1]
    stack = list(module.tree.body)
    while stack:
        stmt = stack.pop(0)
        if isinstance(stmt, (ast.If, ast.Try)):
            stack.extend([*stmt.body, *stmt.orelse, *getattr(stmt, "finalbody", []),
                          *(s for h in getattr(stmt, "handlers", []) for s in h.body)])
        elif isinstance(stmt, ast.ImportFrom):
            base = ".".join(package[:len(package) - stmt.level + 1] if stmt.level else [])
            source = ".".join(p for p in (base, stmt.module or "") if p)
            for alias in stmt.names:
                if alias.name != "*" and source:
                    found[alias.asname or alias.name] = f"{source}.{alias.name}"
    return found


def _extension_arguments(module: ConsumerModule) -> list[tuple[str, Location]]:
    """Worker extensions named by a string: ``f(worker_extension_cls="...")``, ``{"worker_extension_cls": "..."}``,
    ``kwargs["worker_extension_cls"] = "..."`` and ``kwargs.setdefault("worker_extension_cls", "...")``."""
    found = []

    def take(key: ast.expr | str | None, value: ast.expr | None) -> None:
        name = key.value if isinstance(key, ast.Constant) else key
        if name in EXTENSION_KEYWORDS and isinstance(value, ast.Constant) and isinstance(value.value, str):
            found.append((value.value, Location(module.relpath, value.lineno)))

    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                take(kw.arg, kw.value)
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("setdefault", "get") and len(node.args) == 2:
                take(node.args[0], node.args[1])
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                take(key, value)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    take(target.slice, node.value)
    return found
