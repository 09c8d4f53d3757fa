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
import functools
import weakref
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import Code, loc
from compat.syntax import FunctionNode
from compat.vllm.definitions import definition
from compat.vllm.modules import BindingKind
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


CONFIG = "config"
"""State kind: a field of one of vLLM's configs (``config`` is the config class)."""
GLOBAL = "global"
"""State kind: a module-level name (``config`` is the module), rebound under ``global`` or changed by item."""
INSTANCE = "instance"
"""State kind: an attribute of ``self`` (``config`` is the class of ``self``); outside a constructor the state of
a long-lived object (the executor, a worker, what they hold), in one (``constructing``) an object being made."""
CONSTRUCTORS = ("__init__", "__post_init__", "__new__")


@dataclass(frozen=True)
class Write:
    """``<...>.<config>.<field> = value`` (or ``self.<field> = value`` in a config's own method) in a def reached;
    also a module global (``kind`` GLOBAL) or an attribute of ``self`` (``kind`` INSTANCE)."""

    config: str
    """The config class's dotted path (the module's, the class's for the other kinds)."""
    field: str
    at: str
    function: str
    value: str = ""
    """What it assigns, as source text ("" for ``+=`` and the like)."""
    kind: str = CONFIG

    @property
    def constructing(self) -> bool:
        """An attribute of an object its constructor is making (not state the object had before)."""
        return self.kind == INSTANCE and self.function.rsplit(".", 1)[-1] in CONSTRUCTORS


@dataclass(frozen=True)
class FieldRead:
    """``<...>.<config>.<field>`` (or ``self.<field>`` in a config's own method) read in a def reached; also a
    module global (``kind`` GLOBAL) or an attribute of ``self`` (``kind`` INSTANCE)."""

    config: str
    field: str
    at: str
    function: str
    kind: str = CONFIG
    tested: bool = False
    """The def tests it (``if self.x is None:``, ``if not x:``) before it uses it: it runs with the state unset."""


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
        imported = _imported_here(code, func.id)
        if imported is not None:  # ``from m import f`` inside the def (a lazy import) binds the name there
            found = surface.lookup(imported)
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


def _imported_here(code: Code, name: str) -> str | None:
    """The dotted path ``from m import x [as name]`` inside the def binds ``name`` to (absolute imports)."""
    return _local_imports(code.node).get(name)


@functools.lru_cache(maxsize=4096)
def _local_imports(node: FunctionNode) -> dict[str, str]:
    return {alias.asname or alias.name: f"{sub.module}.{alias.name}" for sub in ast.walk(node)
            if isinstance(sub, ast.ImportFrom) and sub.module and not sub.level for alias in sub.names}


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
        wrote, read_here = _state(surface, code, configs, instance)
        writes += wrote
        reads += read_here
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


_STATE: weakref.WeakKeyDictionary[StaticSurface, dict[tuple[str, str], tuple[list[Write], list[FieldRead]]]] = \
    weakref.WeakKeyDictionary()


def _state(surface: StaticSurface, code: Code, configs: dict[str, str],
           instance: Found | None) -> tuple[list[Write], list[FieldRead]]:
    """What one def writes and reads, kept per build for the def and the class of ``self`` there: every reach
    (a step's, a platform's path) walks many of the same defs."""
    memo = _STATE.setdefault(surface, {})
    key = (code.found.path, instance.path if instance is not None else "")
    if key not in memo:
        reads = _forwarded(surface, code, _reads(surface, code, configs, instance), configs, (), instance)
        memo[key] = (_writes(surface, code, configs, instance), reads)
    return memo[key]


