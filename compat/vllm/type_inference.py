"""The type inference of the static reading: the class of what calling a name returns (``result_type``), of an
attribute (``attribute_type``), of what an annotation names (``annotation_class``) and of a value an assignment
stores, followed through parameters, ``self``, attribute chains, calls, ``a or b`` and a method's locals.

An object built as a forwarding wrapper (``compat.vllm.forwarding``) carries the class of what it wraps
(``Found.wraps``). ``TypeReader`` asks the static reading (``Reading``) to resolve names and members, and the
``ClassReader`` about classes.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any

from compat.syntax import FunctionNode, walk_shallow
from compat.vllm import forwarding
from compat.vllm.classes import ClassReader, class_body, flatten, self_name
from compat.vllm.definitions import ClassModel, Reading, definition
from compat.vllm.modules import ModuleInfo
from compat.vllm.surface import Found, FoundKind, Lookup, Missing, Unresolved

MAX_VALUE_DEPTH = 6
"""How many steps (a parameter, a local, an attribute, a call) a value is followed before its class is unknown."""


class TypeReader:
    """The classes of results, attributes and annotations of one build."""

    def __init__(self, reading: Reading, classes: ClassReader) -> None:
        self.reading = reading
        self.classes = classes
        self._earlier: set[tuple[str, str]] = set()
        """(class, attribute) pairs whose earlier value is being read (a value built from itself stops there)."""

    def result_type(self, obj: Found, through: Found | None = None) -> Lookup:
        if obj.kind == FoundKind.CLASS:
            return obj
        defined = definition(obj)
        if obj.kind in (FoundKind.FUNCTION, FoundKind.METHOD, FoundKind.CLASSMETHOD, FoundKind.STATICMETHOD,
                        FoundKind.PROPERTY) and defined is not None and defined.function is not None:
            returns = defined.function.returns
            own = through if through is not None and through.kind == FoundKind.CLASS else \
                defined.owner.found if defined.owner is not None else None
            if own is not None and (_names_self_type(returns) or returns is None and _returns_own_instance(
                    defined.function, obj.kind)):
                return own  # `-> Self`, or `return cls(...)` in a classmethod: the class it was reached through
            if returns is None:
                return Unresolved(f"{obj.path} has no return annotation")
            return self.annotation_class(defined.module, returns)
        return Unresolved(f"{obj.path} is a {obj.kind}; calling it is not understood statically",
                          outside=obj.kind == FoundKind.EXTERNAL)

    def attribute_type(self, owner: Found, name: str) -> Lookup:
        found = self.reading.member(owner, name)
        if not isinstance(found, Found):
            return found
        defined = definition(found)
        derived = self._derived_assignment(owner, found, defined)
        if derived is not None:
            return derived
        if found.kind == FoundKind.PROPERTY:
            return self.result_type(found)
        class_attribute = found.kind == FoundKind.ATTRIBUTE and defined is not None and defined.owner is not None
        module_attribute = found.kind == FoundKind.ATTRIBUTE and defined is not None and defined.owner is None \
            and defined.method is None  # `_TP: GroupCoordinator | None = None` at module level
        if defined is not None and (class_attribute or module_attribute or defined.method is not None):
            stmt = defined.node
            if isinstance(stmt, ast.AnnAssign):
                return self.annotation_class(defined.module, stmt.annotation)
            return self._value_class(defined.module, getattr(stmt, "value", None), defined.method, defined.owner,
                                     target=name if defined.method is not None else None)
        if found.kind == FoundKind.CLASS:
            return found
        return Unresolved(f"the type of {found.path} is not declared", outside=found.kind == FoundKind.EXTERNAL)

    def _derived_assignment(self, owner: Found, found: Found, defined: Any) -> Found | None:
        """The class a subclass's own code assigns to an attribute a base class annotates (``impl:
        AttentionImpl`` on ``AttentionLayerBase``, ``self.impl = impl_cls(...)`` with ``impl_cls = cast(
        type[MLAAttentionImpl], ...)`` in ``MLAAttention``): the object is that class, not the annotation's."""
        if found.kind != FoundKind.ATTRIBUTE or defined is None or defined.owner is None or \
                owner.kind != FoundKind.CLASS or not isinstance(defined.node, ast.AnnAssign):
            return None
        model = self.classes.model(owner)
        if model is None:
            return None
        for cls in self.classes.mro(model)[0]:
            if cls is defined.owner or cls.found.path == defined.owner.found.path:
                return None
            assigned = self.classes.instance_attribute(cls, found.path.rpartition(".")[2])
            held = definition(assigned) if assigned is not None else None
            if held is not None and held.method is not None and isinstance(held.node, ast.Assign):
                value = self._value_class(held.module, held.node.value, held.method, held.owner)
                declared = self.annotation_class(defined.module, defined.node.annotation)
                if isinstance(value, Found) and value.kind == FoundKind.CLASS and (
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
        if depth > MAX_VALUE_DEPTH:
            return Unresolved("the attribute's value is too far to follow")
        function = method if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if isinstance(value, ast.Call) and len(value.args) == 2 and \
                ast.unparse(value.func).rsplit(".", 1)[-1] == "cast":
            return self.annotation_class(info, value.args[0])  # typing.cast(T, v): what the code says v is
        if isinstance(value, ast.Call):
            callee, through = self._callee(info, value, method, owner, depth + 1)
            if isinstance(callee, Found) and callee.kind == FoundKind.CLASS:
                return self._built(info, value, callee, function, owner, depth, target)
            if isinstance(callee, Found):
                return self.result_type(callee, through) if callee.kind != FoundKind.EXTERNAL else Unresolved(
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
            return self.reading.resolve_expr(info, value)
        if isinstance(value, ast.Attribute) and function is not None and _reaches_local(value, function):
            base = self._value_class(info, value.value, method, owner, depth + 1)
            if not isinstance(base, Found):
                return base
            found = self.attribute_type(base, value.attr) if base.kind == FoundKind.CLASS else \
                self.reading.member(base, value.attr)
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
            return self.reading.resolve_expr(info, call.func), None
        if isinstance(call.func, ast.Attribute):
            base = self._value_class(info, call.func.value, method, owner, depth)
            member = self.reading.member(base, call.func.attr) if isinstance(base, Found) and \
                base.kind == FoundKind.CLASS else None
            if isinstance(member, Found) and member.kind in (FoundKind.METHOD, FoundKind.CLASSMETHOD,
                                                             FoundKind.STATICMETHOD, FoundKind.FUNCTION):
                return member, base  # type: ignore[return-value]
        return self._value_class(info, call.func, method, owner, depth), None

    def _built(self, info: ModuleInfo, call: ast.Call, cls: Found, function: FunctionNode | None,
               owner: ClassModel | None, depth: int, target: str | None) -> Found:
        """The object ``call`` builds of class ``cls``: with what it wraps where ``cls`` forwards to it (the
        argument's class; ``self.x = Wrapper(self.x, ...)`` wraps what ``self.x`` held before)."""
        argument = self._forwarded_argument(call, cls)
        if argument is None:
            return cls
        this = self_name(function) if function is not None and owner is not None else None
        name = forwarding.self_attribute(argument, this) if this is not None else None
        wrapped = self._earlier_class(owner, name, depth + 1) if name is not None and name == target and \
            owner is not None else self._value_class(info, argument, function, owner, depth + 1)
        return replace(cls, wraps=wrapped) if isinstance(wrapped, Found) else cls

    def annotation_class(self, info: ModuleInfo, annotation: ast.expr) -> Lookup:
        """The single class an annotation names (``X``, ``"X"``, ``X | None``, ``Optional[X]``)."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            text = annotation.value
            try:
                annotation = ast.parse(text, mode="eval").body
            except SyntaxError:
                return Unresolved(f"unreadable annotation {text!r}")
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            options = [o for o in _union_members(annotation) if not _is_none(o)]
            if len(options) == 1:
                return self.annotation_class(info, options[0])
            classes = [self.annotation_class(info, o) for o in options]
            outside = all(isinstance(f, Found) and f.kind == FoundKind.EXTERNAL or
                          isinstance(f, Unresolved) and f.outside for f in classes)
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
        found = self.reading.resolve_expr(info, annotation, types=True)
        if isinstance(found, Found) and found.kind not in (FoundKind.CLASS, FoundKind.EXTERNAL):
            return Unresolved(f"annotation {ast.unparse(annotation)} is not a class")
        if isinstance(found, Found) and found.path in ("typing.Any", "typing_extensions.Any", "builtins.object"):
            return Unresolved(f"annotation {ast.unparse(annotation)} says nothing of the type", outside=True)
        return found

    def _forwarded_argument(self, call: ast.Call, wrapper: Found) -> ast.expr | None:
        """What the construction site ``call`` of a forwarding wrapper class passes for the object it wraps: the
        argument its constructor stores in the attribute its ``__getattr__`` forwards to (None: not such a class)."""
        model = self.classes.model(wrapper)
        if model is None:
            return None
        order = self.classes.mro(model)[0]
        dynamic = next((cls for cls in order if self.classes.own_member(cls, "__getattr__")), None)
        attribute = self.classes.forwarded_attribute(dynamic) if dynamic is not None else None
        builder = next((cls for cls in order if self.classes.own_member(cls, "__init__")), None)
        constructor = self.classes.own_member(builder, "__init__") if builder is not None else None
        init = definition(constructor) if constructor is not None else None
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
            for cls in self.classes.mro(owner)[0]:
                for method in class_body(cls.node.body):
                    if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or self_name(method) is None:
                        continue
                    this = self_name(method)
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
            callee.kind == FoundKind.CLASS else None
        return argument is not None and forwarding.self_attribute(argument, self_name(method) or "") == name


def _assigned(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return [t for target in node.targets for t in flatten(target)] if isinstance(node, ast.Assign) else [node.target]


def _union_members(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    return [node]


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _names_self_type(annotation: ast.expr | None) -> bool:
    """``-> Self`` or ``-> "Self"`` (typing or typing_extensions)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in ("Self", "typing.Self", "typing_extensions.Self")
    return annotation is not None and ast.unparse(annotation).rsplit(".", 1)[-1] == "Self"


def _returns_own_instance(function: ast.FunctionDef | ast.AsyncFunctionDef, kind: FoundKind) -> bool:
    """Every ``return`` of the function gives an instance of its own class: ``cls(...)`` in a classmethod (directly or
    through a local assigned only from it), or ``self`` in a method."""
    params = function.args.posonlyargs + function.args.args
    if kind not in (FoundKind.CLASSMETHOD, FoundKind.METHOD) or not params:
        return False
    first = params[0].arg
    made: dict[str, bool] = {}
    returned: list[ast.expr | None] = []
    for node in walk_shallow(function):
        if isinstance(node, ast.Assign):
            built = isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) and \
                node.value.func.id == first and kind == FoundKind.CLASSMETHOD
            for target in node.targets:
                if isinstance(target, ast.Name):
                    made[target.id] = made.get(target.id, True) and built
        elif isinstance(node, ast.Return):
            returned.append(node.value)

    def own(value: ast.expr | None) -> bool:
        if isinstance(value, ast.Name):
            return value.id == first if kind == FoundKind.METHOD else made.get(value.id, False)
        return kind == FoundKind.CLASSMETHOD and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
            value.func.id == first

    return bool(returned) and all(own(value) for value in returned)


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
