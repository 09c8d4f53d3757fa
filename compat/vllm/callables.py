"""Signatures read from source the way ``inspect.signature`` reports them at run time.

Covers plain functions and methods (seen through an instance: no ``self``), decorators that keep
the wrapped signature (``functools.wraps``, decorators returning their argument), constructors
found along the MRO (``__new__`` before ``__init__`` as ``inspect`` orders them), and ``__init__``
synthesised for ``dataclasses``, pydantic dataclasses, ``dataclass_transform`` decorators such as
vLLM's ``@config``, ``msgspec.Struct``, ``NamedTuple`` and pydantic ``BaseModel``.
"""

from __future__ import annotations

import ast
from enum import StrEnum

from compat.signature import Parameter, ParamKind, Signature
from compat.syntax import FunctionNode, annotation_text, from_def
from compat.vllm.definitions import ClassModel, Reading, definition
from compat.vllm.modules import BindingKind, ModuleInfo
from compat.vllm.surface import Found, FoundKind, Unresolved

DATACLASS_DECORATORS = {"dataclasses.dataclass", "pydantic.dataclasses.dataclass"}
TRANSFORM_MARKERS = {"typing.dataclass_transform", "typing_extensions.dataclass_transform"}
FIELD_FUNCTIONS = {"dataclasses.field", "pydantic.Field", "pydantic.fields.Field", "msgspec.field"}
STRUCT_BASES = {"msgspec.Struct"}
NAMEDTUPLE_BASES = {"typing.NamedTuple"}
MODEL_BASES = {"pydantic.BaseModel", "pydantic.main.BaseModel"}
# Decorators known to keep the decorated callable's signature.
KEEPS_SIGNATURE = {
    "staticmethod", "classmethod", "property", "cached_property", "abstractmethod", "override", "final",
    "cache", "lru_cache", "wraps", "inference_mode", "no_grad", "deprecated", "contextmanager",
    "asynccontextmanager", "runtime_checkable", "total_ordering", "unique", "setter", "getter",
}
EXTERNAL_INIT = {
    "torch.nn.Module": Signature((Parameter("args", ParamKind.VAR_POSITIONAL),
                                  Parameter("kwargs", ParamKind.VAR_KEYWORD))),
    "builtins.Exception": Signature((Parameter("args", ParamKind.VAR_POSITIONAL),
                                     Parameter("kwargs", ParamKind.VAR_KEYWORD))),
}
_MAX_DEPTH = 12


class Flavour(StrEnum):
    """Which synthesised ``__init__`` a class gets (``CallableReader.dataclass_flavour``)."""

    DATACLASS = "dataclass"
    """``dataclasses``, pydantic dataclasses or a ``dataclass_transform`` decorator such as vLLM's ``@config``."""
    STRUCT = "struct"
    """A ``msgspec.Struct``."""
    NAMEDTUPLE = "namedtuple"
    """A ``typing.NamedTuple``."""
    MODEL = "model"
    """A pydantic ``BaseModel``."""