def _forwarded(surface: StaticSurface, code: Code, reads: list[FieldRead], configs: dict[str, str],
               workers: tuple[str, ...], instance: Found | None) -> list[FieldRead]:
    """Reads of an object's attribute passed straight on as an argument (``f(x=self.x)``) count as tested where
    every def the call reaches tests the parameter it lands in (``if x is not None:``) before using it."""
    untested = {(r.field, r.at) for r in reads if r.kind == INSTANCE and not r.tested}
    if not untested:
        return reads
    params = code.node.args.posonlyargs + code.node.args.args
    self_name = params[0].arg if params else None
    passed: set[tuple[str, str]] = set()
    for call in calls_in(code.node):
        given = [(i, None, a) for i, a in enumerate(call.args)] + [(None, k.arg, k.value) for k in call.keywords]
        hits = [(i, k, a.attr) for i, k, a in given if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name)
                and a.value.id == self_name and (a.attr, f"{code.module.relpath}:{a.lineno}") in untested]
        if not hits:
            continue
        if isinstance(call.func, ast.Attribute) and call.func.attr in RPC_NAMES:  # the arguments go to the RPC
            owner = instance or _owner(surface, code)       # method itself, not to what the workers run
            rpc = surface.member(owner, call.func.attr) if owner is not None else None
            targets = [rpc] if isinstance(rpc, Found) else []
        else:
            targets = _targets(surface, code, call, configs, workers, instance)
        codes = [c for t in targets if (c := _code(t)) is not None]
        for index, keyword, attr in hits:
            if codes and all(_tests_param(c.node, index, keyword) for c in codes):
                passed.add((attr, f"{code.module.relpath}:{call.lineno}"))
    if not passed:
        return reads
    out = []
    for r in reads:
        tested = r.kind == INSTANCE and any(r.field == attr and r.at.rsplit(":", 1)[0] == at.rsplit(":", 1)[0]
                                            for attr, at in passed)
        out.append(FieldRead(r.config, r.field, r.at, r.function, r.kind, True) if tested and not r.tested else r)
    return out


def _tests_param(node: FunctionNode, index: int | None, keyword: str | None) -> bool:
    """Whether the def tests the parameter an argument lands in (by position, ``self`` counted, or keyword)."""
    args = node.args
    positional = args.posonlyargs + args.args
    name = keyword if keyword is not None else (
        positional[index + 1].arg if index is not None and index + 1 < len(positional) else None)
    if name is None or name not in {a.arg for a in positional + args.kwonlyargs}:
        return False
    tests = [n.test for n in ast.walk(node) if isinstance(n, (ast.If, ast.IfExp, ast.While))]
    if any(isinstance(t, ast.Name) and t.id == name for test in tests for t in ast.walk(test)):
        return True
    # ``[a for a in (name, other) if a]``: the elements of a literal are filtered by a test before use
    for gen in (n for n in ast.walk(node) if isinstance(n, ast.comprehension)):
        if isinstance(gen.iter, (ast.Tuple, ast.List)) and isinstance(gen.target, ast.Name) and \
                any(isinstance(e, ast.Name) and e.id == name for e in gen.iter.elts) and \
                any(isinstance(t, ast.Name) and t.id == gen.target.id for test in gen.ifs for t in ast.walk(test)):
            return True
    return False


def _locals(node: FunctionNode) -> set[str]:
    """The names a def binds itself (parameters, assignments, loop targets, imports), less its ``global`` ones."""
    args = node.args
    out = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs} | \
        {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            out.add(sub.id)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in sub.names}
    return out - _declared_global(node)


def _declared_global(node: FunctionNode) -> set[str]:
    return {name for sub in ast.walk(node) if isinstance(sub, ast.Global) for name in sub.names}


def _module_globals(code: Code) -> set[str]:
    return {name for name, b in code.module.bindings.items() if b.kind == BindingKind.ASSIGN}


def _state_of_self(surface: StaticSurface, code: Code, configs: dict[str, str],
                   instance: Found | None) -> tuple[str | None, str | None, str | None]:
    """(self's name, the config class a config's own method is of, the class whose state ``self.x`` is outside a
    config)."""
    params = code.node.args.posonlyargs + code.node.args.args
    self_name = params[0].arg if params else None
    owner = _owner(surface, code)
    own = owner.path if owner is not None and owner.path in configs.values() else None
    held = instance or owner
    state = held.path if held is not None and own is None and held.path.startswith("vllm.") else None
    return self_name, own, state


