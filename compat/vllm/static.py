"""The static reading: resolve vLLM names and signatures from source with ``ast``, never importing.

It answers what ``import`` and ``inspect.signature`` would answer at run time: re-exports through
``__init__`` files and lazy ``__getattr__`` tables, inherited members (C3 order), instance
attributes set in methods, and constructors synthesised by dataclass-like decorators. ``StaticSurface`` resolves
names and members itself and hands the other jobs to one reader each: classes and their MRO to
``compat.vllm.classes``, signatures to ``compat.vllm.callables``, the classes of results and attributes to
``compat.vllm.type_inference``.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from compat.location import Location
from compat.signature import Signature
from compat.syntax import module_name
from compat.vllm.callables import CallableReader
from compat.vllm.classes import MAX_DEPTH, ClassReader
from compat.vllm.definitions import ClassModel, Definition, definition
from compat.vllm.modules import Binding, BindingKind, ModuleInfo, SourceIndex, getattr_names
from compat.vllm.surface import BuildInfo, Found, FoundKind, Lookup, Missing, Unresolved
from compat.vllm.type_inference import TypeReader

if TYPE_CHECKING:
    from compat.facts import Fact

T = TypeVar("T")


class StaticSurface:
    """API surface of a source tree (a release, a wheel, an sdist, a checkout, or site-packages)."""

    def __init__(self, root: Path, build: BuildInfo, package: str = "vllm") -> None:
        self.build = build
        self.package = package
        self.index = SourceIndex(Path(root), package)
        self._definitions: dict[str, tuple[str, ...]] = {}
        self._facts: dict[str, Any] = {}
        self.classes = ClassReader(self)
        self.callables = CallableReader(self)
        self.inference = TypeReader(self, self.classes)

    # ---- names ---------------------------------------------------------------------------
    def lookup(self, path: str) -> Lookup:
        parts = path.split(".")
        if not self.index.is_internal(path):
            return Found(path, FoundKind.EXTERNAL)
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            info = self.index.module(module)
            if info is None:
                continue
            current: Lookup = Found(module, FoundKind.MODULE, Location(info.relpath, 1),
                                    handle=Definition(info, info.tree))
            for name in parts[cut:]:
                if not isinstance(current, Found):
                    break
                current = self.member(current, name)
            return current
        return Missing(f"no module {parts[0]} in the build")

    def module_lookup(self, module: str, name: str, depth: int = 0) -> Lookup:
        """``name`` as ``from module import name`` would see it."""
        if depth > MAX_DEPTH:
            return Unresolved(f"import cycle while resolving {module}.{name}")
        info = self.index.module(module)
        if info is None:
            if not self.index.is_internal(module):
                return Found(f"{module}.{name}", FoundKind.EXTERNAL)
            return Missing(f"module {module} does not exist in this build")
        binding = info.bindings.get(name)
        if binding is not None:
            return self._from_binding(info, name, binding, depth)
        if info.is_package and self.index.exists(f"{module}.{name}"):
            sub = self.index.module(f"{module}.{name}")
            assert sub is not None
            return Found(sub.name, FoundKind.MODULE, Location(sub.relpath, 1), handle=Definition(sub, sub.tree))
        for star in info.star_imports:
            found = self.module_lookup(star, name, depth + 1)
            if isinstance(found, Found):
                return found
        if name in info.lazy:
            target_module, attr = info.lazy[name]
            return self.module_lookup(target_module, attr, depth + 1)
        if info.has_getattr:
            served = getattr_names(info.tree)
            if served is not None and name in served:
                node = served[name]
                return Found(f"{module}.{name}", FoundKind.ATTRIBUTE, Location(info.relpath, node.lineno),
                             handle=Definition(info, node))
            if served is not None:
                return Missing(f"module {module} has no name '{name}' (its __getattr__ serves only "
                               f"{', '.join(sorted(served)) or 'its own globals'})")
            return Unresolved(f"{module} defines a module __getattr__; '{name}' may be provided lazily")
        return Missing(f"module {module} has no name '{name}'")

    def _from_binding(self, info: ModuleInfo, name: str, binding: Binding, depth: int) -> Lookup:
        node = binding.node
        if binding.kind == BindingKind.CLASS:
            return self._class_found(info, node)  # type: ignore[arg-type]
        if binding.kind == BindingKind.DEF:
            return Found(f"{info.name}.{name}", FoundKind.FUNCTION, Location(info.relpath, node.lineno),  # type: ignore[attr-defined]
                         handle=Definition(info, node))
        if binding.kind == BindingKind.IMPORT:
            assert binding.module is not None and binding.name is not None
            if self.index.is_internal(binding.module):
                found = self.module_lookup(binding.module, binding.name, depth + 1)
                if isinstance(found, Missing):
                    return Missing(f"{info.name} imports '{binding.name}' from {binding.module}, "
                                   f"which does not have it", found.elsewhere)
                return found
            return Found(f"{binding.module}.{binding.name}", FoundKind.EXTERNAL)
        if binding.kind == BindingKind.MODULE:
            assert binding.module is not None
            target = self.index.module(binding.module)
            if target is None:
                return Found(binding.module, FoundKind.EXTERNAL)
            return Found(target.name, FoundKind.MODULE, Location(target.relpath, 1),
                         handle=Definition(target, target.tree))
        if binding.kind == BindingKind.ASSIGN:
            value = getattr(node, "value", None)
            if isinstance(value, (ast.Name, ast.Attribute)):
                aliased = self.resolve_expr(info, value, depth + 1)
                if isinstance(aliased, Found):
                    return aliased
            return Found(f"{info.name}.{name}", FoundKind.ATTRIBUTE, Location(info.relpath, node.lineno),  # type: ignore[attr-defined]
                         handle=Definition(info, node))
        return Unresolved(f"cannot read binding of {info.name}.{name}")

    def resolve_expr(self, info: ModuleInfo, expr: ast.expr, depth: int = 0, types: bool = False) -> Lookup:
        """A Name / Attribute chain evaluated in a module's namespace (``types``: TYPE_CHECKING too)."""
        if isinstance(expr, ast.Name):
            if expr.id in info.bindings:
                return self._from_binding(info, expr.id, info.bindings[expr.id], depth)
            if types and expr.id in info.type_bindings:
                return self._from_binding(info, expr.id, info.type_bindings[expr.id], depth)
            if hasattr(builtins, expr.id):
                return Found(f"builtins.{expr.id}", FoundKind.EXTERNAL)
            return Unresolved(f"'{expr.id}' is not a module-level name of {info.name}")
        if isinstance(expr, ast.Attribute):
            base = self.resolve_expr(info, expr.value, depth, types)
            if isinstance(base, Found):
                if base.kind == FoundKind.EXTERNAL:
                    return Found(f"{base.path}.{expr.attr}", FoundKind.EXTERNAL)
                return self.member(base, expr.attr)
            return base
        if isinstance(expr, ast.Subscript):
            return self.resolve_expr(info, expr.value, depth, types)
        if isinstance(expr, ast.Call):
            return Unresolved(f"computed value {ast.unparse(expr)}")
        return Unresolved(f"expression {ast.unparse(expr)}")


    # ---- classes -------------------------------------------------------------------------
    def _class_found(self, info: ModuleInfo, node: ast.ClassDef, qualname: str | None = None) -> Found:
        path = f"{info.name}.{qualname or node.name}"
        return Found(path, FoundKind.CLASS, Location(info.relpath, node.lineno), handle=Definition(info, node))

    def class_model(self, found: Found) -> ClassModel | None:
        """The class ``found`` names, with its bases resolved (``compat.vllm.classes``)."""
        return self.classes.model(found)

    def mro(self, model: ClassModel, depth: int = 0) -> tuple[list[ClassModel], list[str]]:
        """Internal classes in C3 order, and the external bases met (by dotted path)."""
        return self.classes.mro(model, depth)

    def own_member(self, cls: ClassModel, name: str) -> Found | None:
        """``name`` as the body of ``cls`` itself defines it (the last definition wins), not inherited."""
        return self.classes.own_member(cls, name)

    # ---- members -------------------------------------------------------------------------
    def member(self, owner: Found, name: str) -> Lookup:
        if owner.kind == FoundKind.MODULE:
            return self.module_lookup(owner.path, name)
        if owner.kind == FoundKind.EXTERNAL:
            return Found(f"{owner.path}.{name}", FoundKind.EXTERNAL)
        if owner.kind == FoundKind.ATTRIBUTE and (declared := self._declared_class(owner)) is not None:
            # ``current_platform: Platform`` (vllm/platforms/__init__.py, served by the module's __getattr__):
            # the object is of that class or a subclass, so what the class has is there; what it lacks may
            # still come from the subclass chosen at run time.
            inherited = self.member(declared, name)
            if isinstance(inherited, Found):
                return inherited
            return Unresolved(f"{owner.path} is declared {declared.path}, which has no '{name}'; the object at run "
                              "time may be of a subclass that has it")
        if owner.kind != FoundKind.CLASS:
            return Unresolved(f"{owner.path} is a {owner.kind}; its attributes are not known statically")
        model = self.class_model(owner)
        if model is None:
            return Unresolved(f"cannot read class {owner.path}")
        order, external = self.mro(model)
        for cls in order:
            found = self.own_member(cls, name)
            if found is not None:
                return found
        for cls in order:
            found = self.classes.instance_attribute(cls, name)
            if found is not None:
                return found
        dynamic = next((cls for cls in order if self.own_member(cls, "__getattr__")), None)
        if dynamic is not None:
            if owner.wraps is not None and self.classes.forwarded_attribute(dynamic) is not None:
                return self.member(owner.wraps, name)  # served by the wrapped object, as its __getattr__ says
            return Unresolved(f"{owner.path} defines __getattr__; '{name}' may be provided dynamically")
        if external:
            return Unresolved(f"{owner.path} inherits from {', '.join(external)} (outside the build); "
                              f"'{name}' may come from there", outside=True)
        return Missing(f"{owner.path} has no attribute '{name}'")

    def _declared_class(self, owner: Found) -> Found | None:
        """The class a module attribute is annotated with at the module's top level or under ``if TYPE_CHECKING:``
        (``current_platform: Platform``), else None."""
        module, _, name = owner.path.rpartition(".")
        info = self.index.module(module)
        if info is None:
            return None
        body = list(info.tree.body)
        body += [s for stmt in info.tree.body if isinstance(stmt, ast.If) for s in stmt.body]
        for stmt in body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                cls = self.resolve_expr(info, stmt.annotation, types=True)
                return cls if isinstance(cls, Found) and cls.kind == FoundKind.CLASS else None
        return None

    def member_names(self, owner: Found) -> tuple[str, ...]:
        """Names reachable on a class (class body and instance attributes along the MRO) or module."""
        defined = definition(owner)
        if owner.kind == FoundKind.MODULE and defined is not None:
            info = defined.module
            return tuple(sorted(set(info.bindings) | set(info.lazy)))
        model = self.class_model(owner) if owner.kind == FoundKind.CLASS else None
        if model is None:
            return ()
        return tuple(sorted(self.classes.member_names(model)))

    # ---- signatures and types -------------------------------------------------------------
    def signature(self, obj: Found) -> Signature | Unresolved:
        return self.callables.signature(obj)

    def result_type(self, obj: Found, through: Found | None = None) -> Lookup:
        return self.inference.result_type(obj, through)

    def attribute_type(self, owner: Found, name: str) -> Lookup:
        return self.inference.attribute_type(owner, name)

    def fact(self, fact: Fact[T], *inputs: Any) -> T:
        key = fact.key(inputs)
        if key not in self._facts:
            self._facts[key] = fact.read(self, *inputs)
        return self._facts[key]

    def save(self) -> None:
        """A plain static reading keeps nothing between audits (``CachedSurface`` does)."""

    # ---- where names live ----------------------------------------------------------------
    def definitions(self, name: str) -> tuple[str, ...]:
        if name not in self._definitions:
            self._definitions[name] = _defined_at(self.index, name)
        return self._definitions[name]


def static_reading(surface: object) -> StaticSurface | None:
    """The static reading behind ``surface``: itself, the one a cache wraps (``inner``) or the one an installed
    build read by importing keeps beside it (``static``); None where there is none."""
    for inner in (getattr(surface, "inner", None), getattr(surface, "static", None), surface):
        if isinstance(inner, StaticSurface):
            return inner
    return None


def _defined_at(index: SourceIndex, name: str) -> tuple[str, ...]:
    """The modules whose top level defines a class or function ``name``, as dotted paths, read with a regex (fast,
    no parsing; only the files whose text names it are searched)."""
    needle = name.encode()
    pattern = re.compile(rb"^(?:class|def|async def)\s+" + re.escape(needle) + rb"(?![A-Za-z0-9_])", re.M)
    return tuple(f"{module_name(index.root, path)}.{name}" for path, data in index.texts() if needle in data
                 for _ in pattern.finditer(data))