class CallableReader:
    def __init__(self, surface: Reading) -> None:
        self.surface = surface

    # ---- entry point ---------------------------------------------------------------------
    def signature(self, obj: Found) -> Signature | Unresolved:
        if obj.kind == FoundKind.CLASS:
            model = self.surface.class_model(obj)
            if model is None:
                return Unresolved(f"cannot read class {obj.path}")
            return self.constructor(model)
        if obj.kind == FoundKind.EXTERNAL:
            return Unresolved(f"{obj.path} is outside the build", outside=True)
        defined = definition(obj)
        if defined is None or defined.function is None:
            return Unresolved(f"{obj.path} is a {obj.kind}, not a callable the static reading understands")
        sig = self.decorated(defined.module, defined.function)
        if isinstance(sig, Unresolved):
            return sig
        sig = self._literal_defaults(sig, defined.owner, defined.module)
        if obj.kind in (FoundKind.METHOD, FoundKind.CLASSMETHOD, FoundKind.PROPERTY):
            sig = sig.drop_first()
        return self.forwarded(defined.module, defined.function, sig) or sig

    def forwarded(self, info: ModuleInfo, node: FunctionNode, sig: Signature,
                  depth: int = 0) -> Signature | Unresolved | None:
        """What a def taking only ``(*args, **kwargs)`` accepts when it passes them on whole to one callable of the
        build: that callable's parameters, less the keys it pops first, which it takes itself (``WorkerProc.
        worker_main`` pops ``ready_pipe`` and builds ``WorkerProc(*args, **kwargs)``); Unresolved when that
        callable's signature is not known (a call binding ``(*args, **kwargs)`` is not known to work); None for any
        other def."""
        kinds = [p.kind for p in sig.parameters]
        if kinds != [ParamKind.VAR_POSITIONAL, ParamKind.VAR_KEYWORD] or depth > _MAX_DEPTH:
            return None
        args, kwargs = (p.name for p in sig.parameters)
        calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and _passes_on(c, args, kwargs)]
        if len(calls) != 1:
            return None
        target = self.surface.resolve_expr(info, calls[0].func)
        if not isinstance(target, Found) or \
                target.kind not in (FoundKind.CLASS, FoundKind.FUNCTION, FoundKind.STATICMETHOD):
            return None
        inner = self.signature(target)
        if isinstance(inner, Unresolved):
            return Unresolved(f"passes its arguments on to {target.path}: {inner.reason}", outside=inner.outside)
        popped = _popped(node, kwargs)
        kept = [p for p in inner.parameters if p.name not in popped]
        at = next((i for i, p in enumerate(kept) if p.kind == ParamKind.VAR_KEYWORD), len(kept))
        return Signature(tuple(kept[:at]) + tuple(popped.values()) + tuple(kept[at:]), sig.returns)

    # ---- functions -----------------------------------------------------------------------
    def decorated(self, info: ModuleInfo, node: FunctionNode,
                  depth: int = 0) -> Signature | Unresolved:
        """The signature of a def after its decorators, innermost first."""
        sig: Signature | Unresolved = from_def(node)
        for deco in reversed(node.decorator_list):
            if isinstance(sig, Unresolved):
                return sig
            sig = self.apply_decorator(info, deco, sig, depth)
        return sig

    def apply_decorator(self, info: ModuleInfo, deco: ast.expr, sig: Signature,
                        depth: int) -> Signature | Unresolved:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = ast.unparse(target).rsplit(".", 1)[-1]
        if name in KEEPS_SIGNATURE or name == "overload":
            return sig
        resolved = self.surface.resolve_expr(info, target)
        if not isinstance(resolved, Found) or resolved.kind == FoundKind.EXTERNAL:
            # Decorators from other libraries (torch, functools, typing...) keep signatures
            # through functools.wraps as a rule; say so when they are not known.
            return sig
        defined = definition(resolved)
        if resolved.kind != FoundKind.FUNCTION or depth > _MAX_DEPTH or defined is None or defined.function is None:
            return Unresolved(f"decorated by {ast.unparse(target)}, which the static reading cannot follow")
        deco_info, deco_node = defined.module, defined.function
        if isinstance(deco, ast.Call) and not _partial_of_itself(deco_node):
            inner = _returned_function(deco_node)
            if inner is None:
                if _returns_param(deco_node):
                    return sig
                return Unresolved(f"decorator factory {resolved.path} returns something the static reading cannot "
                                  "follow")
            deco_node = inner
        # A decorator usable with and without arguments (``@instrument(span_name=...)`` returns
        # ``functools.partial(instrument, ...)``): applied, it is the function itself, given the decorated one.
        return self._wrapper_signature(deco_info, deco_node, sig, resolved.path, depth)

    def _wrapper_signature(self, info: ModuleInfo, deco_node: FunctionNode,
                           sig: Signature, name: str, depth: int) -> Signature | Unresolved:
        if _returns_param(deco_node) or self._hands_on(info, deco_node, depth):
            return sig
        wrappers = _returned_functions(deco_node)
        if wrappers and all(_wraps(w) for w in wrappers):
            return sig  # `return async_wrapper if iscoroutinefunction(f) else sync_wrapper`, each wrapping f
        wrapper = _returned_function(deco_node)
        if wrapper is None:
            return Unresolved(f"decorated by {name}, which returns something the static reading cannot follow")
        if _wraps(wrapper):
            return sig
        return self.decorated(info, wrapper, depth + 1)

    def _hands_on(self, info: ModuleInfo, node: FunctionNode, depth: int) -> bool:
        """Every way out of decorator ``node`` hands back the decorated function, or what a decorator of the build
        that keeps signatures (``functools.wraps``) makes of it: ``return obj``, ``return otel_wrap(func=obj)``
        with ``otel_wrap`` taken from a backend table of the module; its own ``functools.partial`` (the
        decorator's form with arguments) is not a way out when it is applied."""
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        returns = [r.value for r in _own_returns(node) if r.value is not None and not _is_partial_of(r.value, node)]
        if not params or not returns or depth > _MAX_DEPTH:
            return False
        for value in returns:
            if isinstance(value, ast.Name) and value.id == params[0]:
                continue
            if not (isinstance(value, ast.Call) and any(isinstance(a, ast.Name) and a.id == params[0] for a in
                                                        [*value.args, *(k.value for k in value.keywords)])):
                return False
            target = self.surface.resolve_expr(info, _from_table(info, node, value.func) or value.func)
            if not isinstance(target, Found) or target.kind != FoundKind.FUNCTION:
                return False
            defined = definition(target)
            if defined is None or defined.function is None:
                return False
            keeps = self._wrapper_signature(defined.module, defined.function, Signature(()), target.path, depth + 1)
            if isinstance(keeps, Unresolved):
                return False
        return True

    # ---- classes -------------------------------------------------------------------------
    def constructor(self, model: ClassModel) -> Signature | Unresolved:
        """What ``inspect.signature(cls)`` gives: own ``__new__``/``__init__`` first, then inherited (read once per
        class: a config's defaults ask for it once per field)."""
        if model.constructor is None:
            model.constructor = self._constructor(model)
        return model.constructor

    def _constructor(self, model: ClassModel) -> Signature | Unresolved:
        order, external = self.surface.mro(model)
        synthesized = self._synthesized(model, order, external)
        if synthesized is not None:
            return synthesized
        own = self.surface.own_member(model, "__new__") or self.surface.own_member(model, "__init__")
        if own is not None:
            return self._method_signature(own)
        for cls in order[1:]:
            synthesized = self._synthesized(cls, self.surface.mro(cls)[0], self.surface.mro(cls)[1])
            if synthesized is not None:
                return synthesized
            found = self.surface.own_member(cls, "__new__") or self.surface.own_member(cls, "__init__")
            if found is not None:
                return self._method_signature(found)
        for base in external:
            if base in EXTERNAL_INIT:
                return EXTERNAL_INIT[base]
            return Unresolved(f"{model.found.path} takes its constructor from {base}, outside the build", outside=True)
        return Signature(())

    def _method_signature(self, found: Found) -> Signature | Unresolved:
        defined = definition(found)
        if defined is None or defined.function is None:
            return Unresolved(f"{found.path} is not a def the static reading can read")
        sig = self.decorated(defined.module, defined.function)
        return sig if isinstance(sig, Unresolved) else self._literal_defaults(sig, defined.owner,
                                                                              defined.module).drop_first()

    def _literal_defaults(self, sig: Signature, cls: ClassModel | None, info: ModuleInfo) -> Signature:
        params = []
        for p in sig.parameters:
            if p.default is not None and p.default.isidentifier():
                p = Parameter(p.name, p.kind, p.has_default, self.constant_text(cls, ast.Name(p.default), info),
                              p.annotation)
            params.append(p)
        return Signature(tuple(params), sig.returns)

    def _synthesized(self, model: ClassModel, order: list[ClassModel], external: list[str]) -> Signature | None:
        """A generated ``__init__`` for dataclass-like classes (None when the class gets none)."""
        flavour = self.dataclass_flavour(model, external)
        if flavour is None:
            return None
        if flavour == Flavour.DATACLASS and self.surface.own_member(model, "__init__") is not None:
            return None
        options = self._decorator_options(model)
        if options.get("init") is False:
            return None
        fields = self.fields(model, order, external, flavour)
        kw_only_all = bool(options.get("kw_only")) or flavour == Flavour.MODEL or (
            flavour == Flavour.STRUCT and self._struct_kw_only(order))
        positional = [f for f in fields if not (kw_only_all or f[2])]
        keyword = [f for f in fields if kw_only_all or f[2]]
        params = [Parameter(n, ParamKind.POSITIONAL_OR_KEYWORD, d is not None, d, a) for n, a, _, d in positional]
        params += [Parameter(n, ParamKind.KEYWORD_ONLY, d is not None, d, a) for n, a, _, d in keyword]
        if flavour == Flavour.MODEL and self._model_allows_extra(order):
            params.append(Parameter("data", ParamKind.VAR_KEYWORD))
        return Signature(tuple(params), "None" if flavour in (Flavour.DATACLASS, Flavour.MODEL) else None)

    def dataclass_flavour(self, model: ClassModel, external: list[str]) -> Flavour | None:
        for deco in model.node.decorator_list:
            if self._is_dataclass_decorator(model.module, deco):
                return Flavour.DATACLASS
        if any(b in STRUCT_BASES for b in external):
            return Flavour.STRUCT
        if any(b in NAMEDTUPLE_BASES for b in external):
            return Flavour.NAMEDTUPLE
        if any(b in MODEL_BASES for b in external):
            return Flavour.MODEL
        return None

    def _is_dataclass_decorator(self, info: ModuleInfo, deco: ast.expr) -> bool:
        target = deco.func if isinstance(deco, ast.Call) else deco
        resolved = self.surface.resolve_expr(info, target)
        if not isinstance(resolved, Found):
            return False
        if resolved.path in DATACLASS_DECORATORS:
            return True
        defined = definition(resolved)
        if resolved.kind == FoundKind.FUNCTION and defined is not None and defined.function is not None:
            for marker in defined.function.decorator_list:
                marker_target = marker.func if isinstance(marker, ast.Call) else marker
                found = self.surface.resolve_expr(defined.module, marker_target)
                if isinstance(found, Found) and found.path in TRANSFORM_MARKERS:
                    return True
        return False

    def _decorator_options(self, model: ClassModel) -> dict[str, object]:
        options: dict[str, object] = {}
        for deco in model.node.decorator_list:
            if isinstance(deco, ast.Call) and self._is_dataclass_decorator(model.module, deco):
                for kw in deco.keywords:
                    if kw.arg and isinstance(kw.value, ast.Constant):
                        options[kw.arg] = kw.value.value
        return options

    def _struct_kw_only(self, order: list[ClassModel]) -> bool:
        for cls in order:
            for kw in cls.node.keywords:
                if kw.arg == "kw_only" and isinstance(kw.value, ast.Constant):
                    return bool(kw.value.value)
        return False

    def _model_allows_extra(self, order: list[ClassModel]) -> bool:
        for cls in order:
            for stmt in cls.node.body:
                if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "model_config"
                                                        for t in stmt.targets):
                    return "'allow'" in ast.unparse(stmt.value) or '"allow"' in ast.unparse(stmt.value)
        return False

    def fields(self, model: ClassModel, order: list[ClassModel], external: list[str],
               flavour: Flavour) -> list[tuple[str, str | None, bool, str | None]]:
        """(name, annotation, kw_only, default) of every init field, bases first (dataclass order)."""
        collected: dict[str, tuple[str, str | None, bool, str | None]] = {}
        for cls in reversed(order):
            if cls is not model and self.dataclass_flavour(cls, self.surface.mro(cls)[1]) is None:
                continue
            for name, annotation, kw_only, default, init in self._own_fields(cls):
                if not init:
                    collected.pop(name, None)
                    continue
                collected[name] = (name, annotation, kw_only, default)
        return list(collected.values())

    def _own_fields(self, cls: ClassModel):
        kw_only = False
        for stmt in cls.node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            annotation = annotation_text(stmt.annotation)
            head = annotation.split("[", 1)[0].rsplit(".", 1)[-1]
            if head == "ClassVar":
                continue
            if head == "KW_ONLY":
                kw_only = True
                continue
            name = stmt.target.id
            default: str | None = None
            init = True
            field_kw_only = kw_only
            value = stmt.value
            if value is not None and isinstance(value, ast.Call) and self._is_field_call(cls.module, value):
                for kw in value.keywords:
                    if kw.arg in ("default_factory", "factory"):
                        default = "<factory>"
                    elif kw.arg == "init" and isinstance(kw.value, ast.Constant):
                        init = bool(kw.value.value)
                    elif kw.arg == "kw_only" and isinstance(kw.value, ast.Constant):
                        field_kw_only = bool(kw.value.value)
                given = _default_node(value)
                if given is not None:
                    default = self.constant_text(cls, given)
            elif value is not None:
                default = self.constant_text(cls, value)
            yield name, annotation, field_kw_only, default, init

    def constant_text(self, cls: ClassModel | None, node: ast.expr, info: ModuleInfo | None = None) -> str:
        """A default as ``inspect`` shows it: a name bound to a literal reads as the literal."""
        if isinstance(node, ast.Name):
            scopes: list[list[ast.Assign | ast.AnnAssign]] = []
            if cls is not None:
                scopes.append([s for s in cls.node.body if isinstance(s, (ast.Assign, ast.AnnAssign))])
            module = info or (cls.module if cls is not None else None)
            if module is not None:
                binding = module.bindings.get(node.id)
                if binding is not None and binding.kind == BindingKind.ASSIGN and \
                        isinstance(binding.node, (ast.Assign, ast.AnnAssign)):
                    scopes.append([binding.node])
                elif binding is not None and binding.kind == BindingKind.IMPORT and binding.module:
                    target = self.surface.module_lookup(binding.module, binding.name or node.id)
                    defined = definition(target) if isinstance(target, Found) else None
                    if defined is not None and isinstance(defined.node, (ast.Assign, ast.AnnAssign)) \
                            and defined.owner is None:
                        scopes.append([defined.node])
            for statements in scopes:
                for stmt in statements:
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    names = [t.id for t in targets if isinstance(t, ast.Name)]
                    if node.id in names and stmt.value is not None:
                        try:
                            return repr(ast.literal_eval(stmt.value))
                        except (ValueError, SyntaxError, TypeError):
                            break
        return ast.unparse(node)

    def _is_field_call(self, info: ModuleInfo, call: ast.Call) -> bool:
        resolved = self.surface.resolve_expr(info, call.func)
        if isinstance(resolved, Found) and resolved.path in FIELD_FUNCTIONS:
            return True
        name = ast.unparse(call.func).rsplit(".", 1)[-1]
        return name in ("field", "Field") and not isinstance(resolved, Found)


