"""What the build's code reaches from a set of defs: the calls followed across the build, as far as they can be
read without running it.

From each def: ``self.m()`` (a method along the MRO of the def's class), ``f()`` and ``module.f()`` (a function
of the build, or a class's constructor), ``<x>.<config>.m()`` and ``<config>.m()`` where the receiver's name is
one vLLM holds a config under (``cache_config.get_resolved_kv_cache_layout()``: a method of ``CacheConfig``),
``self.<attr>.m()`` where the class says what ``attr`` holds, and ``collective_rpc("name")`` (a method the
workers run: the worker class's, which ``workers`` names). A call whose receiver is not known is not followed:
what is reached is a lower bound of what runs. Each def reached keeps the def it was reached from, so that a
finding can show the chain.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import Code, loc
from compat.syntax import FunctionNode
from compat.vllm.definitions import definition
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

RPC_NAMES = ("collective_rpc", "_run_workers", "run_workers")
_SKIP = ("vllm.logger", "vllm.envs", "vllm.tracing", "vllm.usage", "vllm.logging_utils")
_MAX_DEFS = 4000
_MAX_DEPTH = 8


@dataclass(frozen=True)
class Reached:
    path: str
    """The def's dotted path."""
    via: str
    """The def it was reached from ("" for an entry)."""
    at: str
    """Where the call is (``file:line``), or the entry's own location."""


@dataclass(frozen=True)
class Write:
    """``<...>.<config>.<field> = value`` (or ``self.<field> = value`` in a config's own method) in a def reached."""

    config: str
    """The config class's dotted path."""
    field: str
    at: str
    function: str
    value: str = ""
    """What it assigns, as source text ("" for ``+=`` and the like)."""


@dataclass(frozen=True)
class FieldRead:
    """``<...>.<config>.<field>`` (or ``self.<field>`` in a config's own method) read in a def reached."""

    config: str
    field: str
    at: str
    function: str


@dataclass(frozen=True)
class Reach:
    defs: tuple[Reached, ...] = ()
    writes: tuple[Write, ...] = ()
    """The config fields the defs reached assign."""
    reads: tuple[FieldRead, ...] = ()
    """The config fields they read (the first read of each field in each def)."""

    def paths(self) -> frozenset[str]:
        return frozenset(r.path for r in self.defs)

    def chain(self, path: str, limit: int = 4) -> str:
        """``A -> B -> C``: how ``path`` was reached from an entry (the last ``limit`` links)."""
        by = {r.path: r for r in self.defs}
        links: list[str] = []
        while path in by and len(links) < 16:
            links.append(".".join(path.split(".")[-2:]))
            path = by[path].via
        links.reverse()
        return " -> ".join((["..."] if len(links) > limit else []) + links[-limit:])


def config_classes(surface: StaticSurface) -> dict[str, str]:
    """The name vLLM holds each config under -> the config class: ``VllmConfig``'s fields (``cache_config`` ->
    ``vllm.config.cache.CacheConfig``) and ``vllm_config`` itself."""
    top = surface.lookup("vllm.config.VllmConfig")
    if not isinstance(top, Found) or top.kind != FoundKind.CLASS:
        return {}
    found: dict[str, str] = {"vllm_config": top.path}
    sig = surface.signature(top)
    defined = definition(top)
    for param in getattr(sig, "parameters", ()):
        for name in _annotation_names(param.annotation or ""):
            if defined is None:
                break
            cls = surface.resolve_expr(defined.module, ast.parse(name, mode="eval").body, types=True)
            if isinstance(cls, Found) and cls.kind == FoundKind.CLASS and cls.path.startswith("vllm.") and \
                    not _is_enum(surface, cls):
                found.setdefault(param.name, cls.path)
                break
    return found


def _is_enum(surface: StaticSurface, cls: Found) -> bool:
    model = surface.class_model(cls)
    return model is None or any(("Enum" in ast.unparse(b) or "Flag" in ast.unparse(b)) for b in model.node.bases)


def _annotation_names(annotation: str) -> list[str]:
    words = annotation.replace('"', " ").replace("'", " ")
    for sep in "|[],":
        words = words.replace(sep, " ")
    return [w for w in words.split() if w and w[0].isupper() and w.replace(".", "").replace("_", "").isalnum()]


def _code(found: Found) -> Code | None:
    defined = definition(found)
    if defined is None or defined.function is None:
        return None
    return Code(found, defined.function, defined.module)


def _constructors(surface: StaticSurface, cls: Found) -> list[Found]:
    out = []
    for name in ("__init__", "__post_init__"):
        member = surface.member(cls, name)
        if isinstance(member, Found) and member.kind in ("method", "function") and member.path.startswith("vllm."):
            out.append(member)
    return out


def _owner(surface: StaticSurface, code: Code) -> Found | None:
    defined = definition(code.found)
    owner = defined.owner if defined is not None else None
    return owner.found if owner is not None else None


