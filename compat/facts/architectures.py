"""Model conventions of an architecture, read from the build: registry entry, the attribute path to the
decoder stack, the embedding method, the decoder layer's forward and how the base model calls it,
how the top model calls the base model, and whether the class is marked as supporting EAGLE-3."""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass, field, replace
from typing import TypeGuard

from compat.facts import Fact
from compat.facts.reading import loc, method
from compat.signature import Parameter, ParamKind, Signature
from compat.syntax import call_shape, from_def
from compat.vllm.definitions import ClassModel, definition
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

REGISTRY = "vllm.model_executor.models.registry"
EMBEDDING_METHODS = ("embed_input_ids", "get_input_embeddings")
PROTOCOL = "vllm.model_executor.models.interfaces.SupportsEagle3"
_MAX_DEPTH = 4


@dataclass(frozen=True)
class BaseForward:
    """The decoder stack's ``forward``: its parameters and whether it takes ``**kwargs`` to pass on."""

    parameters: tuple[str, ...]
    var_kwargs: bool
    at: str | None


@dataclass(frozen=True)
class BaseCall:
    """How the top-level model's ``forward`` calls the decoder stack."""

    positional: int
    keywords: tuple[str, ...]
    star_kwargs: bool
    code: str
    at: str | None


@dataclass(frozen=True)
class LayerCall:
    """How the decoder stack's ``forward`` calls each layer: the argument expressions it passes, and the names it
    assigns the call's result to (``hidden_states, residual = layer(...)``: what it carries to the next layer)."""

    positional: tuple[str, ...]
    keywords: tuple[str, ...]
    star_kwargs: tuple[str, ...]
    code: str
    at: str | None
    targets: tuple[str, ...] = ()
    keyword_values: tuple[str, ...] = ()
    """The expressions passed by ``keywords``, in their order."""
    stream: tuple[str, ...] = ()
    """Of ``targets``, those the stack hands on as the residual stream after its last layer: to its final norm
    (``self.norm(hidden_states, residual)``), or, without one, what it returns. Other carried values (HunYuan's
    cross-layer key/value states) are not the stream."""


@dataclass(frozen=True)
class Layer:
    """The decoder layer class and its ``forward`` (parameters without their defaults' text)."""

    cls: str
    forward: str
    at: str | None
    parameters: tuple[Parameter, ...] = ()

    @property
    def signature(self) -> Signature:
        return Signature(self.parameters)


@dataclass(frozen=True)
class ModelFacts:
    """One architecture's conventions in this build (only ``arch`` and ``registered`` when it is not in the
    registry; ``error`` when its decoder stack cannot be found)."""

    arch: str
    registered: bool = False
    cls: str | None = None
    class_at: str | None = None
    eagle3: bool | None = None
    eagle3_missing: tuple[str, ...] = ()
    error: str | None = None
    path: tuple[str, ...] | None = None
    base: str | None = None
    base_at: str | None = None
    embedding: dict[str, str | None] = field(default_factory=dict)
    """The embedding methods the decoder stack has (of ``EMBEDDING_METHODS``), with where they are defined."""
    base_members: tuple[str, ...] = ()
    base_forward: BaseForward | None = None
    top_calls_base: BaseCall | None = None
    layer_call: LayerCall | None = None
    layer: Layer | None = None


_REGISTRIES: weakref.WeakKeyDictionary[StaticSurface, dict[str, tuple[str, str]]] = weakref.WeakKeyDictionary()


def registry(surface: StaticSurface) -> dict[str, tuple[str, str]]:
    """Every ``"Arch": ("module", "Class")`` entry of the build's model registry (read once per build)."""
    if surface not in _REGISTRIES:
        _REGISTRIES[surface] = _read_registry(surface)
    return _REGISTRIES[surface]


def _read_registry(surface: StaticSurface) -> dict[str, tuple[str, str]]:
    info = surface.index.module(REGISTRY)
    entries: dict[str, tuple[str, str]] = {}
    if info is None:
        return entries
    for node in ast.walk(info.tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Tuple)
                    and len(value.elts) >= 2 and isinstance(first := value.elts[0], ast.Constant)
                    and isinstance(second := value.elts[1], ast.Constant)
                    and isinstance(first.value, str) and isinstance(second.value, str)):
                entries.setdefault(key.value, (first.value, second.value))
    return entries


def _init_assignments(surface: StaticSurface, model: ClassModel) -> list[tuple[str, ast.expr, ClassModel]]:
    """``self.X = <value>`` in ``__init__`` along the MRO (first definition wins)."""
    out, seen = [], set()
    for cls in surface.mro(model)[0]:
        init = _own_init(surface, cls)
        if init is None:
            continue
        for sub in ast.walk(init):
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                                and t.attr not in seen:
                            seen.add(t.attr)
                            out.append((t.attr, sub.value, cls))
    return out


def _own_init(surface: StaticSurface, cls: ClassModel) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = surface.own_member(cls, "__init__")
    defined = definition(found) if found is not None else None
    return defined.function if defined is not None else None


def _class_of_value(surface: StaticSurface, value: ast.expr, owner: ClassModel, depth: int = 0,
                    instance: ClassModel | None = None) -> Found | None:
    """The class a constructor expression builds (direct, via a method, a class attribute, or the registry). A
    ``self.<method>(...)`` is the method of the object's own class (``instance``): MistralForCausalLM's
    ``_init_model`` overrides the one LlamaForCausalLM's ``__init__`` calls."""
    if not isinstance(value, ast.Call) or depth > _MAX_DEPTH:
        return None
    func = value.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        member = surface.member((instance or owner).found, func.attr)
        if not isinstance(member, Found):
            return None
        defined = definition(member)
        if defined is None or defined.owner is None:
            return None
        if member.kind == FoundKind.METHOD and defined.function is not None:
            for sub in ast.walk(defined.function):
                if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Call):
                    found = _class_of_value(surface, sub.value, defined.owner, depth + 1, instance)
                    if found is not None:
                        return found
            return None
        if member.kind == FoundKind.ATTRIBUTE:
            target = getattr(defined.node, "value", None)
            resolved = surface.resolve_expr(defined.module, target) if target is not None else None
            return resolved if isinstance(resolved, Found) and resolved.kind == FoundKind.CLASS else None
        return None
    name = ast.unparse(func).rsplit(".", 1)[-1]
    if name == "init_vllm_registered_model":
        for kw in value.keywords:
            if kw.arg == "architectures" and isinstance(kw.value, (ast.List, ast.Tuple)) and kw.value.elts:
                first = kw.value.elts[0]
                if isinstance(first, ast.Constant):
                    return top_class(surface, str(first.value))
        return None
    resolved = surface.resolve_expr(owner.module, func)
    return resolved if isinstance(resolved, Found) and resolved.kind == FoundKind.CLASS else None


def top_class(surface: StaticSurface, arch: str) -> Found | None:
    entry = registry(surface).get(arch)
    if entry is None:
        return None
    found = surface.lookup(f"vllm.model_executor.models.{entry[0]}.{entry[1]}")
    return found if isinstance(found, Found) and found.kind == FoundKind.CLASS else None


def _has_layers(surface: StaticSurface, model: ClassModel) -> bool:
    return any(name == "layers" for name, _, _ in _init_assignments(surface, model))


def find_stack(surface: StaticSurface, top: Found, depth: int = 0) -> tuple[list[str], Found] | None:
    """The attribute path from the top-level model to the module holding ``layers`` (the decoder stack)."""
    model = surface.class_model(top)
    if model is None or depth > _MAX_DEPTH:
        return None
    if _has_layers(surface, model) and depth > 0:
        return [], top
    for name, value, owner in _init_assignments(surface, model):
        if name in ("layers",):
            continue
        cls = _class_of_value(surface, value, owner, instance=model)
        if cls is None or cls.path == top.path:
            continue
        inner = find_stack(surface, cls, depth + 1)
        if inner is not None:
            return [name] + inner[0], inner[1]
    return None


def _layer_loop_call(surface: StaticSurface, base: Found) -> LayerCall | None:
    """How the base model's forward calls each layer: the first ``forward`` along its MRO with a loop over the
    layers, past those that only hand their arguments to ``super().forward(...)`` (MistralModel's)."""
    model = surface.class_model(base)
    for cls in surface.mro(model)[0] if model is not None else []:
        own = surface.own_member(cls, "forward")
        defined = definition(own) if own is not None else None
        if defined is None or defined.function is None:
            continue
        call = _loop_call(defined.function, defined.module)
        if call is not None:
            return call
        if not any(isinstance(n, ast.Call) and ast.unparse(n.func) == "super().forward"
                   for n in ast.walk(defined.function)):
            return None
    return None


def _loop_call(node: ast.AST, module: ModuleInfo) -> LayerCall | None:
    """The call of a layer in a loop over ``self.layers`` in ``node`` (a stack's forward)."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.For):
            continue
        names = set()
        if "self.layers" in ast.unparse(sub.iter):
            target = sub.target.elts[-1] if isinstance(sub.target, ast.Tuple) else sub.target
            if isinstance(target, ast.Name):
                names.add(target.id)
        # ``for i in range(...): layer = self.layers[i]``
        names |= {t.id for n in ast.walk(sub) if isinstance(n, ast.Assign) and "self.layers" in ast.unparse(n.value)
                  for t in n.targets if isinstance(t, ast.Name)}
        for stmt in ast.walk(sub):
            calls = [stmt.value] if isinstance(stmt, (ast.Assign, ast.Expr)) else []
            for call in calls:
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in names:
                    targets = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
                    assigned = tuple(ast.unparse(e) for e in targets.elts) if isinstance(targets, ast.Tuple) else \
                        (ast.unparse(targets),) if targets is not None else ()
                    named = [k for k in call.keywords if k.arg]
                    return LayerCall(tuple(ast.unparse(a) for a in call.args if not isinstance(a, ast.Starred)),
                                     tuple(k.arg for k in named if k.arg),
                                     tuple(ast.unparse(k.value) for k in call.keywords if k.arg is None),
                                     ast.unparse(call), loc(module, call), assigned,
                                     tuple(ast.unparse(k.value) for k in named),
                                     _handed_on(node, sub, assigned))
        for any_call in ast.walk(sub):
            if isinstance(any_call, ast.Call) and isinstance(any_call.func, ast.Name) and any_call.func.id in names:
                named = [k for k in any_call.keywords if k.arg]
                return LayerCall(tuple(ast.unparse(a) for a in any_call.args if not isinstance(a, ast.Starred)),
                                 tuple(k.arg for k in named if k.arg),
                                 tuple(ast.unparse(k.value) for k in any_call.keywords if k.arg is None),
                                 ast.unparse(any_call), loc(module, any_call), (),
                                 tuple(ast.unparse(k.value) for k in named))
    return None


def _handed_on(forward: ast.AST, loop: ast.For, targets: tuple[str, ...]) -> tuple[str, ...]:
    """The loop's carried names the stack's forward passes to its final norm after the loop (``self.norm(...)``),
    else those it returns; all of them when neither says."""
    after = [n for n in ast.walk(forward) if getattr(n, "lineno", 0) > (loop.end_lineno or loop.lineno)]
    normed = {ast.unparse(a) for node in after if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "norm" and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
              for a in node.args}
    passed = tuple(t for t in targets if t in normed)
    if passed:
        return passed
    returned = {n.id for node in after if isinstance(node, ast.Return) and node.value is not None
                for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return tuple(t for t in targets if t in returned) or targets


def _layer_class(surface: StaticSurface, base: Found) -> Found | None:
    """The decoder layer class: the callable inside ``make_layers(..., lambda prefix: Layer(...))``."""
    model = surface.class_model(base)
    if model is None:
        return None
    for cls in surface.mro(model)[0]:
        node = _own_init(surface, cls)
        if node is None:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Lambda) and isinstance(sub.body, ast.Call):
                callee = sub.body.func
                # The class the expression is read in: a parameter's value comes from the subclass that
                # passes it to super().__init__ (Qwen3Model passes decoder_layer_type=Qwen3DecoderLayer to
                # Qwen2Model), so it is resolved in that subclass's module.
                context = cls
                if isinstance(callee, ast.Name):
                    params = {a.arg: d for a, d in zip(
                        node.args.args[len(node.args.args) - len(node.args.defaults):], node.args.defaults)}
                    params.update({a.arg: d for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d})
                    if callee.id in params or callee.id in [a.arg for a in node.args.args + node.args.kwonlyargs]:
                        passed = _super_keyword(surface, model, callee.id)
                        chosen, context = passed if passed is not None else (params.get(callee.id), cls)
                        if chosen is None:
                            return None
                        callee = chosen
                found = _resolve_in(surface, context if not _is_self_attr(callee) else model, callee)
                if found is not None:
                    return found
    return None


def _is_self_attr(node: ast.expr) -> TypeGuard[ast.Attribute]:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _resolve_in(surface: StaticSurface, cls: ClassModel, node: ast.expr) -> Found | None:
    if _is_self_attr(node):
        member = surface.member(cls.found, node.attr)
        defined = definition(member) if isinstance(member, Found) and member.kind == FoundKind.ATTRIBUTE else None
        if defined is not None and defined.owner is not None:
            value = getattr(defined.node, "value", None)
            if value is not None:
                return _resolve_in(surface, defined.owner, value)
        return None
    found = surface.resolve_expr(cls.module, node)
    return found if isinstance(found, Found) and found.kind == FoundKind.CLASS else None


def _super_keyword(surface: StaticSurface, model: ClassModel, name: str) -> tuple[ast.expr, ClassModel] | None:
    """``super().__init__(..., name=value)`` in the most derived ``__init__`` that passes ``name``: the value
    and the class whose ``__init__`` passes it (the value's names are that class's module's)."""
    for cls in surface.mro(model)[0]:
        init = _own_init(surface, cls)
        if init is None:
            continue
        for sub in ast.walk(init):
            if isinstance(sub, ast.Call) and ast.unparse(sub.func) == "super().__init__":
                for kw in sub.keywords:
                    if kw.arg == name:
                        value = kw.value
                        # ``layer_type=layer_type``: the subclass's own parameter, whose default it passes on
                        # (MistralModel(LlamaModel) takes ``layer_type=MistralDecoderLayer``).
                        if isinstance(value, ast.Name):
                            args = init.args
                            defaults = dict(zip([a.arg for a in args.args][len(args.args) - len(args.defaults):],
                                                args.defaults))
                            defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d})
                            value = defaults.get(value.id, value)
                        return value, cls
    return None


def _top_calls_base(surface: StaticSurface, top: Found, attr: str) -> BaseCall | None:
    found = method(surface, top, "forward")
    if found is None:
        return None
    for sub in ast.walk(found.node):
        if isinstance(sub, ast.Call) and ast.unparse(sub.func) == f"self.{attr}":
            shape = call_shape(sub)
            return BaseCall(shape.positional, shape.keywords, shape.star_kwargs, ast.unparse(sub)[:200],
                            loc(found.module, sub))
    return None


def protocol_members(surface: StaticSurface, path: str) -> list[str]:
    """The members ``isinstance(x, <runtime_checkable Protocol>)`` checks: its own and its protocol bases'."""
    found = surface.lookup(path)
    model = surface.class_model(found) if isinstance(found, Found) else None
    if model is None:
        return []
    names: list[str] = []
    for cls in surface.mro(model)[0]:
        for stmt in cls.node.body:
            name = None
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = stmt.name
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                name = stmt.target.id
            elif isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
            if name and not name.startswith("_") and name not in names:
                names.append(name)
    return names


def _eagle3(surface: StaticSurface, top: Found) -> tuple[bool | None, tuple[str, ...]]:
    """Whether ``supports_eagle3(model)`` (an isinstance check of a runtime-checkable Protocol) accepts the
    class, and the protocol members it lacks."""
    members = protocol_members(surface, PROTOCOL)
    if not members:
        return None, ()
    missing = tuple(m for m in members if not isinstance(surface.member(top, m), Found))
    return not missing, missing


def _layer(surface: StaticSurface, base: Found) -> Layer | None:
    layer = _layer_class(surface, base)
    forward = method(surface, layer, "forward") if layer is not None else None
    if layer is None or forward is None:
        return None
    sig = surface.signature(forward.found)
    parameters = tuple(Parameter(p.name, ParamKind(p.kind), p.has_default) for p in sig.parameters) \
        if isinstance(sig, Signature) else ()
    return Layer(layer.path, str(sig), loc(forward.found), parameters)


def read(surface: StaticSurface, arch: str) -> ModelFacts:
    top = top_class(surface, arch)
    if top is None:
        return ModelFacts(arch)
    eagle3, eagle3_missing = _eagle3(surface, top)
    known = ModelFacts(arch, True, top.path, loc(top), eagle3, eagle3_missing)
    stack = find_stack(surface, top)
    if stack is None:
        return replace(known, error=f"cannot find the decoder stack under {top.path}")
    path, base = stack
    forward = method(surface, base, "forward")
    base_forward = None
    if forward is not None:
        sig = from_def(forward.node).drop_first()
        base_forward = BaseForward(tuple(p.name for p in sig.parameters),
                                   any(p.kind is ParamKind.VAR_KEYWORD for p in sig.parameters), loc(forward.found))
    return replace(
        known, path=tuple(path), base=base.path, base_at=loc(base),
        embedding={name: loc(m) for name in EMBEDDING_METHODS if isinstance(m := surface.member(base, name), Found)},
        base_members=surface.member_names(base), base_forward=base_forward,
        top_calls_base=_top_calls_base(surface, top, path[-1]) if len(path) == 1 else None,
        layer_call=_layer_loop_call(surface, base), layer=_layer(surface, base))


FACT = Fact("model", read)
