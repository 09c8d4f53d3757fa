"""What a config field is once vLLM has built the configs, on one platform: the build's own construction run on
values, as far as they are known.

A field's declared default is not always what the engine sees: vLLM 0.34.0 declares ``CacheConfig.
enable_extensible_kv_cache`` ``None`` and ``VllmConfig.__post_init__`` (through ``_resolve_extensible_kv_cache``)
sets it to True where ``current_platform.is_cuda_alike()`` and nothing else rules it out, False elsewhere. This
fact builds the configs the consumer builds (the literals it passes, the declared defaults of the rest), then
runs ``VllmConfig``'s construction (``__post_init__`` and what it calls on its configs) statement by statement
on values: constants, enum and flag members (read from their class), the configs as objects whose fields it
tracks through local aliases (``cache_config = self.cache_config``), and ``current_platform`` as the platform's
class (``CudaPlatformBase`` for CUDA: the class whose body sets ``_enum = PlatformEnum.CUDA``), whose methods
(``is_cuda_alike``: ``self._enum in (PlatformEnum.CUDA, PlatformEnum.ROCM)``) run the same way.

A value it cannot read (a call outside the configs and the platform, the host's state) is ``UNKNOWN``; a test on
an unknown value runs both branches and a field the two set differently is ``UNKNOWN`` after them; a path that
raises is dropped, an early ``return`` ends its method. So a field is known only where the build's code decides
it from what is known; the rest stays unknown, never guessed.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from compat.facts import Fact, reach
from compat.facts.reach import config_classes
from compat.facts.reading import Code, declared, loc
from compat.vllm.definitions import ClassModel, definition
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind, Missing

VLLM_CONFIG = "vllm.config.VllmConfig"
PLATFORM_ENUM = "PlatformEnum"
PLATFORMS = ("CUDA", "CPU")
"""The platforms every default is evaluated on: the GPU the consumer trains on, the CPU its tests run on."""
_MAX_DEPTH = 6
_MAX_STEPS = 60000
_MAX_UNROLL = 64
_BUILTINS = ("callable", "is_dataclass", "hasattr", "getattr", "isinstance", "len", "print")
_NOT_FOLLOWED = ("vllm.logger", "vllm.envs", "vllm.tracing", "vllm.usage")


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


def _lambda_def() -> ast.FunctionDef:
    """The def a lambda's body is read as part of (a lambda has no def of its own)."""
    [node] = ast.parse("def _lambda(): pass").body
    if not isinstance(node, ast.FunctionDef):
        raise TypeError(f"a def parses as {type(node).__name__}")
    return node


_LAMBDA_DEF = _lambda_def()


class _Dropped(Exception):
    """The path raised: it is not one the construction completes on."""


class _Budget(Exception):
    """The run took more steps than it may."""


@dataclass(frozen=True)
class Member:
    """A member of an enum class of the build: ``PlatformEnum.CUDA``; ``value`` for flags (``KVCacheAccess``)."""

    cls: str
    name: str
    value: object = None
    flag: bool = False

    def __repr__(self) -> str:
        return f"{self.cls.rsplit('.', 1)[-1]}.{self.name}"


@dataclass(frozen=True)
class Ref:
    """A name of the build that is not a value here: a class, a function, a module."""

    found: Found


@dataclass(eq=False)
class Closure:
    """A def or lambda made while running (``def apply_recursive(...)`` inside a method), with its frame."""

    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    code: Code
    env: dict[str, object]


@dataclass(eq=False)
class Obj:
    """A config (or the platform): its class and the fields set so far, each with where it was set."""

    cls: Found
    fields: dict[str, tuple[object, str]] = field(default_factory=dict)
    platform: bool = False


@dataclass(frozen=True)
class ResolvedField:
    config: str
    """The config class's name (``CacheConfig``)."""
    name: str
    value: str
    """``repr`` of the value, or ``UNKNOWN``."""
    at: str
    """Where the code that decided it is (the assignment, else the declaration)."""


@dataclass(frozen=True)
class Resolved:
    platform: str
    fields: tuple[ResolvedField, ...] = ()
    error: str = ""

    def get(self, config: str, name: str) -> ResolvedField | None:
        short = config.rsplit(".", 1)[-1]
        return next((f for f in self.fields if f.config == short and f.name == name), None)