def _reads(surface: StaticSurface, code: Code, configs: dict[str, str],
           instance: Found | None = None) -> list[FieldRead]:
    self_name, own, state = _state_of_self(surface, code, configs, instance)
    shared = _module_globals(code) - _locals(code.node)
    seen: set[tuple[str, str, str]] = set()
    out = []

    tests = [n.test for n in ast.walk(code.node) if isinstance(n, (ast.If, ast.IfExp, ast.While))]
    tested = {ast.unparse(t) for test in tests for t in ast.walk(test) if isinstance(t, (ast.Name, ast.Attribute))}

    def add(config: str, name: str, node: ast.expr, kind: str) -> None:
        if (config, name, kind) not in seen:
            seen.add((config, name, kind))
            out.append(FieldRead(config, name, f"{code.module.relpath}:{getattr(node, 'lineno', 0)}", code.found.path,
                                 kind, kind != CONFIG and ast.unparse(node) in tested))

    called = {id(n.func) for n in ast.walk(code.node) if isinstance(n, ast.Call)}
    fresh = _assigned_first(code.node, self_name) if state is not None else set()
    for node in ast.walk(code.node):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in shared:
            add(code.module.name, node.id, node, GLOBAL)
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        receiver = node.value
        last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
        on_self = isinstance(receiver, ast.Name) and receiver.id == self_name
        config = configs.get(last) or (own if on_self else None)
        if config is not None:
            add(config, node.attr, node, CONFIG)
        elif on_self and state is not None and id(node) not in called and id(node) not in fresh:
            add(state, node.attr, node, INSTANCE)  # a method called, or what the def itself just set, is not state
    return out


def _assigned_first(node: FunctionNode, self_name: str | None) -> set[int]:
    """The ``self.x`` loads (by id) that follow, in the same block or one it encloses, a statement of the def
    assigning ``self.x`` itself: they read what the def set, not state the object had before the call."""
    out: set[int] = set()
    if self_name is None:
        return out

    def assigned(stmt: ast.stmt) -> set[str]:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, ast.AnnAssign) and stmt.value is not None else []
        return {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                and t.value.id == self_name}

    def walk(body: list[ast.stmt], set_before: frozenset[str]) -> None:
        done = set(set_before)
        for stmt in body:
            for sub in _shallow(stmt):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load) and sub.attr in done and \
                        isinstance(sub.value, ast.Name) and sub.value.id == self_name:
                    out.add(id(sub))
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt) and \
                        not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    walk(inner, frozenset(done))
            for handler in getattr(stmt, "handlers", []):
                walk(handler.body, frozenset(done))
            done |= assigned(stmt)

    walk(node.body, frozenset())
    return out