def _default_node(call: ast.Call) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == "default":
            return kw.value
    if call.args and not (isinstance(call.args[0], ast.Constant) and call.args[0].value is Ellipsis):
        return call.args[0]
    return None


def _wraps(wrapper: FunctionNode) -> bool:
    return any(ast.unparse(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1] == "wraps"
               for d in wrapper.decorator_list)


def _is_partial_of(value: ast.expr, node: FunctionNode) -> bool:
    """``functools.partial(node, ...)``: the decorator ``node`` itself, with its arguments bound."""
    return isinstance(value, ast.Call) and ast.unparse(value.func).rsplit(".", 1)[-1] == "partial" and \
        bool(value.args) and isinstance(value.args[0], ast.Name) and value.args[0].id == node.name


def _partial_of_itself(node: FunctionNode) -> bool:
    return any(r.value is not None and _is_partial_of(r.value, node) for r in _own_returns(node))


def _from_table(info: ModuleInfo, node: FunctionNode, func: ast.expr) -> ast.expr | None:
    """What a name unpacked from a module-level table holds: ``_, wrap = BACKENDS["otel"]`` in ``node`` with
    ``BACKENDS = {"otel": (available, instrument_otel)}`` gives ``instrument_otel``."""
    if not isinstance(func, ast.Name):
        return None
    for stmt in ast.walk(node):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)):
            continue
        table = stmt.value
        if not (isinstance(table, ast.Subscript) and isinstance(table.value, ast.Name)
                and isinstance(table.slice, ast.Constant)):
            continue
        names = [t.id if isinstance(t, ast.Name) else None for t in stmt.targets[0].elts]
        if func.id not in names:
            continue
        for top in info.tree.body:
            if not isinstance(top, (ast.Assign, ast.AnnAssign)):
                continue
            target = top.target if isinstance(top, ast.AnnAssign) else top.targets[0] if len(top.targets) == 1 \
                else None
            if isinstance(target, ast.Name) and target.id == table.value.id and isinstance(top.value, ast.Dict):
                for key, value in zip(top.value.keys, top.value.values):
                    if isinstance(key, ast.Constant) and key.value == table.slice.value and \
                            isinstance(value, ast.Tuple) and len(value.elts) == len(names):
                        return value.elts[names.index(func.id)]
    return None


