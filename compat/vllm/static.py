"""The static reading: resolve vLLM names and signatures from source with ``ast``, never importing.

It answers what ``import`` and ``inspect.signature`` would answer at run time: re-exports through
``__init__`` files and lazy ``__getattr__`` tables, inherited members (C3 order), instance
attributes set in methods, and constructors synthesised by dataclass-like decorators (see
``compat.vllm.callables``).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from compat.location import Location
from compat.signature import Signature
from compat.syntax import FunctionNode, is_type_checking, module_name, walk_shallow
from compat.vllm import forwarding
from compat.vllm.callables import CallableReader
from compat.vllm.definitions import ClassModel, Definition, SelfAssignments, definition
from compat.vllm.modules import Binding, ModuleInfo, SourceIndex, target_names
from compat.vllm.surface import BuildInfo, Found, Lookup, Missing, Unresolved

if TYPE_CHECKING:
    from compat.facts import Fact

T = TypeVar("T")

# Bases that add no members a consumer could reach and no constructor parameters.
NEUTRAL_BASES = {
    "builtins.object", "abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol",
    "object", "ABC", "Generic", "Protocol",
}
_MAX_DEPTH = 40


class StaticSurface:
    """API surface of a source tree (a release, a wheel, an sdist, a checkout, or site-packages)."""

    def __init__(self, root: Path, build: BuildInfo, package: str = "vllm") -> None:
        self.build = build
        self.package = package
        self.index = SourceIndex(Path(root), package)
        self._classes: dict[tuple[str, int], ClassModel] = {}
        self._definitions: dict[str, tuple[str, ...]] = {}
        self._facts: dict[str, Any] = {}
        self._earlier: set[tuple[str, str]] = set()
        """(class, attribute) pairs whose earlier value is being read (a value built from itself stops there)."""
        self.callables = CallableReader(self)

    # ---- names ---------------------------------------------------------------------------
    def lookup(self, path: str) -> Lookup:
        parts = path.split(".")
        if not self.index.is_internal(path):
            return Found(path, "external")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            info = self.index.module(module)
            if info is None:
                continue
            current: Lookup = Found(module, "module", Location(info.relpath, 1), handle=Definition(info, info.tree))
            for name in parts[cut:]:
                if not isinstance(current, Found):
                    break
                current = self.member(current, name)
            return current
        return Missing(f"no module {parts[0]} in the build")

    def module_lookup(self, module: str, name: str, depth: int = 0) -> Lookup:
        """``name`` as ``from module import name`` would see it."""
        if depth > _MAX_DEPTH:
            return Unresolved(f"import cycle while resolving {module}.{name}")
        info = self.index.module(module)
        if info is None:
            if not self.index.is_internal(module):
                return Found(f"{module}.{name}", "external")
            return Missing(f"module {module} does not exist in this build")
        binding = info.bindings.get(name)
        if binding is not None:
            return self._from_binding(info, name, binding, depth)
        if info.is_package and self.index.exists(f"{module}.{name}"):
            sub = self.index.module(f"{module}.{name}")
            assert sub is not None
            return Found(sub.name, "module", Location(sub.relpath, 1), handle=Definition(sub, sub.tree))
        for star in info.star_imports:
            found = self.module_lookup(star, name, depth + 1)
            if isinstance(found, Found):
                return found
        if name in info.lazy:
            target_module, attr = info.lazy[name]
            return self.module_lookup(target_module, attr, depth + 1)
        if info.has_getattr:
            served = _getattr_names(info.tree)
            if served is not None and name in served:
                node = served[name]
                return Found(f"{module}.{name}", "attribute", Location(info.relpath, node.lineno),
                             handle=Definition(info, node))
            if served is not None:
                return Missing(f"module {module} has no name '{name}' (its __getattr__ serves only "
                               f"{', '.join(sorted(served)) or 'its own globals'})")
            return Unresolved(f"{module} defines a module __getattr__; '{name}' may be provided lazily")
        return Missing(f"module {module} has no name '{name}'")

    def _from_binding(self, info: ModuleInfo, name: str, binding: Binding, depth: int) -> Lookup:
        node = binding.node
        if binding.kind == "class":
            return self._class_found(info, node)  # type: ignore[arg-type]
        if binding.kind == "def":
            return Found(f"{info.name}.{name}", "function", Location(info.relpath, node.lineno),  # type: ignore[attr-defined]
                         handle=Definition(info, node))
        if binding.kind == "import":
            assert binding.module is not None and binding.name is not None
            if self.index.is_internal(binding.module):
                found = self.module_lookup(binding.module, binding.name, depth + 1)
                if isinstance(found, Missing):
                    return Missing(f"{info.name} imports '{binding.name}' from {binding.module}, "
                                   f"which does not have it", found.elsewhere)
                return found
            return Found(f"{binding.module}.{binding.name}", "external")
        if binding.kind == "module":
            assert binding.module is not None
            target = self.index.module(binding.module)
            if target is None:
                return Found(binding.module, "external")
            return Found(target.name, "module", Location(target.relpath, 1),
                         handle=Definition(target, target.tree))
        if binding.kind == "assign":
            value = getattr(node, "value", None)
            if isinstance(value, (ast.Name, ast.Attribute)):
                aliased = self.resolve_expr(info, value, depth + 1)
                if isinstance(aliased, Found):
                    return aliased
            return Found(f"{info.name}.{name}", "attribute", Location(info.relpath, node.lineno),  # type: ignore[attr-defined]
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
                return Found(f"builtins.{expr.id}", "external")
            return Unresolved(f"'{expr.id}' is not a module-level name of {info.name}")
        if isinstance(expr, ast.Attribute):
            base = self.resolve_expr(info, expr.value, depth, types)
            if isinstance(base, Found):
                if base.kind == "external":
                    return Found(f"{base.path}.{expr.attr}", "external")
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
        return Found(path, "class", Location(info.relpath, node.lineno), handle=Definition(info, node))

    def class_model(self, found: Found) -> ClassModel | None:
        defined = definition(found)
        if found.kind != "class" or defined is None or not isinstance(defined.node, ast.ClassDef):
            return None
        info, node = defined.module, defined.node
        key = (str(info.path), node.lineno)
        model = self._classes.get(key)
        if model is None:
            bases: list[Found | Unresolved | Missing] = []
            for base in node.bases:
                resolved = self.resolve_expr(info, base)
                bases.append(resolved)
            model = ClassModel(found, info, node, bases)
            self._classes[key] = model
        return model

    def mro(self, model: ClassModel, depth: int = 0) -> tuple[list[ClassModel], list[str]]:
        """Internal classes in C3 order, and the external bases met (by dotted path)."""
        if model.mro is not None and model.external is not None:
            return model.mro, model.external
        if depth > _MAX_DEPTH:
            return [model], ["<inheritance too deep>"]
        sequences: list[list[ClassModel]] = []
        external: list[str] = []
        for base in model.bases:
            if isinstance(base, Found) and base.kind == "class":
                base_model = self.class_model(base)
                if base_model is not None:
                    base_mro, base_external = self.mro(base_model, depth + 1)
                    sequences.append(list(base_mro))
                    external.extend(e for e in base_external if e not in external)
                    continue
            if isinstance(base, Found):
                if base.path not in NEUTRAL_BASES and base.path not in external:
                    external.append(base.path)
            else:
                external.append(f"<unresolved base: {base.reason}>")
        sequences.append([self.class_model(b) for b in model.bases  # type: ignore[misc]
                          if isinstance(b, Found) and b.kind == "class" and self.class_model(b) is not None])
        order = [model] + _c3_merge(sequences)
        model.mro, model.external = order, external
        return order, external

    # ---- members -------------------------------------------------------------------------
    def member(self, owner: Found, name: str) -> Lookup:
        if owner.kind == "module":
            return self.module_lookup(owner.path, name)
        if owner.kind == "external":
            return Found(f"{owner.path}.{name}", "external")
        if owner.kind != "class":
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
            found = self._instance_attribute(cls, name)
            if found is not None:
                return found
        dynamic = next((cls for cls in order if self.own_member(cls, "__getattr__")), None)
        if dynamic is not None:
            if owner.wraps is not None and self.forwarded_attribute(dynamic) is not None:
                return self.member(owner.wraps, name)  # served by the wrapped object, as its __getattr__ says
            return Unresolved(f"{owner.path} defines __getattr__; '{name}' may be provided dynamically")
        if external:
            return Unresolved(f"{owner.path} inherits from {', '.join(external)} (outside the build); "
                              f"'{name}' may come from there", outside=True)
        return Missing(f"{owner.path} has no attribute '{name}'")

    def own_member(self, cls: ClassModel, name: str) -> Found | None:
        """``name`` as the body of ``cls`` itself defines it (the last definition wins), not inherited."""
        if cls.members is None:
            cls.members = _own_definitions(cls.node.body)
        known = cls.members.get(name)
        if known is None or isinstance(known, Found):
            return known
        path, loc, handle = f"{cls.found.path}.{name}", Location(cls.module.relpath, known.lineno), \
            Definition(cls.module, known, cls)
        if isinstance(known, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = Found(path, _method_kind(known), loc, handle=handle)
        else:
            found = Found(path, "class" if isinstance(known, ast.ClassDef) else "attribute", loc, handle=handle)
        cls.members[name] = found
        return found

    def forwarded_attribute(self, cls: ClassModel) -> str | None:
        """The attribute of ``self`` that the class's own ``__getattr__`` forwards every name to, if it does
        (``compat.vllm.forwarding``)."""
        own = self.own_member(cls, "__getattr__")
        defined = definition(own) if own is not None else None
        function = defined.function if defined is not None else None
        return forwarding.forwarded_attribute(function) if function is not None else None

    def _forwarded_argument(self, call: ast.Call, wrapper: Found) -> ast.expr | None:
        """What the construction site ``call`` of a forwarding wrapper class passes for the object it wraps: the
        argument its constructor stores in the attribute its ``__getattr__`` forwards to (None: not such a class)."""
        model = self.class_model(wrapper)
        if model is None:
            return None
        order = self.mro(model)[0]
        dynamic = next((cls for cls in order if self.own_member(cls, "__getattr__")), None)
        attribute = self.forwarded_attribute(dynamic) if dynamic is not None else None
        builder = next((cls for cls in order if self.own_member(cls, "__init__")), None)
        init = definition(self.own_member(builder, "__init__")) if builder is not None else None  # type: ignore[arg-type]
        if attribute is None or init is None or init.function is None:
            return None
        parameter = forwarding.stored_parameter(init.function, attribute)
        return forwarding.bound_argument(call, init.function, parameter) if parameter is not None else None

    def _earlier_class(self, owner: ClassModel, name: str, depth: int) -> Lookup:
        """The class ``self.<name>`` holds where a statement wraps it in itself (``self.model = Wrapper(self.model,
        ...)``): the one class of every other value the class's code assigns it (``None`` and wrappings aside)."""
        key = (owner.found.path, name)
        if key in self._earlier:
            return Unresolved(f"self.{name} is built from itself")
        self._earlier.add(key)
        try:
            classes: dict[str, Found] = {}
            for cls in self.mro(owner)[0]:
                for method in _class_body(cls.node.body):
                    if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or _self_name(method) is None:
                        continue
                    this = _self_name(method)
                    for node in ast.walk(method):
                        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                        if value is None or _is_none(value) or not any(
                                forwarding.self_attribute(t, this) == name for t in _assigned(node)):  # type: ignore[arg-type]
                            continue
                        if isinstance(value, ast.Call) and self._wraps_itself(cls, method, value, name, depth):
                            continue
                        found = self._value_class(cls.module, value, method, cls, depth + 1)
                        if not isinstance(found, Found):
                            return found
                        classes[found.path] = found
            if len(classes) == 1:
                return next(iter(classes.values()))
            return Unresolved(f"self.{name} holds objects of several classes ({', '.join(sorted(classes))})" if classes
                              else f"self.{name} is assigned nothing but its wrappings")
        finally:
            self._earlier.discard(key)

    def _wraps_itself(self, cls: ClassModel, method: FunctionNode, call: ast.Call, name: str, depth: int) -> bool:
        """``call`` builds a forwarding wrapper around ``self.<name>`` itself."""
        callee, _ = self._callee(cls.module, call, method, cls, depth + 1)
        argument = self._forwarded_argument(call, callee) if isinstance(callee, Found) and \
            callee.kind == "class" else None
        return argument is not None and forwarding.self_attribute(argument, _self_name(method) or "") == name

    def _instance_attribute(self, cls: ClassModel, name: str) -> Found | None:
        if cls.assigned is None:
            cls.assigned = SelfAssignments(_self_assignments(cls.node.body))
        first = cls.assigned.first(name)
        if first is not None:
            sub, stmt = first
            return Found(f"{cls.found.path}.{name}", "instance-attribute", Location(cls.module.relpath, sub.lineno),
                         handle=Definition(cls.module, sub, cls, stmt))
        slots = self.own_member(cls, "__slots__")
        defined = definition(slots) if slots is not None else None
        value = getattr(defined.node, "value", None) if defined is not None else None
        if defined is not None and isinstance(value, (ast.Tuple, ast.List)) and any(
                isinstance(e, ast.Constant) and e.value == name for e in value.elts):
            return Found(f"{cls.found.path}.{name}", "instance-attribute", slots.location,  # type: ignore[union-attr]
                         handle=Definition(cls.module, defined.node, cls))
        return None

    def member_names(self, owner: Found) -> tuple[str, ...]:
        """Names reachable on a class (class body and instance attributes along the MRO) or module."""
        defined = definition(owner)
        if owner.kind == "module" and defined is not None:
            info = defined.module
            return tuple(sorted(set(info.bindings) | set(info.lazy)))
        model = self.class_model(owner) if owner.kind == "class" else None
        if model is None:
            return ()
        names: set[str] = set()
        for cls in self.mro(model)[0]:
            for stmt in _class_body(cls.node.body):
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(stmt.name)
                elif isinstance(stmt, ast.Assign):
                    names.update(n for t in stmt.targets for n in target_names(t))
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    names.add(stmt.target.id)
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _self_name(stmt):
                    self_name = _self_name(stmt)
                    for sub in ast.walk(stmt):
                        if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                                and isinstance(sub.value, ast.Name) and sub.value.id == self_name):
                            names.add(sub.attr)
        return tuple(sorted(names))

    # ---- signatures and types -------------------------------------------------------------
    def signature(self, obj: Found) -> Signature | Unresolved:
        return self.callables.signature(obj)

    def result_type(self, obj: Found, through: Found | None = None) -> Lookup:
        if obj.kind == "class":
            return obj
        defined = definition(obj)
        if obj.kind in ("function", "method", "classmethod", "staticmethod", "property") and defined is not None \
                and defined.function is not None:
            returns = defined.function.returns
            own = through if through is not None and through.kind == "class" else \
                defined.owner.found if defined.owner is not None else None
            if own is not None and (_names_self_type(returns) or returns is None and _returns_own_instance(
                    defined.function, obj.kind)):
                return own  # `-> Self`, or `return cls(...)` in a classmethod: the class it was reached through
            if returns is None:
                return Unresolved(f"{obj.path} has no return annotation")
            return self.annotation_class(defined.module, returns)
        return Unresolved(f"{obj.path} is a {obj.kind}; calling it is not understood statically",
                          outside=obj.kind == "external")

    def attribute_type(self, owner: Found, name: str) -> Lookup:
        found = self.member(owner, name)
        if not isinstance(found, Found):
            return found
        defined = definition(found)
        derived = self._derived_assignment(owner, found, defined)
        if derived is not None:
            return derived
        if found.kind == "property":
            return self.result_type(found)
        class_attribute = found.kind == "attribute" and defined is not None and defined.owner is not None
        module_attribute = found.kind == "attribute" and defined is not None and defined.owner is None \
            and defined.method is None  # `_TP: GroupCoordinator | None = None` at module level
        if defined is not None and (class_attribute or module_attribute or defined.method is not None):
            stmt = defined.node
            if isinstance(stmt, ast.AnnAssign):
                return self.annotation_class(defined.module, stmt.annotation)
            return self._value_class(defined.module, getattr(stmt, "value", None), defined.method, defined.owner,
                                     target=name if defined.method is not None else None)
        if found.kind == "class":
            return found
        return Unresolved(f"the type of {found.path} is not declared", outside=found.kind == "external")

    def _derived_assignment(self, owner: Found, found: Found, defined: Any) -> Found | None:
        """The class a subclass's own code assigns to an attribute a base class annotates (``impl:
        AttentionImpl`` on ``AttentionLayerBase``, ``self.impl = impl_cls(...)`` with ``impl_cls = cast(
        type[MLAAttentionImpl], ...)`` in ``MLAAttention``): the object is that class, not the annotation's."""
        if found.kind != "attribute" or defined is None or defined.owner is None or owner.kind != "class" or \
                not isinstance(defined.node, ast.AnnAssign):
            return None
        model = self.class_model(owner)
        if model is None:
            return None
        for cls in self.mro(model)[0]:
            if cls is defined.owner or cls.found.path == defined.owner.found.path:
                return None
            assigned = self._instance_attribute(cls, found.path.rpartition(".")[2])
            held = definition(assigned) if assigned is not None else None
            if held is not None and held.method is not None and isinstance(held.node, ast.Assign):
                value = self._value_class(held.module, held.node.value, held.method, held.owner)
                declared = self.annotation_class(defined.module, defined.node.annotation)
                if isinstance(value, Found) and value.kind == "class" and (
                        not isinstance(declared, Found) or declared.path != value.path):
                    return value
                return None
        return None

    def _value_class(self, info: ModuleInfo, value: ast.expr | None, method: ast.AST | None,
                     owner: ClassModel | None = None, depth: int = 0, target: str | None = None) -> Lookup:
        """The class of a value assigned to an attribute (``self.x = <value>`` in ``method`` of ``owner``, or at
        module level; ``target``: the ``x`` assigned), followed through parameters, ``self``, attribute chains,
        calls, ``a or b`` and the method's locals. An object of a forwarding wrapper (``compat.vllm.forwarding``)
        says what it wraps (``Found.wraps``)."""
        if depth > _MAX_VALUE_DEPTH:
            return Unresolved("the attribute's value is too far to follow")
        function = method if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if isinstance(value, ast.Call) and len(value.args) == 2 and \
                ast.unparse(value.func).rsplit(".", 1)[-1] == "cast":
            return self.annotation_class(info, value.args[0])  # typing.cast(T, v): what the code says v is
        if isinstance(value, ast.Call):
            callee, through = self._callee(info, value, method, owner, depth + 1)
            if isinstance(callee, Found) and callee.kind == "class":
                return self._built(info, value, callee, function, owner, depth, target)
            if isinstance(callee, Found):
                return self.result_type(callee, through) if callee.kind != "external" else Unresolved(
                    f"built by {callee.path}, outside the build", outside=True)
            return callee
        if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):  # `model or loader.load_model(...)`
            options = [self._value_class(info, v, method, owner, depth + 1) for v in value.values if not _is_none(v)]
            unknown = next((o for o in options if not isinstance(o, Found)), None)
            if unknown is not None:
                return unknown
            classes = {o.path: o for o in options if isinstance(o, Found)}
            return next(iter(classes.values())) if len(classes) == 1 else Unresolved(
                f"{ast.unparse(value)} is one of several classes ({', '.join(sorted(classes))})")
        if isinstance(value, ast.Name) and function is not None:
            params = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
            if params and value.id == params[0].arg and owner is not None and not _is_static(function):
                return owner.found  # self
            for arg in params:
                if arg.arg == value.id:
                    return self.annotation_class(info, arg.annotation) if arg.annotation is not None else \
                        Unresolved(f"parameter {arg.arg} has no annotation")
            assigned = _single_assignment(function, value.id)
            if assigned is not None:
                return self._value_class(info, assigned, method, owner, depth + 1)
            return self.resolve_expr(info, value)
        if isinstance(value, ast.Attribute) and function is not None and _reaches_local(value, function):
            base = self._value_class(info, value.value, method, owner, depth + 1)
            if not isinstance(base, Found):
                return base
            found = self.attribute_type(base, value.attr) if base.kind == "class" else self.member(base, value.attr)
            if isinstance(found, Missing):
                # vLLM's own code reads it, so the object is more than the declared class says (an interface).
                return Unresolved(f"the attribute's value is read through {base.path}, which declares no "
                                  f"'{value.attr}' (the class at run time has it)")
            return found
        return Unresolved("the attribute's type is not declared")

    def _callee(self, info: ModuleInfo, call: ast.Call, method: ast.AST | None, owner: ClassModel | None,
                depth: int) -> tuple[Lookup, Found | None]:
        """What ``call`` calls, and the class it was reached through for a method of an object the method holds
        (``self.load_lora_model(...)``, ``loader.load_model(...)``: the method, whose result the call gives)."""
        function = method if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if function is None or not _reaches_local(call.func, function):
            return self.resolve_expr(info, call.func), None
        if isinstance(call.func, ast.Attribute):
            base = self._value_class(info, call.func.value, method, owner, depth)
            member = self.member(base, call.func.attr) if isinstance(base, Found) and base.kind == "class" else None
            if isinstance(member, Found) and member.kind in ("method", "classmethod", "staticmethod", "function"):
                return member, base  # type: ignore[return-value]
        return self._value_class(info, call.func, method, owner, depth), None

    def _built(self, info: ModuleInfo, call: ast.Call, cls: Found, function: FunctionNode | None,
               owner: ClassModel | None, depth: int, target: str | None) -> Found:
        """The object ``call`` builds of class ``cls``: with what it wraps where ``cls`` forwards to it (the
        argument's class; ``self.x = Wrapper(self.x, ...)`` wraps what ``self.x`` held before)."""
        argument = self._forwarded_argument(call, cls)
        if argument is None:
            return cls
        this = _self_name(function) if function is not None and owner is not None else None
        name = forwarding.self_attribute(argument, this) if this is not None else None
        wrapped = self._earlier_class(owner, name, depth + 1) if name is not None and name == target and \
            owner is not None else self._value_class(info, argument, function, owner, depth + 1)
        return replace(cls, wraps=wrapped) if isinstance(wrapped, Found) else cls

    def annotation_class(self, info: ModuleInfo, annotation: ast.expr) -> Lookup:
        """The single class an annotation names (``X``, ``"X"``, ``X | None``, ``Optional[X]``)."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return Unresolved(f"unreadable annotation {annotation.value!r}")
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            options = [o for o in _union_members(annotation) if not _is_none(o)]
            if len(options) == 1:
                return self.annotation_class(info, options[0])
            found = [self.annotation_class(info, o) for o in options]
            outside = all(isinstance(f, Found) and f.kind == "external" or isinstance(f, Unresolved) and f.outside
                          for f in found)
            return Unresolved(f"annotation {ast.unparse(annotation)} names several types", outside=outside)
        if isinstance(annotation, ast.Subscript):
            head = ast.unparse(annotation.value).rsplit(".", 1)[-1]
            if head == "Optional":
                return self.annotation_class(info, annotation.slice)
            if head == "type":
                return self.annotation_class(info, annotation.slice)  # a class object: calling it builds one
            if head in ("Annotated", "SkipValidation"):
                inner = annotation.slice.elts[0] if isinstance(annotation.slice, ast.Tuple) else annotation.slice
                return self.annotation_class(info, inner)
            return Unresolved(f"annotation {ast.unparse(annotation)} is a container type", outside=True)
        found = self.resolve_expr(info, annotation, types=True)
        if isinstance(found, Found) and found.kind not in ("class", "external"):
            return Unresolved(f"annotation {ast.unparse(annotation)} is not a class")
        if isinstance(found, Found) and found.path in ("typing.Any", "typing_extensions.Any", "builtins.object"):
            return Unresolved(f"annotation {ast.unparse(annotation)} says nothing of the type", outside=True)
        return found

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


def _defined_at(index: SourceIndex, name: str) -> tuple[str, ...]:
    """The modules whose top level defines a class or function ``name``, as dotted paths, read with a regex (fast,
    no parsing; only the files whose text names it are searched)."""
    needle = name.encode()
    pattern = re.compile(rb"^(?:class|def|async def)\s+" + re.escape(needle) + rb"(?![A-Za-z0-9_])", re.M)
    return tuple(f"{module_name(index.root, path)}.{name}" for path, data in index.texts() if needle in data
                 for _ in pattern.finditer(data))


def _class_body(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a class body, looking into ``if``/``try`` blocks (not TYPE_CHECKING)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not is_type_checking(stmt.test):
                out.extend(_class_body(stmt.body))
            out.extend(_class_body(stmt.orelse))
        elif isinstance(stmt, ast.Try):
            out.extend(_class_body(stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse))
        else:
            out.append(stmt)
    return out


def _own_definitions(body: list[ast.stmt]) -> dict[str, Found | ast.stmt]:
    """Each name a class body defines (a def, a class, an assignment, an annotation), with its last definition."""
    defined: dict[str, Found | ast.stmt] = {}
    for stmt in _class_body(body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            defined.update((n, stmt) for t in stmt.targets for n in target_names(t))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            defined[stmt.target.id] = stmt
    return defined


def _self_assignments(body: list[ast.stmt]) -> Iterator[tuple[str, ast.stmt, FunctionNode]]:
    """(name, statement, method) for each ``self.<name>`` a method of a class body assigns, in order."""
    for stmt in _class_body(body):
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        self_name = _self_name(stmt)
        if self_name is None:
            continue
        for sub in ast.walk(stmt):
            targets: list[ast.expr] = []
            if isinstance(sub, ast.Assign):
                targets = [t for target in sub.targets for t in _flatten(target)]
            elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                targets = [sub.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == self_name:
                    yield target.attr, sub, stmt  # type: ignore[misc]


def _assigned(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return [t for target in node.targets for t in _flatten(target)] if isinstance(node, ast.Assign) else [node.target]


def _self_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    params = node.args.posonlyargs + node.args.args
    return params[0].arg if params else None


def _method_kind(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    for deco in node.decorator_list:
        name = ast.unparse(deco.func if isinstance(deco, ast.Call) else deco).rsplit(".", 1)[-1]
        if name in ("property", "cached_property", "cached_property_with_name"):
            return "property"
        if name == "classmethod":
            return "classmethod"
        if name == "staticmethod":
            return "staticmethod"
        if name in ("setter", "getter", "deleter"):
            return "property"
    return "method"


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for e in target.elts for t in _flatten(e)]
    if isinstance(target, ast.Starred):
        return _flatten(target.value)
    return [target]


def _getattr_names(tree: ast.Module) -> dict[str, ast.AST] | None:
    """The names a module's ``__getattr__(name)`` serves, when it serves a fixed set: each return sits under a
    test of ``name`` against string constants (``if name == "current_platform"``, ``name in ("a", "b")``) or
    returns one of the module's own globals; anything else (a computed lookup) is None: not known statically."""
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)
    if function is None or not function.args.args:
        return None
    param = function.args.args[0].arg
    served: dict[str, ast.AST] = {}

    def constants(test: ast.expr) -> list[str] | None:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) and \
                test.left.id == param:
            right = test.comparators[0]
            values = right.elts if isinstance(test.ops[0], ast.In) and isinstance(right, (ast.Tuple, ast.List,
                                                                                          ast.Set)) else [right]
            if isinstance(test.ops[0], (ast.Eq, ast.In)) and all(isinstance(v, ast.Constant) and isinstance(
                    v.value, str) for v in values):
                return [v.value for v in values]
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