def _shallow(stmt: ast.stmt) -> list[ast.AST]:
    """The nodes of ``stmt`` itself, not of the statements it holds (its blocks are walked on their own)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        out.append(node)
        for name, value in ast.iter_fields(node):
            if node is stmt and name in ("body", "orelse", "finalbody", "handlers"):
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST) and not isinstance(child, ast.stmt):
                    stack.append(child)
    return out


def _writes(surface: StaticSurface, code: Code, configs: dict[str, str],
            instance: Found | None = None) -> list[Write]:
    self_name, own, state = _state_of_self(surface, code, configs, instance)
    restored = _restored(code.node)
    rebound = _declared_global(code.node) & _module_globals(code) - restored
    changed = _module_globals(code) - _locals(code.node) - restored
    out = []
    for node in ast.walk(code.node):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        value = ast.unparse(node.value)[:120] if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value else ""
        at = loc(code.module, node) or ""
        for target in targets:
            if isinstance(target, ast.Name) and target.id in rebound:
                out.append(Write(code.module.name, target.id, at, code.found.path, value, GLOBAL))
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and \
                    target.value.id in changed:
                out.append(Write(code.module.name, target.value.id, at, code.found.path, value, GLOBAL))
            if not isinstance(target, ast.Attribute):
                continue
            receiver = target.value
            last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
            on_self = isinstance(receiver, ast.Name) and receiver.id == self_name
            config = configs.get(last) or (own if on_self else None)
            if ast.unparse(target) in restored:
                continue
            if config is not None:
                out.append(Write(config, target.attr, at, code.found.path, value))
            elif on_self and state is not None and f"self.{target.attr}" not in restored and \
                    not _resets(surface, code, state, target.attr, value):
                out.append(Write(state, target.attr, at, code.found.path, value, INSTANCE))
    return out


def _resets(surface: StaticSurface, code: Code, state: str, attr: str, value: str) -> bool:
    """``self.x = v`` outside a constructor, where the constructor of the def's own class assigns ``self.x = v``
    with the same text: it puts back the state the object started with (``remove_all_adapters``), no state the
    object lacks until the step runs."""
    if not value or code.node.name in CONSTRUCTORS:
        return False
    owner = _owner(surface, code)
    return owner is not None and _initial(surface, owner.path).get(attr) == value


_INITIAL: weakref.WeakKeyDictionary[StaticSurface, dict[str, dict[str, str]]] = weakref.WeakKeyDictionary()


def _initial(surface: StaticSurface, cls: str) -> dict[str, str]:
    """What the class's own ``__init__`` assigns to ``self.x``, as source text, where it assigns it once."""
    memo = _INITIAL.setdefault(surface, {})
    if cls not in memo:
        memo[cls] = _initial_of(surface, cls)
    return memo[cls]


def _initial_of(surface: StaticSurface, cls: str) -> dict[str, str]:
    found = surface.lookup(f"{cls}.__init__")
    code = _code(found) if isinstance(found, Found) else None
    if code is None:
        return {}
    params = code.node.args.posonlyargs + code.node.args.args
    self_name = params[0].arg if params else None
    seen: dict[str, list[str]] = {}
    for node in ast.walk(code.node):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
                        target.value.id == self_name:
                    seen.setdefault(target.attr, []).append(ast.unparse(node.value)[:120])
    return {attr: values[0] for attr, values in seen.items() if len(values) == 1}


def _restored(node: FunctionNode) -> set[str]:
    """The targets (``x``, ``self.x``, ``self.cache_config.x``, as source text) the def sets for the time of a call
    and puts back, which it does not change for what comes after: assigned in a ``finally:``
    (``set_current_vllm_config``), or assigned back from a local that saved them first
    (``saved = self.cache_config.x`` ... ``self.cache_config.x = saved``)."""
    out = set()
    saved: dict[str, str] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Try):
            for stmt in sub.finalbody:
                for assign in ast.walk(stmt):
                    for target in assign.targets if isinstance(assign, ast.Assign) else []:
                        if isinstance(target, (ast.Name, ast.Attribute)):
                            out.add(ast.unparse(target))
        if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name) and \
                isinstance(sub.value, (ast.Name, ast.Attribute)):
            saved.setdefault(sub.targets[0].id, ast.unparse(sub.value))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Name) and sub.value.id in saved:
            out |= {ast.unparse(t) for t in sub.targets if ast.unparse(t) == saved[sub.value.id]}
    return out


def related(surface: StaticSurface, a: str, b: str) -> bool:
    """Whether the classes ``a`` and ``b`` are one, or one is a base of the other (the same object's state)."""
    if a == b:
        return True
    for one, other in ((a, b), (b, a)):
        found = surface.lookup(one)
        model = surface.class_model(found) if isinstance(found, Found) and found.kind == FoundKind.CLASS else None
        if model is not None and any(c.found.path == other for c in surface.mro(model)[0]):
            return True
    return False


def function_node(surface: StaticSurface, path: str) -> tuple[FunctionNode, Code] | None:
    found = surface.lookup(path)
    code = _code(found) if isinstance(found, Found) else None
    return (code.node, code) if code is not None else None


FACT = Fact("reach", read)