def value_of(text: str) -> object:
    """A resolved field's value back from its text (``UNKNOWN`` when it is not a literal)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return UNKNOWN


_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge}


def _truth(value: object) -> bool | None:
    if value is UNKNOWN or isinstance(value, (Ref, Obj)) and not isinstance(value, Obj):
        return None
    if isinstance(value, (Obj, Closure)):
        return True
    if isinstance(value, Member):
        return bool(value.value) if value.flag else True
    if isinstance(value, tuple) and any(v is UNKNOWN for v in value):
        return bool(value) or None
    try:
        return bool(value)
    except Exception:  # noqa: BLE001 - a value whose truth raises is not known
        return None


def _same(a: object, b: object) -> bool:
    if a is b:
        return True
    if isinstance(a, (Obj, Ref)) or isinstance(b, (Obj, Ref)) or a is UNKNOWN or b is UNKNOWN:
        return a == b
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return False


_HAVOC = "<changed by code not followed>"


class _State:
    """One point of the run: the locals of the frame (the objects are shared, their fields copied per state)."""

    def __init__(self, local: dict[str, object], heap: dict[int, dict[str, tuple[object, str]]]) -> None:
        self.local = local
        self.heap = heap

    def copy(self) -> _State:
        return _State(dict(self.local), {k: dict(v) for k, v in self.heap.items()})


def _join(states: list[_State], initial: Callable[[int, str], object]) -> _State | None:
    """One state for several paths: a value they agree on, else ``UNKNOWN``."""
    if not states:
        return None
    first = states[0]
    if len(states) == 1:
        return first
    local: dict[str, object] = {}
    for name in set().union(*(s.local for s in states)):
        values = [s.local.get(name, UNKNOWN) for s in states]
        local[name] = values[0] if all(_same(values[0], v) for v in values) else UNKNOWN
    heap: dict[int, dict[str, tuple[object, str]]] = {}
    for key in set().union(*(s.heap for s in states)):
        fields: dict[str, tuple[object, str]] = {}
        for name in set().union(*(s.heap.get(key, {}) for s in states)):
            got = [s.heap.get(key, {}).get(name) for s in states]
            if any(g is None for g in got):
                values = [g[0] if g else initial(key, name) for g in got]
            else:
                values = [g[0] for g in got if g is not None]
            wheres = {g[1] for g in got if g is not None}
            same = all(_same(values[0], v) for v in values)
            fields[name] = (values[0] if same else UNKNOWN, " or ".join(sorted(wheres)))
        heap[key] = fields
    return _State(local, heap)


class _Machine:
    def __init__(self, surface: StaticSurface, platform: str, passed: dict[str, dict[str, object]]) -> None:
        self.surface = surface
        self.platform_name = platform
        self.passed = passed
        self.objects: dict[int, Obj] = {}
        self.configs = config_classes(surface)
        self.steps = 0
        self.root_state = _State({}, {})
        """The state configs made while reading a default are built in (the run's own)."""
        self.platform = self._platform()
        self.loops: list[tuple[list[_State], list[_State]]] = []
        """Per loop being unrolled: the states its ``continue`` and ``break`` statements leave."""
        self.constants: dict[str, object] = {}
        self.members: dict[tuple[int, str], Obj] = {}
        """Configs made by a default factory (``pass_config: PassConfig = field(default_factory=PassConfig)``)."""
        self.raised: list[str] = []
        """Where paths raised, in the order met (a construction that always raises says where)."""

    # ---- objects ---------------------------------------------------------------------------
    def new(self, cls: Found, state: _State, platform: bool = False) -> Obj:
        obj = Obj(cls, platform=platform)
        self.objects[id(obj)] = obj
        state.heap[id(obj)] = {}
        return obj

    def initial(self, key: int, name: str) -> object:
        obj = self.objects.get(key)
        return self._default(obj, name) if obj is not None else UNKNOWN

    def _platform(self) -> Obj | None:
        enum = self._enum_class()
        if enum is None:
            return None
        wanted = f"{PLATFORM_ENUM}.{self.platform_name}"
        for info in self._platform_modules():
            for stmt in info.tree.body:
                if isinstance(stmt, ast.ClassDef) and any(
                        isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None and
                        ast.unparse(s.value) == wanted and "_enum" in ast.unparse(s) for s in stmt.body):
                    found = self.surface.lookup(f"{info.name}.{stmt.name}")
                    if isinstance(found, Found):
                        obj = Obj(found, platform=True)
                        self.objects[id(obj)] = obj
                        return obj
        return None

    def _platform_modules(self) -> Iterator[ModuleInfo]:
        for name in ("cuda", "cpu", "rocm", "xpu", "tpu"):
            info = self.surface.index.module(f"vllm.platforms.{name}")
            if info is not None:
                yield info

    def _enum_class(self) -> Found | None:
        found = self.surface.lookup(f"vllm.platforms.interface.{PLATFORM_ENUM}")
        return found if isinstance(found, Found) and found.kind == FoundKind.CLASS else None

    def _default(self, obj: Obj, name: str) -> object:
        """A field not set in this run: what the consumer passed, else the class's declaration."""
        short = obj.cls.path.rsplit(".", 1)[-1]
        given = self.passed.get(short, {}).get(name, UNKNOWN) if not obj.platform else UNKNOWN
        if name in self.passed.get(short, {}) and not obj.platform and (given is not UNKNOWN or
                                                                         name not in self.configs):
            return given  # a config passed as a value the scan does not read is the one the consumer builds
        if not obj.platform and name in self.configs:
            cls = self.surface.lookup(self.configs[name])
            if isinstance(cls, Found) and cls.kind == FoundKind.CLASS and name != "vllm_config":
                passed = short == "VllmConfig" and (cls.path.rsplit(".", 1)[-1] in self.passed)
                text = declared(self.surface, obj.cls, name).default
                if passed or (text or "").endswith("()"):
                    return self.build(cls)
                return None if text == "None" else UNKNOWN
        member = self.surface.member(obj.cls, name)
        if isinstance(member, Found) and member.kind in (FoundKind.METHOD, FoundKind.CLASSMETHOD,
                                                         FoundKind.STATICMETHOD):
            return Ref(member)
        if isinstance(member, Found) and member.kind == FoundKind.PROPERTY:
            return UNKNOWN
        text = declared(self.surface, obj.cls, name).default if not obj.platform else None
        defined = definition(member) if isinstance(member, Found) else None
        module = defined.module if defined is not None else None
        call = ast.parse(text, mode="eval").body if text is not None and text.endswith("()") else None
        if isinstance(call, ast.Call) and module is not None and not obj.platform:
            made = self.surface.resolve_expr(module, call.func)
            if isinstance(made, Found) and made.kind == FoundKind.CLASS and made.path.startswith("vllm."):
                key = (id(obj), name)
                if key not in self.members:
                    self.members[key] = self.new(made, self.root_state)
                    self.construct(self.members[key], self.root_state)
                return self.members[key]
        if text is None:
            text, module = self._class_constant(obj.cls, name)
        if text is None:
            return UNKNOWN
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        node = ast.parse(text, mode="eval").body
        return self.expr(node, _State({}, {}), module, None) if module is not None and isinstance(
            node, (ast.Attribute, ast.Name)) else UNKNOWN

    def _class_constant(self, cls: Found, name: str) -> tuple[str | None, ModuleInfo | None]:
        """The value a class body gives ``name`` (``_enum = PlatformEnum.CPU``; ``x: bool = field(default=False)``),
        and the module it is written in."""
        model = self.surface.class_model(cls)
        for owner in self.surface.mro(model)[0] if model is not None else []:
            for stmt in owner.node.body:
                target = stmt.target if isinstance(stmt, ast.AnnAssign) else \
                    (stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
                value = getattr(stmt, "value", None)
                if isinstance(target, ast.Name) and target.id == name and value is not None:
                    if isinstance(value, ast.Call) and ast.unparse(value.func).rsplit(".", 1)[-1] in ("field", "Field"):
                        given = next((k.value for k in value.keywords if k.arg == "default"),
                                     value.args[0] if value.args else None)
                        return (ast.unparse(given) if given is not None else None), owner.module
                    return ast.unparse(value), owner.module
        return None, None

    def build(self, cls: Found, state: _State | None = None) -> Obj:
        """A config the consumer builds (or the one ``VllmConfig`` makes for it), its own construction run."""
        key = cls.path
        existing = getattr(self, "_built", {}).get(key)
        if existing is not None:
            return existing
        own = state or self.root_state
        obj = self.new(cls, own)
        self._built = {**getattr(self, "_built", {}), key: obj}
        if cls.path.rsplit(".", 1)[-1] != "VllmConfig":
            self.construct(obj, own)
        return obj

    def construct(self, obj: Obj, state: _State) -> None:
        for name in ("__post_init__",):
            member = self.surface.member(obj.cls, name)
            if isinstance(member, Found) and member.kind == FoundKind.METHOD:
                code = _code(member)
                if code is not None:
                    out = self.call(code, [obj], {}, state, 0)
                    if out is not None:
                        state.local, state.heap = out[0].local, out[0].heap

    # ---- reading fields --------------------------------------------------------------------
    def get(self, obj: Obj, name: str, state: _State) -> object:
        fields = state.heap.setdefault(id(obj), {})
        if name in fields:
            return fields[name][0]
        if _HAVOC in fields and not isinstance(self._default(obj, name), (Ref, Obj)):
            return UNKNOWN
        value = self._default(obj, name)
        if isinstance(value, Obj):  # a sub-config made from its declaration is one object from now on: what is set
            fields[name] = (value, "")  # on it through one read (``getattr(self, "kernel_config")``) stays set
        return value

    def havoc_object(self, obj: Obj, where: str, state: _State) -> None:
        """Code this run cannot follow received ``obj``: none of its fields is known after it (its sub-configs
        are objects of their own, which the code may change too only through calls this run sees)."""
        fields = state.heap.setdefault(id(obj), {})
        for name, (value, _) in list(fields.items()):
            if not isinstance(value, (Obj, Ref)):
                fields[name] = (UNKNOWN, where)
        fields[_HAVOC] = (True, where)

    def escape(self, obj: Obj, where: str, state: _State, seen: set[int] | None = None) -> None:
        """A reference this run does not track may now reach ``obj``'s sub-objects: none of their fields is known."""
        seen = set() if seen is None else seen
        for name in self.configs:  # the sub-configs not read yet are made now, so that they are havocked too
            if name != "vllm_config" and isinstance(self.surface.member(obj.cls, name), Found) and \
                    isinstance(self._default(obj, name), Obj):
                self.get(obj, name, state)
        for value, _ in list(state.heap.get(id(obj), {}).values()):
            if isinstance(value, Obj) and id(value) not in seen:
                seen.add(id(value))
                self.havoc_object(value, where, state)
                self.escape(value, where, state, seen)

    def set(self, obj: Obj, name: str, value: object, where: str, state: _State) -> None:
        state.heap.setdefault(id(obj), {})[name] = (value, where)

    # ---- running ---------------------------------------------------------------------------
    def call(self, code: Code, args: list[object], kwargs: dict[str, object], state: _State,
             depth: int, env: dict[str, object] | None = None) -> tuple[_State, object] | None:
        """Run a def from ``state``: the state after it (None when every path raised) and what it returns."""
        if depth > _MAX_DEPTH:
            return state, UNKNOWN
        node = code.node
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        defaults = node.args.defaults
        local: dict[str, object] = dict(env or {})
        for i, name in enumerate(params):
            if i < len(args):
                local[name] = args[i]
            elif name in kwargs:
                local[name] = kwargs[name]
            else:
                index = i - (len(params) - len(defaults))
                local[name] = self.expr(defaults[index], state, code.module, None) if index >= 0 else UNKNOWN
        for arg in node.args.kwonlyargs:
            local[arg.arg] = kwargs.get(arg.arg, UNKNOWN)
        frame = _State(local, state.heap)
        returns: list[tuple[_State, object]] = []
        end = self.block(node.body, frame, code, returns, depth)
        if end is not None:
            returns.append((end, None))
        if not returns:
            return None
        joined = _join([s for s, _ in returns], self.initial)
        assert joined is not None
        values = [v for _, v in returns]
        value = values[0] if all(_same(values[0], v) for v in values) else UNKNOWN
        return _State(dict(state.local), joined.heap), value

    def block(self, body: list[ast.stmt], state: _State | None, code: Code,
              returns: list[tuple[_State, object]], depth: int) -> _State | None:
        for stmt in body:
            if state is None:
                return None
            state = self.statement(stmt, state, code, returns, depth)
        return state

    def statement(self, stmt: ast.stmt, state: _State, code: Code, returns: list[tuple[_State, object]],
                  depth: int) -> _State | None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _Budget
        where = loc(code.module, stmt) or ""
        try:
            if isinstance(stmt, ast.Return):
                value = self.expr(stmt.value, state, code.module, depth) if stmt.value is not None else None
                returns.append((state, value))
                return None
            if isinstance(stmt, ast.Raise):
                self.raised.append(where)
                return None
            if isinstance(stmt, ast.Assert):
                return None if _truth(self.expr(stmt.test, state, code.module, depth)) is False else state
            if isinstance(stmt, ast.If):
                truth = _truth(self.expr(stmt.test, state, code.module, depth))
                if truth is True:
                    return self.block(stmt.body, state, code, returns, depth)
                if truth is False:
                    return self.block(stmt.orelse, state, code, returns, depth)
                ends = [self.block(stmt.body, state.copy(), code, returns, depth),
                        self.block(stmt.orelse, state.copy(), code, returns, depth)]
                return _join([s for s in ends if s is not None], self.initial)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                if stmt.value is None:
                    return state
                value = self.expr(stmt.value, state, code.module, depth)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    self.store(target, value, where, state, code.module, depth)
                return state
            if isinstance(stmt, ast.AugAssign):
                self.store(stmt.target, UNKNOWN, where, state, code.module, depth)
                return state
            if isinstance(stmt, ast.Expr):
                self.expr(stmt.value, state, code.module, depth)
                return state
            if isinstance(stmt, ast.For):
                items = self.expr(stmt.iter, state, code.module, depth)
                if isinstance(items, dict):
                    items = tuple(items)
                if isinstance(items, tuple) and len(items) <= _MAX_UNROLL:
                    return self.unroll(stmt, items, state, code, returns, depth)
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                # Zero or more rounds: one round run on what is not known, joined with none.
                once = state.copy()
                self.havoc(stmt, once, code.module, depth, where)
                ends = [self.block(stmt.body + stmt.orelse, once, code, [], depth), state]
                joined = _join([s for s in ends if s is not None], self.initial)
                if joined is not None:
                    self.havoc(stmt, joined, code.module, depth, where)
                return joined
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                return self.block(stmt.body, state, code, returns, depth)
            if isinstance(stmt, ast.Try):
                # The handlers run where the body raised: a state the body may leave is joined with theirs.
                end = self.block(stmt.body + stmt.orelse, state.copy(), code, returns, depth)
                ends = [end] + [self.block(h.body, state.copy(), code, returns, depth) for h in stmt.handlers]
                joined = _join([s for s in ends if s is not None], self.initial)
                return self.block(stmt.finalbody, joined, code, returns, depth) if joined is not None else None
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                state.local[stmt.name] = Closure(stmt, code, state.local)
                return state
            if isinstance(stmt, ast.Continue) and self.loops:
                self.loops[-1][0].append(state)
                return None
            if isinstance(stmt, ast.Break) and self.loops:
                self.loops[-1][1].append(state)
                return None
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    name = alias.asname or alias.name.split(".")[0]
                    module = stmt.module if isinstance(stmt, ast.ImportFrom) else None
                    path = f"{module}.{alias.name}" if module else alias.name
                    found = self.surface.lookup(path)
                    state.local[name] = (self.platform if path == "vllm.platforms.current_platform" and self.platform
                                         else Ref(found) if isinstance(found, Found) else UNKNOWN)
                return state
        except _Dropped:
            return None
        return state

    def unroll(self, stmt: ast.For, items: tuple[object, ...], state: _State, code: Code,
               returns: list[tuple[_State, object]], depth: int) -> _State | None:
        """A loop over values that are known: each round run on its item."""
        current: _State | None = state
        breaks: list[_State] = []
        for item in items:
            if current is None:
                break
            self.loops.append(([], breaks))
            try:
                self.store(stmt.target, item, loc(code.module, stmt) or "", current, code.module, depth)
                end = self.block(stmt.body, current, code, returns, depth)
            finally:
                continues, _ = self.loops.pop()
            current = _join([s for s in [end, *continues] if s is not None], self.initial)
        if current is not None:
            current = self.block(stmt.orelse, current, code, returns, depth)
        return _join([s for s in [current, *breaks] if s is not None], self.initial)

    def havoc(self, stmt: ast.stmt, state: _State, module: ModuleInfo, depth: int | None, where: str) -> None:
        """A loop: whatever its body assigns is not known after it."""
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self.store(target, UNKNOWN, where, state, module, depth)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                self.store(node.target, UNKNOWN, where, state, module, depth)

    def store(self, target: ast.expr, value: object, where: str, state: _State, module: ModuleInfo,
              depth: int | None) -> None:
        if isinstance(target, ast.Name):
            state.local[target.id] = value
        elif isinstance(target, ast.Attribute):
            receiver = self.expr(target.value, state, module, depth)
            if isinstance(receiver, Obj):
                self.set(receiver, target.attr, value, where, state)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value if isinstance(value, tuple) and len(value) == len(target.elts) else None
            for i, item in enumerate(target.elts):
                self.store(item, values[i] if values is not None else UNKNOWN, where, state, module, depth)

    # ---- expressions -----------------------------------------------------------------------
    def expr(self, node: ast.expr | None, state: _State, module: ModuleInfo, depth: int | None) -> object:
        if node is None:
            return None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in state.local:
                return state.local[node.id]
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            if node.id == "current_platform" and self.platform is not None:
                return self.platform
            found = self.surface.resolve_expr(module, node)
            if isinstance(found, Found) and found.path == "vllm.platforms.current_platform" and self.platform:
                return self.platform
            if isinstance(found, Found) and found.kind == FoundKind.ATTRIBUTE:
                return self.constant(found)
            return Ref(found) if isinstance(found, Found) else UNKNOWN
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value, state, module, depth)
            return self.attribute(base, node.attr, state)
        if isinstance(node, ast.NamedExpr):
            value = self.expr(node.value, state, module, depth)
            state.local[node.target.id] = value
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            truth = _truth(self.expr(node.operand, state, module, depth))
            return UNKNOWN if truth is None else not truth
        if isinstance(node, ast.BoolOp):
            return self.boolop(node, state, module, depth)
        if isinstance(node, ast.IfExp):
            truth = _truth(self.expr(node.test, state, module, depth))
            if truth is None:
                a, b = self.expr(node.body, state, module, depth), self.expr(node.orelse, state, module, depth)
                return a if _same(a, b) else UNKNOWN
            return self.expr(node.body if truth else node.orelse, state, module, depth)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self.compare(node.ops[0], self.expr(node.left, state, module, depth),
                                self.expr(node.comparators[0], state, module, depth))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return tuple(self.expr(e, state, module, depth) for e in node.elts)
        if isinstance(node, ast.Dict):
            out: dict[object, object] = {}
            for key, item in zip(node.keys, node.values):
                k = self.expr(key, state, module, depth) if key is not None else UNKNOWN
                if k is UNKNOWN or isinstance(k, (Obj, Ref, Closure, dict)):
                    return UNKNOWN
                out[k] = self.expr(item, state, module, depth)
            return out
        if isinstance(node, ast.Subscript):
            base = self.expr(node.value, state, module, depth)
            index = self.expr(node.slice, state, module, depth)
            if isinstance(base, dict) and index is not UNKNOWN and not isinstance(index, (Obj, Ref, Closure, dict)):
                return base.get(index, UNKNOWN)
            if isinstance(base, tuple) and isinstance(index, int) and -len(base) <= index < len(base):
                return base[index]
            return UNKNOWN
        if isinstance(node, ast.Lambda) and depth is not None:
            return Closure(node, self._lambda_code(module), state.local)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitOr, ast.BitAnd)):
            a, b = self.expr(node.left, state, module, depth), self.expr(node.right, state, module, depth)
            if isinstance(a, Member) and isinstance(b, Member) and a.flag and b.flag and a.cls == b.cls and \
                    isinstance(a.value, int) and isinstance(b.value, int):
                value = (a.value | b.value) if isinstance(node.op, ast.BitOr) else (a.value & b.value)
                return Member(a.cls, f"({a.name}|{b.name})", value, True)
            return UNKNOWN
        if isinstance(node, ast.Call) and depth is not None:
            return self.invoke(node, state, module, depth)
        return UNKNOWN

    def constant(self, found: Found) -> object:
        """A module-level name bound once to a display of constants (``OPTIMIZATION_LEVEL_TO_CONFIG``)."""
        if found.path in self.constants:
            return self.constants[found.path]
        self.constants[found.path] = UNKNOWN
        defined = definition(found)
        stmt = defined.node if defined is not None else None
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and defined is not None and \
            defined.owner is None else None
        if value is not None and defined is not None:
            self.constants[found.path] = self.expr(value, _State({}, {}), defined.module, 0)
        return self.constants[found.path]

    def _lambda_code(self, module: ModuleInfo) -> Code:
        found = Found(module.name, FoundKind.MODULE)
        return Code(found, _LAMBDA_DEF, module)

    def boolop(self, node: ast.BoolOp, state: _State, module: ModuleInfo, depth: int | None) -> object:
        """``and``/``or`` as Python runs them; an operand that decides the truth decides it even after one that is
        not known (``x and False`` is false whatever ``x`` is), though the value may then be that other one."""
        stop = isinstance(node.op, ast.Or)
        unknown = False
        last: object = None
        for item in node.values:
            last = self.expr(item, state, module, depth)
            truth = _truth(last)
            if truth is None:
                unknown = True
            elif truth is stop:
                return last if not unknown else (True if stop else False)
        return UNKNOWN if unknown else last

    def compare(self, op: ast.cmpop, a: object, b: object) -> object:
        if isinstance(op, (ast.Is, ast.IsNot)):
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            if isinstance(a, Ref) or isinstance(b, Ref):
                return UNKNOWN
            same = a is b or (isinstance(a, Member) and a == b) or (a is None and b is None) or \
                (isinstance(a, bool) and isinstance(b, bool) and a == b)
            if not same and (isinstance(a, Obj) or isinstance(b, Obj)) and not (a is None or b is None):
                return UNKNOWN
            return same if isinstance(op, ast.Is) else not same
        if isinstance(op, (ast.In, ast.NotIn)):
            found: object = UNKNOWN
            if isinstance(a, Member) and isinstance(b, Member) and a.flag and b.flag and isinstance(a.value, int) \
                    and isinstance(b.value, int):
                found = (a.value & b.value) == a.value
            elif isinstance(b, tuple) and a is not UNKNOWN and not isinstance(a, (Obj, Ref)):
                if any(_same(a, item) for item in b):
                    found = True
                elif all(item is not UNKNOWN for item in b):
                    found = False
            return found if found is UNKNOWN or isinstance(op, ast.In) else not found
        if a is UNKNOWN or b is UNKNOWN or isinstance(a, (Obj, Ref)) or isinstance(b, (Obj, Ref)):
            return UNKNOWN
        if isinstance(a, Member) and isinstance(b, Member) and not isinstance(op, (ast.Eq, ast.NotEq)):
            # ``level > OptimizationLevel.O0``: ordered by value where the class is an IntEnum (a plain Enum raises)
            if a.cls != b.cls or not self._int_enum(a.cls) or not isinstance(a.value, int) or \
                    not isinstance(b.value, int):
                return UNKNOWN
            a, b = a.value, b.value
        compare = _COMPARE.get(type(op))
        try:
            return bool(compare(a, b)) if compare is not None else UNKNOWN
        except TypeError:
            return UNKNOWN

    def _int_enum(self, path: str) -> bool:
        found = self.surface.lookup(path)
        model = self.surface.class_model(found) if isinstance(found, Found) else None
        return model is not None and any(ast.unparse(b).rsplit(".", 1)[-1] in ("IntEnum", "IntFlag")
                                         for b in model.node.bases)

    def attribute(self, base: object, name: str, state: _State) -> object:
        if isinstance(base, Obj):
            return self.get(base, name, state)
        if isinstance(base, Ref):
            if base.found.kind == FoundKind.CLASS:
                return self.enum_member(base.found, name)
            if base.found.kind == FoundKind.MODULE:
                found = self.surface.member(base.found, name)
                if isinstance(found, Found) and found.path == "vllm.platforms.current_platform" and self.platform:
                    return self.platform
                return Ref(found) if isinstance(found, Found) else UNKNOWN
        return UNKNOWN

    def enum_member(self, cls: Found, name: str) -> object:
        """``Cls.NAME`` of an enum class of the build (a flag's value counted as ``enum.auto()`` counts it)."""
        model = self.surface.class_model(cls)
        if model is None:
            return UNKNOWN
        bases = " ".join(ast.unparse(b) for b in model.node.bases)
        if "Enum" not in bases and "Flag" not in bases:
            member = self.surface.member(cls, name)
            return Ref(member) if isinstance(member, Found) and member.kind != FoundKind.ATTRIBUTE else UNKNOWN
        flag = "Flag" in bases
        counter, values = 0, dict[str, object]()
        for stmt in model.node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                value = stmt.value
                if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("auto"):
                    counter = counter * 2 if flag and counter else 1 if flag else counter + 1
                    values[stmt.targets[0].id] = counter
                elif isinstance(value, ast.Constant):
                    values[stmt.targets[0].id] = value.value
                    if isinstance(value.value, int):
                        counter = value.value
                else:
                    values[stmt.targets[0].id] = None  # a member all the same, known by its name
        if name not in values:
            return UNKNOWN
        return Member(cls.path, name, values[name], flag)

    def invoke(self, node: ast.Call, state: _State, module: ModuleInfo, depth: int) -> object:
        func = node.func
        receiver = self.expr(func.value, state, module, depth) if isinstance(func, ast.Attribute) else None
        args = [self.expr(a, state, module, depth) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: self.expr(k.value, state, module, depth) for k in node.keywords if k.arg}
        if isinstance(func, ast.Attribute) and isinstance(receiver, Obj):
            member = self.surface.member(receiver.cls, func.attr)
            if isinstance(member, Found) and member.kind in (FoundKind.METHOD, FoundKind.CLASSMETHOD,
                                                             FoundKind.STATICMETHOD):
                code = _code(member)
                if code is not None:
                    bound = [] if member.kind == FoundKind.STATICMETHOD else [receiver]
                    out = self.call(code, bound + args, kwargs, state, depth + 1)
                    if out is None:
                        # Every path of the callee raised here: for the platform, a method left to a subclass
                        # chosen at import (CudaPlatformBase's NotImplementedError); elsewhere what the callee
                        # reads (the model's files) is not known. Not known either way, never a path dropped.
                        self.havoc_writes(member, node, module, state)
                        return UNKNOWN
                    state.heap = out[0].heap
                    return out[1]
            self.havoc_all([receiver, *args, *kwargs.values()], node, module, state)
            return UNKNOWN
        if isinstance(func, ast.Attribute) and isinstance(receiver, dict) and not node.keywords:
            if func.attr == "items":
                return tuple(receiver.items())
            if func.attr in ("keys", "values"):
                return tuple(getattr(receiver, func.attr)())
            if func.attr == "get" and args and args[0] is not UNKNOWN:
                return receiver.get(args[0], args[1] if len(args) > 1 else None)
        callee = state.local.get(func.id) if isinstance(func, ast.Name) else None
        if isinstance(callee, Closure):
            return self.run_closure(callee, args, kwargs, state, depth)
        if isinstance(func, ast.Name) and func.id in _BUILTINS and func.id not in state.local:
            return self.builtin(func.id, args, state, loc(module, node) or "")
        if isinstance(func, ast.Name) and func.id == "setattr" and len(args) == 3 and isinstance(args[0], Obj):
            where = loc(module, node) or ""
            if isinstance(args[1], str):
                self.set(args[0], args[1], args[2], where, state)
            else:
                self.havoc_object(args[0], where, state)
            return None
        target = receiver if isinstance(func, ast.Attribute) else self.expr(func, state, module, depth)
        if isinstance(func, ast.Attribute) and isinstance(receiver, Ref):
            if receiver.found.kind == FoundKind.CLASS:
                member = self.surface.member(receiver.found, func.attr)
                code = _code(member) if isinstance(member, Found) and member.kind in (
                    FoundKind.CLASSMETHOD, FoundKind.STATICMETHOD) else None
                if code is not None and isinstance(member, Found):
                    first: list[object] = [receiver] if member.kind == FoundKind.CLASSMETHOD else []
                    out = self.call(code, first + args, kwargs, state, depth + 1)
                    if out is None:
                        self.havoc_writes(member, node, module, state)
                        return UNKNOWN
                    state.heap = out[0].heap
                    return out[1]
            target = self.attribute(receiver, func.attr, state)
        if isinstance(target, Ref) and target.found.kind == FoundKind.FUNCTION and \
                target.found.path.startswith("vllm.") and not target.found.path.startswith(_NOT_FOLLOWED):
            code = _code(target.found)
            if code is not None:
                out = self.call(code, args, kwargs, state, depth + 1)
                if out is None:
                    self.havoc_writes(target.found, node, module, state)
                    return UNKNOWN
                state.heap = out[0].heap
                return out[1]
        if isinstance(target, Ref) and not target.found.path.startswith("vllm."):
            return UNKNOWN  # code outside the build is taken not to change vLLM's configs
        if isinstance(func, ast.Attribute) and receiver is UNKNOWN:
            # A method of an object this reading does not know (``cls.verify_and_update_config(self)``, ``cls``
            # looked up by architecture): whichever class it is, it is one of the build's that define the method,
            # so what it may assign is what those methods may.
            for path in self.surface.definitions(func.attr):
                found = self.surface.lookup(path)
                if isinstance(found, Found) and found.kind in (FoundKind.METHOD, FoundKind.CLASSMETHOD,
                                                               FoundKind.STATICMETHOD):
                    self.havoc_writes(found, node, module, state)
            return UNKNOWN
        self.havoc_all([receiver, *args, *kwargs.values()], node, module, state)
        return UNKNOWN

    def run_closure(self, closure: Closure, args: list[object], kwargs: dict[str, object], state: _State,
                    depth: int) -> object:
        if isinstance(closure.node, ast.Lambda):
            params = [a.arg for a in closure.node.args.args]
            frame = _State({**closure.env, **dict(zip(params, args))}, state.heap)
            return self.expr(closure.node.body, frame, closure.code.module, depth + 1)
        code = Code(closure.code.found, closure.node, closure.code.module)
        out = self.call(code, args, kwargs, state, depth + 1, closure.env)
        if out is None:
            raise _Dropped
        state.heap = out[0].heap
        return out[1]

    def builtin(self, name: str, args: list[object], state: _State, where: str = "") -> object:
        """The builtins the configs' construction tests with, on what is known."""
        first = args[0] if args else UNKNOWN
        if name == "getattr" and isinstance(first, Obj) and len(args) > 1 and not isinstance(args[1], str):
            # ``getattr(config, key)`` with a key not known here hands out any of its fields, sub-configs too,
            # to code this run then cannot follow (``apply_recursive`` setting defaults on them by name).
            self.escape(first, where, state)
            return UNKNOWN
        if name == "callable":
            return isinstance(first, (Closure, Ref)) or (UNKNOWN if first is UNKNOWN else False)
        if name == "is_dataclass":
            return True if isinstance(first, Obj) else UNKNOWN if first is UNKNOWN else False
        if name in ("hasattr", "getattr") and isinstance(first, Obj) and len(args) > 1 and isinstance(args[1], str):
            fields = state.heap.get(id(first), {})
            member = self.surface.member(first.cls, args[1])
            has: object = True if args[1] in fields or isinstance(member, Found) else \
                False if isinstance(member, Missing) else UNKNOWN
            if name == "hasattr":
                return has
            if has is True:
                return self.get(first, args[1], state)
            return args[2] if has is False and len(args) > 2 else UNKNOWN
        if name == "isinstance" and len(args) == 2 and isinstance(args[1], Ref) and first is not UNKNOWN:
            kind = args[1].found.path
            if kind == "builtins.dict":
                return isinstance(first, dict)
            return UNKNOWN
        if name == "len" and isinstance(first, (tuple, dict, str)):
            return len(first)
        return UNKNOWN

    def havoc_writes(self, callee: Found, node: ast.AST, module: ModuleInfo, state: _State) -> None:
        """A callee every path of which raised in this reading: the real call returned (the construction goes on),
        so the config fields it may assign, across what it reaches, are not known after it."""
        where = loc(module, node) or ""
        for write in self.surface.fact(reach.FACT, callee.path, "").writes:
            for key, obj in self.objects.items():
                if write.kind == reach.CONFIG and obj.cls.path == write.config and key in state.heap:
                    state.heap[key][write.field] = (UNKNOWN, where)

    def havoc_all(self, values: list[object], node: ast.AST, module: ModuleInfo, state: _State) -> None:
        for value in values:
            if isinstance(value, Obj) and not value.platform:
                self.havoc_object(value, loc(module, node) or "", state)