def _union_members(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    return [node]


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _c3_merge(sequences: list[list[ClassModel]]) -> list[ClassModel]:
    result: list[ClassModel] = []
    seqs = [list(s) for s in sequences if s]
    while seqs:
        for seq in seqs:
            head = seq[0]
            if not any(head in other[1:] for other in seqs):
                break
        else:
            # Inconsistent hierarchy: fall back to depth-first order without duplicates.
            for seq in seqs:
                for item in seq:
                    if item not in result:
                        result.append(item)
            return result
        result.append(head)
        seqs = [[c for c in s if c is not head] for s in seqs]
        seqs = [s for s in seqs if s]
    return result


def _names_self_type(annotation: ast.expr | None) -> bool:
    """``-> Self`` or ``-> "Self"`` (typing or typing_extensions)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in ("Self", "typing.Self", "typing_extensions.Self")
    return annotation is not None and ast.unparse(annotation).rsplit(".", 1)[-1] == "Self"


def _returns_own_instance(function: ast.FunctionDef | ast.AsyncFunctionDef, kind: str) -> bool:
    """Every ``return`` of the function gives an instance of its own class: ``cls(...)`` in a classmethod (directly or
    through a local assigned only from it), or ``self`` in a method."""
    params = function.args.posonlyargs + function.args.args
    if kind not in ("classmethod", "method") or not params:
        return False
    first = params[0].arg
    made: dict[str, bool] = {}
    returned: list[ast.expr | None] = []
    for node in walk_shallow(function):
        if isinstance(node, ast.Assign):
            built = isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) and \
                node.value.func.id == first and kind == "classmethod"
            for target in node.targets:
                if isinstance(target, ast.Name):
                    made[target.id] = made.get(target.id, True) and built
        elif isinstance(node, ast.Return):
            returned.append(node.value)

    def own(value: ast.expr | None) -> bool:
        if isinstance(value, ast.Name):
            return value.id == first if kind == "method" else made.get(value.id, False)
        return kind == "classmethod" and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
            value.func.id == first

    return bool(returned) and all(own(value) for value in returned)


_MAX_VALUE_DEPTH = 6


def _is_static(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in function.decorator_list)


def _root_name(expr: ast.expr) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Call, ast.Subscript)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _reaches_local(expr: ast.expr, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The chain starts at a name of the function (a parameter, ``self``, a local), not a module-level one."""
    root = _root_name(expr)
    if root is None:
        return False
    args = function.args
    if any(a.arg == root for a in args.posonlyargs + args.args + args.kwonlyargs):
        return True
    return _single_assignment(function, root) is not None


def _single_assignment(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr | None:
    """The value of a local the function assigns exactly once (``config = vllm_config.model_config``)."""
    values = [node.value for node in walk_shallow(function) if isinstance(node, ast.Assign)
              and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name]
    bound = [target for node in walk_shallow(function) for target in _binds(node)]
    annotated = [t for t in bound if name in {n.id for n in ast.walk(t) if isinstance(n, ast.Name) and
                                               isinstance(n.ctx, ast.Store)}]
    return values[0] if len(values) == 1 and not annotated else None


def _binds(node: ast.AST) -> list[ast.expr]:
    """The targets a statement binds other than by ``name = value``: ``for x in``, ``with ... as x``, ``x += 1``,
    ``x: T = v``, ``(x := v)`` (not the statements inside a block)."""
    if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
        return [node.target]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []
