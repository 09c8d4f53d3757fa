"""Helpers for the fact readers: where a def of the build is, and small readings of its syntax."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.signature import Parameter, Signature
from compat.syntax import FunctionNode
from compat.vllm.definitions import definition
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind


@dataclass(frozen=True)
class Code:
    """A def of the build: the Found that names it, its node and the module it is in."""

    found: Found
    node: FunctionNode
    module: ModuleInfo


def loc(found_or_info: Found | ModuleInfo | None, node: ast.AST | None = None) -> str | None:
    """'file:line' for a node of a module (or the location of a Found)."""
    if isinstance(found_or_info, Found):
        return str(found_or_info.location) if found_or_info.location else None
    if found_or_info is None or node is None:
        return None
    return f"{found_or_info.relpath}:{getattr(node, 'lineno', 0)}"


def method(surface: StaticSurface, owner: str | Found, name: str) -> Code | None:
    """A method along the MRO of a class (given by path or Found), or None."""
    found = surface.lookup(owner) if isinstance(owner, str) else owner
    if not isinstance(found, Found) or found.kind != FoundKind.CLASS:
        return None
    member = surface.member(found, name)
    defined = definition(member) if isinstance(member, Found) else None
    if not isinstance(member, Found) or defined is None or defined.owner is None or defined.function is None:
        return None
    return Code(member, defined.function, defined.module)


def function(surface: StaticSurface, path: str) -> Code | None:
    """A module-level function, or None."""
    found = surface.lookup(path)
    defined = definition(found) if isinstance(found, Found) else None
    if not isinstance(found, Found) or defined is None or defined.owner is not None or defined.function is None:
        return None
    return Code(found, defined.function, defined.module)


def find_class(surface: StaticSurface, name: str, prefer: str = "") -> Found | None:
    """A class by its bare name anywhere in the build (the candidate under ``prefer`` first)."""
    candidates = sorted(surface.definitions(name), key=lambda p: (not p.startswith(prefer), len(p)))
    for path in candidates:
        found = surface.lookup(path)
        if isinstance(found, Found) and found.kind == FoundKind.CLASS:
            return found
    return None


def string_of(node: ast.AST) -> str | None:
    """The text of a string literal, an implicit concatenation, or an f-string (placeholders kept)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values if isinstance(v, (ast.Constant, ast.FormattedValue)))
    return None




@dataclass(frozen=True)
class Declared:
    """A constructor parameter's declared default, as source text, and where the class declares it."""

    default: str | None
    """None: the parameter has no default (or the class has no such parameter)."""
    at: str | None


_FACTORIES = ("default_factory", "factory")
_MAX_REFERENCES = 4
_EMPTY = {"list": "[]", "dict": "{}", "tuple": "()", "set": "set()"}
"""Builtin factories, rendered as the literal they make (so ``not self.cuda_graph_sizes`` can be judged)."""


def _parameter(surface: StaticSurface, owner: Found, name: str) -> Parameter | None:
    sig = surface.signature(owner)
    return sig.get(name) if isinstance(sig, Signature) else None


def _names_field(surface: StaticSurface, info: ModuleInfo, value: ast.expr) -> tuple[Found, str] | None:
    """The (class, field) a default names: ``CacheConfig.enable_prefix_caching``, ``get_field(ModelConfig,
    "hf_overrides")``; None for anything else (``SchedulerPolicy.FCFS`` names no field of a constructor)."""
    name: str | None
    if isinstance(value, ast.Attribute):
        owner, name = value.value, value.attr
    elif isinstance(value, ast.Call) and len(value.args) == 2 and \
            ast.unparse(value.func).rsplit(".", 1)[-1] == "get_field":
        owner, name = value.args[0], string_of(value.args[1])
    else:
        return None
    found = surface.resolve_expr(info, owner)
    if name is None or not isinstance(found, Found) or found.kind != FoundKind.CLASS or \
            _parameter(surface, found, name) is None:
        return None
    return found, name


def _made_by(surface: StaticSurface, info: ModuleInfo, factory: ast.expr) -> str:
    """What a factory makes, as a call: ``X()``; a class's own method that only builds that class with its
    defaults (``SchedulerConfig.default_factory``, which fills the ``InitVar``s ``SchedulerConfig()`` required
    from vLLM 0.12.0) is ``SchedulerConfig()`` too, since that is what it makes."""
    text = f"{ast.unparse(factory)}()"
    if not isinstance(factory, ast.Attribute):
        return text
    owner = surface.resolve_expr(info, factory.value)
    if not isinstance(owner, Found) or owner.kind != FoundKind.CLASS:
        return text
    code = method(surface, owner, factory.attr)
    if code is None:
        return text
    params = {a.arg for a in code.node.args.args + code.node.args.kwonlyargs}
    if code.node.args.kwarg is not None:
        params.add(code.node.args.kwarg.arg)
    returns = [n.value for n in ast.walk(code.node) if isinstance(n, ast.Return) and n.value is not None]
    built = [r for r in returns if isinstance(r, ast.Call)
             and isinstance(made := surface.resolve_expr(code.module, r.func), Found) and made.path == owner.path]
    # Every return builds the class, from nothing but the method's own (caller-given, here absent) arguments.
    if built and len(built) == len(returns) and all(
            {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)} <= params
            for call in built for arg in [*call.args, *(k.value for k in call.keywords)]):
        return f"{ast.unparse(factory.value)}()"
    return text


def declared(surface: StaticSurface, owner: Found, name: str, depth: int = 0) -> Declared:
    """What a caller that leaves ``name`` out of ``owner(...)`` is given, as the class body declares it.

    The signature already has literal defaults; a ``default_factory`` shows there as ``<factory>``, so the
    field's declaration is read for what the factory makes (``field(default_factory=ObservabilityConfig)`` is
    ``ObservabilityConfig()``, ``Field(default_factory=lambda: ["original/**/*"])`` is ``['original/**/*']``).
    A default that names another config's field (``EngineArgs.enable_prefix_caching = CacheConfig.
    enable_prefix_caching``, ``get_field(ModelConfig, "hf_overrides")`` in vLLM 0.11.0) is that field's own
    declared default, so a change there shows here too.
    """
    param = _parameter(surface, owner, name)
    default = param.default if param is not None and param.has_default else None
    member = surface.member(owner, name)
    defined = definition(member) if isinstance(member, Found) else None
    stmt = defined.node if defined is not None and defined.owner is not None else None
    where = loc(defined.module, stmt) if defined is not None and stmt is not None else loc(owner)
    value = stmt.value if isinstance(stmt, ast.AnnAssign) else None
    if defined is None or value is None or depth > _MAX_REFERENCES:
        return Declared(default, where)
    factory = next((k.value for k in value.keywords if k.arg in _FACTORIES), None) \
        if isinstance(value, ast.Call) else None
    if factory is not None:
        made = ast.unparse(factory.body) if isinstance(factory, ast.Lambda) else \
            _EMPTY.get(ast.unparse(factory), _made_by(surface, defined.module, factory))
        return Declared(made, where)
    named = _names_field(surface, defined.module, value)
    if named is not None and named[0].path != owner.path:
        return Declared(declared(surface, named[0], named[1], depth + 1).default, where)
    return Declared(default, where)