def _passes_on(call: ast.Call, args: str, kwargs: str) -> bool:
    """``f(*args, **kwargs)`` and nothing else."""
    return len(call.args) == 1 and isinstance(call.args[0], ast.Starred) and isinstance(call.args[0].value, ast.Name) \
        and call.args[0].value.id == args and len(call.keywords) == 1 and call.keywords[0].arg is None and \
        isinstance(call.keywords[0].value, ast.Name) and call.keywords[0].value.id == kwargs


def _popped(node: FunctionNode, kwargs: str) -> dict[str, Parameter]:
    """``kwargs.pop("key")`` (required) and ``kwargs.pop("key", default)`` in a def: keyword-only parameters."""
    found: dict[str, Parameter] = {}
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "pop" and \
                isinstance(call.func.value, ast.Name) and call.func.value.id == kwargs and call.args and \
                isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
            default = ast.unparse(call.args[1]) if len(call.args) > 1 else None
            found.setdefault(call.args[0].value, Parameter(call.args[0].value, ParamKind.KEYWORD_ONLY,
                                                           has_default=default is not None, default=default))
    return found


def _own_returns(node: FunctionNode) -> list[ast.Return]:
    """The return statements of ``node`` itself, not of the functions nested in it."""
    found: list[ast.Return] = []
    stack: list[ast.AST] = list(node.body)
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Return):
            found.append(current)
        elif not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(current))
    return found


def _returned_function(node: FunctionNode) -> FunctionNode | None:
    """The inner def a decorator (factory) returns, if it returns one by name."""
    inner = {s.name: s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for ret in _own_returns(node):
        if isinstance(ret.value, ast.Name) and ret.value.id in inner:
            return inner[ret.value.id]
    return None


def _returned_functions(node: FunctionNode) -> list[FunctionNode]:
    """Every inner def ``node`` returns, through ``a if test else b`` too; empty if it returns anything else."""
    inner = {s.name: s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found: list[FunctionNode] = []
    for ret in _own_returns(node):
        values = [ret.value.body, ret.value.orelse] if isinstance(ret.value, ast.IfExp) else [ret.value]
        for value in values:
            if not (isinstance(value, ast.Name) and value.id in inner):
                return []
            found.append(inner[value.id])
    return found


def _returns_param(node: FunctionNode) -> bool:
    """A decorator that hands back what it was given (possibly after registering it)."""
    params = {a.arg for a in node.args.posonlyargs + node.args.args}
    returns = [r for r in _own_returns(node) if r.value is not None]
    return bool(returns) and all(isinstance(r.value, ast.Name) and r.value.id in params for r in returns)