def _code(found: Found) -> Code | None:
    defined = definition(found)
    if defined is None or defined.function is None:
        return None
    return Code(found, defined.function, defined.module)


def parse_passed(text: str) -> dict[str, dict[str, object]]:
    """``CacheConfig.block_size=16;SchedulerConfig.max_num_seqs=8`` -> {config: {field: value}} (what is not a
    literal is ``UNKNOWN``)."""
    passed: dict[str, dict[str, object]] = {}
    for item in filter(None, text.split(";")):
        name, _, value = item.partition("=")
        config, _, fieldname = name.partition(".")
        passed.setdefault(config, {})[fieldname] = value_of(value)
    return passed


def read(surface: StaticSurface, platform: str, passed: str = "") -> Resolved:
    """The configs' fields once ``VllmConfig`` is built on ``platform`` (one of ``PLATFORMS``) from what the
    consumer passes (``parse_passed``)."""
    top = surface.lookup(VLLM_CONFIG)
    if not isinstance(top, Found) or top.kind != FoundKind.CLASS:
        return Resolved(platform, error=f"{VLLM_CONFIG} not found")
    machine = _Machine(surface, platform, parse_passed(passed))
    if machine.platform is None:
        return Resolved(platform, error=f"no platform class of the build sets _enum = {PLATFORM_ENUM}.{platform}")
    state = _State({}, {})
    machine.root_state = state
    try:
        config = machine.build(top, state)
        member = surface.member(top, "__post_init__")
        code = _code(member) if isinstance(member, Found) else None
        if code is not None:
            out = machine.call(code, [config], {}, state, 0)
            if out is None:
                return Resolved(platform, error="every path of VllmConfig.__post_init__ raises for these values "
                                f"(raises met: {', '.join(machine.raised[-3:])})")
            state = out[0]
    except _Budget:
        return Resolved(platform, error=f"VllmConfig's construction ran past {_MAX_STEPS} steps")
    fields: list[ResolvedField] = []
    for key, values in state.heap.items():
        obj = machine.objects.get(key)
        if obj is None or obj.platform:
            continue
        short = obj.cls.path.rsplit(".", 1)[-1]
        for name, (value, where) in sorted(values.items()):
            if isinstance(value, (Obj, Ref)):
                continue
            fields.append(ResolvedField(short, name, repr(value), where))
    return Resolved(platform, tuple(fields))