def _targets(surface: StaticSurface, code: Code, call: ast.Call, configs: dict[str, str],
             workers: tuple[str, ...], instance: Found | None = None) -> list[Found]:
    """What a call reaches; ``instance``: the class of ``self`` there (a subclass's override of a method the base
    calls on ``self`` is the one that runs: ``Executor.__init__`` -> ``MultiprocExecutor._init_executor``)."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in RPC_NAMES and call.args and \
            isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        out = []
        for worker in workers:
            cls = surface.lookup(worker)
            member = surface.member(cls, call.args[0].value) if isinstance(cls, Found) else None
            if isinstance(member, Found):
                out.append(member)
        return out
    if isinstance(func, ast.Name):
        found = surface.resolve_expr(code.module, func)
        if not isinstance(found, Found):
            return []
        if found.kind == FoundKind.CLASS:
            return _constructors(surface, found)
        return [found]
    if not isinstance(func, ast.Attribute):
        return []
    receiver = func.value
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
        return _super_member(surface, code, func.attr, instance)
    params = code.node.args.posonlyargs + code.node.args.args
    self_name = params[0].arg if params else None
    owner = instance or _owner(surface, code)
    if isinstance(receiver, ast.Name) and receiver.id == self_name and owner is not None:
        member = surface.member(owner, func.attr)
        return [member] if isinstance(member, Found) else []
    last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
    if last in configs:
        cls = surface.lookup(configs[last])
        member = surface.member(cls, func.attr) if isinstance(cls, Found) else None
        return [member] if isinstance(member, Found) else []
    if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) and \
            receiver.value.id == self_name and owner is not None:
        held = surface.attribute_type(owner, receiver.attr)
        member = surface.member(held, func.attr) if isinstance(held, Found) and held.kind == FoundKind.CLASS else None
        return [member] if isinstance(member, Found) else []
    found = surface.resolve_expr(code.module, func)
    if isinstance(found, Found) and found.kind == FoundKind.CLASS:
        return _constructors(surface, found)
    return [found] if isinstance(found, Found) else []


def _super_member(surface: StaticSurface, code: Code, name: str, instance: Found | None) -> list[Found]:
    """``super().name``: the first definition after the def's own class in the MRO of ``self``'s class."""
    owner = _owner(surface, code)
    start = instance or owner
    model = surface.class_model(start) if start is not None else None
    if owner is None or model is None:
        return []
    order = surface.mro(model)[0]
    after = [c for i, c in enumerate(order) if any(o.found.path == owner.path for o in order[:i])]
    for cls in after:
        found = surface.own_member(cls, name)
        if found is not None:
            return [found]
    return []


def calls_in(node: ast.AST) -> list[ast.Call]:
    return sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset))


def read(surface: StaticSurface, entries: str, workers: str = "") -> Reach:
    """What ``entries`` (dotted paths, comma-separated) reach; ``workers``: the worker classes RPCs run on."""
    configs = config_classes(surface)
    worker_classes = tuple(filter(None, workers.split(",")))
    reached: dict[str, Reached] = {}
    queue: list[tuple[Found, int, Found | None]] = []
    for path in filter(None, entries.split(",")):
        found = surface.lookup(path)
        if isinstance(found, Found):
            code = _code(found) if found.kind != FoundKind.CLASS else None
            instance = found if found.kind == FoundKind.CLASS else (_owner(surface, code) if code else None)
            for target in (_constructors(surface, found) if found.kind == FoundKind.CLASS else [found]):
                if target.path not in reached:
                    reached[target.path] = Reached(target.path, "", loc(target) or "")
                    queue.append((target, 0, instance))
    writes: list[Write] = []
    reads: list[FieldRead] = []
    while queue and len(reached) < _MAX_DEFS:
        found, depth, instance = queue.pop(0)
        code = _code(found)
        if code is None:
            continue
        writes += _writes(surface, code, configs)
        reads += _reads(surface, code, configs)
        if depth >= _MAX_DEPTH:
            continue
        params = code.node.args.posonlyargs + code.node.args.args
        self_name = params[0].arg if params else None
        for call in calls_in(code.node):
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
            on_self = ((isinstance(receiver, ast.Name) and receiver.id == self_name) or (
                isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super")
            ) and isinstance(call.func, ast.Attribute) and call.func.attr not in RPC_NAMES
            for target in _targets(surface, code, call, configs, worker_classes, instance):
                if target.path in reached or not target.path.startswith("vllm.") or target.path.startswith(_SKIP):
                    continue
                if target.kind not in ("method", "function", "classmethod", "staticmethod", "property"):
                    continue
                reached[target.path] = Reached(target.path, found.path, loc(code.module, call) or "")
                queue.append((target, depth + 1, instance if on_self else None))
    return Reach(tuple(reached.values()), tuple(writes), tuple(reads))


def _reads(surface: StaticSurface, code: Code, configs: dict[str, str]) -> list[FieldRead]:
    params = code.node.args.posonlyargs + code.node.args.args
    self_name = params[0].arg if params else None
    owner = _owner(surface, code)
    own = owner.path if owner is not None and owner.path in configs.values() else None
    seen: set[tuple[str, str]] = set()
    out = []
    for node in ast.walk(code.node):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        receiver = node.value
        last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
        config = configs.get(last) or (own if isinstance(receiver, ast.Name) and receiver.id == self_name else None)
        if config is not None and (config, node.attr) not in seen:
            seen.add((config, node.attr))
            out.append(FieldRead(config, node.attr, f"{code.module.relpath}:{node.lineno}", code.found.path))
    return out


def _writes(surface: StaticSurface, code: Code, configs: dict[str, str]) -> list[Write]:
    params = code.node.args.posonlyargs + code.node.args.args
    self_name = params[0].arg if params else None
    owner = _owner(surface, code)
    own = owner.path if owner is not None and owner.path in configs.values() else None
    out = []
    for node in ast.walk(code.node):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            receiver = target.value
            last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
            config = configs.get(last) or (own if isinstance(receiver, ast.Name) and receiver.id == self_name else None)
            if config is not None:
                value = ast.unparse(node.value) if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value else ""
                out.append(Write(config, target.attr, loc(code.module, node) or "", code.found.path, value[:120]))
    return out


def function_node(surface: StaticSurface, path: str) -> tuple[FunctionNode, Code] | None:
    found = surface.lookup(path)
    code = _code(found) if isinstance(found, Found) else None
    return (code.node, code) if code is not None else None


FACT = Fact("reach", read)