def field_value(surface: StaticSurface, resolved: Resolved, config: str, name: str,
                passed: dict[str, dict[str, object]]) -> tuple[object, str]:
    """A field's value on the platform ``resolved`` is for, and where that was decided: the construction's
    assignment, else what the consumer passed, else the declaration."""
    if resolved.error:
        return UNKNOWN, resolved.error
    got = resolved.get(config, name)
    if got is not None:
        return value_of(got.value), got.at
    changed = resolved.get(config, _HAVOC)
    if changed is not None:  # code this reading could not follow received the object: not its declaration now
        return UNKNOWN, changed.at
    short = config.rsplit(".", 1)[-1]
    if name in passed.get(short, {}):
        return passed[short][name], "passed by the consumer"
    cls = surface.lookup(config) if "." in config else None
    if isinstance(cls, Found) and cls.kind == FoundKind.CLASS:
        decl = declared(surface, cls, name)
        return (value_of(decl.default) if decl.default is not None else UNKNOWN), decl.at or ""
    return UNKNOWN, ""


FACT = Fact("resolution", read)
"""Per platform and the consumer's passed literals: what VllmConfig's construction leaves each field it sets."""

_ = ClassModel  # the class models are read through the surface


def evaluate(surface: StaticSurface, text: str, resolved: Resolved, passed: dict[str, dict[str, object]]) -> object:
    """A test of the engine core's (``vllm_config.cache_config.enable_extensible_kv_cache``) on the platform
    ``resolved`` is for: each ``<...>.<config>.<field>`` read as the field resolves there, the rest ``UNKNOWN``
    (a call is not run; two reads of the same field are not taken to be equal, as the engine may change it
    between them)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return UNKNOWN
    configs = config_classes(surface)

    class Fields(ast.NodeTransformer):
        def visit_Attribute(self, attr: ast.Attribute) -> ast.AST:
            receiver = attr.value
            last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
            if last in configs:
                value, _ = field_value(surface, resolved, configs[last], attr.attr, passed)
                if value is not UNKNOWN and isinstance(value, (bool, int, float, str, type(None))):
                    return ast.copy_location(ast.Constant(value), attr)
                return ast.copy_location(ast.Name("__unknown__", ast.Load()), attr)
            return self.generic_visit(attr)

    for compare in ast.walk(node):
        if isinstance(compare, ast.Compare) and len(compare.ops) == 1 and not isinstance(compare.left, ast.Constant) \
                and ast.unparse(compare.left) == ast.unparse(compare.comparators[0]):
            return UNKNOWN
    swapped = Fields().visit(node)
    machine = _Machine(surface, resolved.platform, passed)
    state = _State({"__unknown__": UNKNOWN}, {})
    info = surface.index.module("vllm.v1.engine.core")
    top = surface.lookup(VLLM_CONFIG)
    if info is None and isinstance(top, Found) and (defined := definition(top)) is not None:
        info = defined.module
    if info is None:
        return UNKNOWN
    return machine.expr(swapped, state, info, None)


def fields_in(surface: StaticSurface, text: str) -> list[tuple[str, str]]:
    """The config fields a test reads: (config class path, field)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return []
    configs = config_classes(surface)
    out = []
    receivers = {id(a.value) for a in ast.walk(node) if isinstance(a, ast.Attribute)}
    for attr in ast.walk(node):
        if isinstance(attr, ast.Attribute) and id(attr) not in receivers:
            receiver = attr.value
            last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
            if last in configs and (configs[last], attr.attr) not in out:
                out.append((configs[last], attr.attr))
    return out


def worker_class(surface: StaticSurface, platform: str) -> str | None:
    """The worker class the platform's class names (``parallel_config.worker_cls = "vllm.v1.worker.gpu_worker.
    Worker"`` in ``CudaPlatformBase.check_and_update_config``)."""
    machine = _Machine(surface, platform, {})
    cls = machine.platform.cls if machine.platform is not None else None
    defined = definition(cls) if cls is not None else None
    if defined is None:
        return None
    for node in ast.walk(defined.node):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "worker_cls"
                                                for t in node.targets) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str) and node.value.value.startswith("vllm."):
            return node.value.value
    return None
