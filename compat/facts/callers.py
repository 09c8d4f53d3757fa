"""How the build's own code calls a method by name: the inbound side of a consumer's override.

A consumer's class that vLLM loads (a platform, a worker, a KV connector, a scheduler's KV cache manager) is
called by vLLM's code with vLLM's arguments, and vLLM uses what it returns. This fact finds every call in the
build of a callable by its name, ``<anything>.name(...)``, ``name(...)`` and ``collective_rpc("name", args=(...),
kwargs={...})`` (an RPC its workers run), with what each passes (the number of positional arguments, the
keywords, whether it unpacks ``*args``/``**kwargs``), the function it sits in (so that a call inside a method
the consumer itself overrides can be set aside), and what the caller reads from the result (``.attr`` on the
value, on a local it is bound to, or on each item of it).

The receiver is not typed: a name shared by unrelated classes gathers their calls too, so a probe uses these
sites as evidence for a call shape it already suspects (a keyword the new signature added), never alone.
"""

from __future__ import annotations

import ast
import re
import weakref
from dataclasses import dataclass
from typing import cast

from compat.facts import Fact
from compat.syntax import FunctionNode, module_name
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

_RPC = ("collective_rpc", "_run_workers", "run_workers")


@dataclass(frozen=True)
class CallSite:
    at: str
    """``file:line`` of the call in the build."""
    function: str
    """The dotted path of the def the call sits in (``vllm.v1.core.sched.scheduler.Scheduler.schedule``)."""
    positional: int
    """Positional arguments the callee receives (for an RPC: the items of ``args``)."""
    keywords: tuple[str, ...] = ()
    unpacks: bool = False
    """``*args`` or ``**kwargs`` (or an RPC's ``args``/``kwargs`` that are not literal): the shape is not known."""
    rpc: bool = False
    """Sent to the workers by ``collective_rpc("name", ...)``."""
    reads: tuple[str, ...] = ()
    """Attributes the caller reads on the result (on each item for an RPC's list of replies)."""
    code: str = ""
    guarded: bool = False
    """The call runs only where a feature test in its function holds (``if envs.X:``, ``if
    current_platform.is_cuda():``, ``if hasattr(...)``, or an early ``if not <flag>: return``)."""
    receiver: str = ""
    condition: str = ""
    """The tests the call runs under in its function (``if`` and conditional expressions around it, joined with
    ``and``; an ``else`` as ``not (test)``), as source text; "" when none."""
    """The class the build declares the receiver as (``self`` in a method of ``K``: ``K``; ``self.scheduler``:
    the annotation of ``K.scheduler``; ``current_platform``: ``Platform``); "" when it is not declared (an RPC's
    receiver is the workers)."""
    handles_not_implemented: bool = False
    """The call sits in a ``try`` whose handlers catch ``NotImplementedError`` (by name, or a base of it): a hook
    left raising it makes the caller take its fallback, not fail."""
    maybe: tuple[str, ...] = ()
    """Keywords of a ``**mapping`` the function builds that it holds only on some paths (``extra = {} if x is None
    else {"x_scale": x}``), with ``maybe_when``, the test they are passed under, as source text."""
    maybe_when: str = ""


@dataclass(frozen=True)
class Callers:
    name: str
    sites: tuple[CallSite, ...] = ()


def _shape(call: ast.Call) -> tuple[int, tuple[str, ...], bool]:
    unpacks = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
    return len(call.args), tuple(k.arg for k in call.keywords if k.arg), unpacks


def _rpc_shape(call: ast.Call) -> tuple[int, tuple[str, ...], bool]:
    """``collective_rpc("m", timeout, args, kwargs)``: the arguments the workers' ``m`` receives."""
    args = next((k.value for k in call.keywords if k.arg == "args"), call.args[2] if len(call.args) > 2 else None)
    kwargs = next((k.value for k in call.keywords if k.arg == "kwargs"),
                  call.args[3] if len(call.args) > 3 else None)
    keywords: tuple[str, ...] = ()
    positional, unpacks = 0, False
    if isinstance(args, (ast.Tuple, ast.List)):
        positional = len(args.elts)
        unpacks = any(isinstance(e, ast.Starred) for e in args.elts)
    elif args is not None:
        unpacks = True
    if isinstance(kwargs, ast.Dict):
        keywords = tuple(k.value for k in kwargs.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        unpacks = unpacks or any(k is None for k in kwargs.keys)
    elif isinstance(kwargs, ast.Call) and ast.unparse(kwargs.func) == "dict":
        keywords = tuple(k.arg for k in kwargs.keywords if k.arg)
        unpacks = unpacks or any(k.arg is None for k in kwargs.keywords)
    elif kwargs is not None and not (isinstance(kwargs, ast.Constant) and kwargs.value is None):
        unpacks = True
    return positional, keywords, unpacks


def _reads(function: ast.AST, call: ast.Call, parents: dict[int, ast.AST]) -> tuple[str, ...]:
    """Attributes read on the call's result: ``f().x``, ``v = f()`` then ``v.x``, and ``for r in v: r.x`` or
    ``[r.x for r in v]`` (each reply of an RPC)."""
    parent = parents.get(id(call))
    if isinstance(parent, ast.Attribute) and parent.value is call:
        return (parent.attr,)
    start = call.lineno
    if isinstance(parent, ast.Await):
        start, parent = parent.lineno, parents.get(id(parent))
    if isinstance(parent, ast.AnnAssign) and isinstance(parent.target, ast.Name):
        name = parent.target.id  # ``times: list[CompilationTimes] = self.collective_rpc(...)``
    elif isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
    else:
        return ()
    items: set[str] = set()
    found: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name) and \
                node.iter.id == name and isinstance(node.target, ast.Name):
            items.add(node.target.id)
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and isinstance(node.ctx, ast.Load) \
                and (node.value.id == name or node.value.id in items) and getattr(node, "lineno", 0) >= start:
            if node.attr not in found:
                found.append(node.attr)
    return tuple(found)


_FEATURE = ("envs.", "current_platform.", "hasattr(", "getattr(", "isinstance(", "supports_")


def _feature_test(test: ast.expr, function: ast.AST) -> bool:
    """A condition that picks a feature, a platform or a capability (an environment flag read through
    ``envs``, ``current_platform.is_...()``, ``hasattr``/``isinstance``, a ``supports_...`` flag), directly or
    through a local assigned from one (``raw = envs.X.strip()`` then ``if not raw: return``)."""
    text = ast.unparse(test)
    if any(marker in text for marker in _FEATURE):
        return True
    assigned = _assignments(function)
    return any(any(marker in ast.unparse(value) for marker in _FEATURE)
               for n in ast.walk(test) if isinstance(n, ast.Name) for value in assigned.get(n.id, ()))


_ASSIGNED: weakref.WeakKeyDictionary[ast.AST, dict[str, list[ast.expr]]] = weakref.WeakKeyDictionary()


def _assignments(function: ast.AST) -> dict[str, list[ast.expr]]:
    """The values the function assigns to each plain name (read once per function). A name bound any other way
    (a parameter, ``+=``, a ``for``/``with``/``except`` target, unpacking, ``:=``, an import, ``global``, a nested
    ``def``) gets its own name as one more value, so only a name bound by exactly one plain assignment (``x = v``,
    ``x: T = v``) has exactly one value."""
    assigned = _ASSIGNED.get(function)
    if assigned is None:
        assigned = _ASSIGNED[function] = {}
        nodes = _own_nodes(function)
        plain: set[int] = set()
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name):
                assigned.setdefault(target.id, []).append(value)
                plain.add(id(target))
        names: list[str] = []
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = function.args
            names += [arg.arg for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if arg]
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and id(node) not in plain:
                names.append(node.id)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.append(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names += [(alias.asname or alias.name).partition(".")[0] for alias in node.names]
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                names += node.names
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
        for name in names:
            assigned.setdefault(name, []).append(ast.Name(id=name, ctx=ast.Load()))
    return assigned


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """The nodes of ``function``'s own body, not those inside the functions, lambdas and classes it defines
    (their locals are their own); their decorators run here."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(node.decorator_list)
        elif not isinstance(node, ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _guarded(function: ast.AST, call: ast.Call, parents: dict[int, ast.AST]) -> bool:
    """The call runs only where a feature test holds: under such an ``if``/``while``/conditional expression, or
    after an ``if <such test>: return``."""
    node: ast.AST = call
    while node is not function:
        parent = parents.get(id(node))
        if parent is None:
            return False
        test = getattr(parent, "test", None)
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and node is not test and test is not None and \
                _feature_test(test, function):
            return True
        node = parent
    for stmt in getattr(function, "body", []):
        if getattr(stmt, "lineno", 0) >= call.lineno:
            break
        if isinstance(stmt, ast.If) and any(isinstance(s, (ast.Return, ast.Raise)) for s in stmt.body) and \
                _feature_test(stmt.test, function):
            return True
    return False


_CATCH_NOT_IMPLEMENTED = frozenset({"NotImplementedError", "RuntimeError", "Exception", "BaseException"})


def _handles_not_implemented(function: ast.AST, call: ast.Call, parents: dict[int, ast.AST]) -> bool:
    """The call is in the body of a ``try`` (in its function) with a handler that catches ``NotImplementedError``:
    by that name, a base of it, or a bare ``except``."""
    node: ast.AST = call
    while node is not function:
        parent = parents.get(id(node))
        if parent is None:
            return False
        if isinstance(parent, ast.Try) and any(node is stmt for stmt in parent.body):
            for handler in parent.handlers:
                caught = handler.type
                names = [] if caught is None else caught.elts if isinstance(caught, ast.Tuple) else [caught]
                if caught is None or any((n.id if isinstance(n, ast.Name) else n.attr if isinstance(
                        n, ast.Attribute) else "") in _CATCH_NOT_IMPLEMENTED for n in names):
                    return True
        node = parent
    return False


def _condition(function: ast.AST, call: ast.Call, parents: dict[int, ast.AST]) -> str:
    """The tests around the call in its function, outermost first."""
    tests: list[str] = []
    node: ast.AST = call
    while node is not function:
        parent = parents.get(id(node))
        if parent is None:
            break
        test = getattr(parent, "test", None)
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and test is not None and node is not test:
            text = ast.unparse(_Locals(_assignments(function)).visit(_copy(test)))
            inside = node is parent.body if isinstance(parent, ast.IfExp) else any(node is b for b in parent.body)
            tests.append(f"({text})" if inside else f"not ({text})")
        node = parent
    return " and ".join(reversed(tests))


class _Locals(ast.NodeTransformer):
    """A local the function assigns once, read as what it is assigned (``extensible = vllm_config.cache_config.
    enable_extensible_kv_cache`` then ``if extensible:``)."""

    def __init__(self, assigned: dict[str, list[ast.expr]]) -> None:
        self.assigned = assigned

    def visit_Name(self, node: ast.Name) -> ast.AST:
        values = self.assigned.get(node.id, ())
        if len(values) == 1 and isinstance(values[0], (ast.Attribute, ast.Name, ast.Constant)):
            return ast.copy_location(_copy(values[0]), node)
        return node


def _copy(node: ast.expr) -> ast.expr:
    return ast.parse(ast.unparse(node), mode="eval").body


def _receiver_class(surface: StaticSurface, value: ast.expr, function: ast.AST, owner: str | None,
                    info: ModuleInfo | None = None) -> str:
    """The class the build declares ``value`` as, for ``self``, ``cls``, ``self.a.b`` chains in a method, a
    parameter annotated with a class of the build (``runner: GPUModelRunner``) and ``current_platform``; ""
    otherwise."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super" and owner:
        # ``super().m(...)`` in a method of ``owner``: the object is an instance of ``owner`` (or a subclass of it)
        found = surface.lookup(owner)
        return found.path if isinstance(found, Found) and found.kind == FoundKind.CLASS else ""
    chain: list[str] = []
    while isinstance(value, ast.Attribute):
        chain.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name):
        return ""
    if value.id == "current_platform":
        found = surface.lookup("vllm.platforms.interface.Platform")
    elif owner is not None and isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
            (function.args.posonlyargs + function.args.args)[:1] and \
            (function.args.posonlyargs + function.args.args)[0].arg == value.id:
        found = surface.lookup(owner)
    else:
        annotation = _annotation_of(function, value.id)
        if annotation is None or info is None:
            return ""
        found = surface.resolve_expr(info, annotation, types=True)
    for attr in reversed(chain):
        if not isinstance(found, Found) or found.kind != FoundKind.CLASS:
            return ""
        found = surface.attribute_type(found, attr)
    return found.path if isinstance(found, Found) and found.kind == FoundKind.CLASS else ""


def _annotation_of(function: ast.AST, name: str) -> ast.expr | None:
    """The annotation of the parameter ``name`` of ``function`` (a class, or a string naming one)."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    args = function.args
    param = next((a for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg == name), None)
    annotation = param.annotation if param is not None else None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    return annotation if isinstance(annotation, (ast.Name, ast.Attribute)) else None


def read(surface: StaticSurface, name: str) -> Callers:
    """Every call of a method called ``name`` in the build, directly or as an RPC."""
    root = surface.index.root
    needle = name.encode()
    sites: list[CallSite] = []
    for path, data in surface.index.texts():
        if needle not in data:
            continue
        info = surface.index.module(module_name(root, path))
        if info is not None:
            sites += _module_sites(surface, info, name)
    return Callers(name, tuple(sites))


@dataclass(frozen=True)
class _Call:
    call: ast.Call
    function: FunctionNode
    where: str
    owner: str | None
    rpc: bool


@dataclass(frozen=True)
class _ModuleCalls:
    """Every call in a module's functions by the name it calls (``x.name(...)``, ``name(...)``, and the
    method an RPC names), in the order the module is read, with each node's parent."""

    by_name: dict[str, list[_Call]]
    parents: dict[int, ast.AST]


_INDEXED: weakref.WeakKeyDictionary[ast.Module, _ModuleCalls] = weakref.WeakKeyDictionary()
"""One index per parsed module (its tree lives as long as the build's reading), so that the callers of many names
read each module once."""


def _calls(info: ModuleInfo) -> _ModuleCalls:
    indexed = _INDEXED.get(info.tree)
    if indexed is not None:
        return indexed
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(info.tree):
        if node is not info.tree:  # no site looks above its function; a reference to the key would keep it alive
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
    by_name: dict[str, list[_Call]] = {}
    stack: list[tuple[list[ast.stmt], str, str | None]] = [(info.tree.body, info.name, None)]
    while stack:
        body, prefix, owner = stack.pop()
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                stack.append((stmt.body, f"{prefix}.{stmt.name}", f"{prefix}.{stmt.name}"))
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                _index_function(stmt, f"{prefix}.{stmt.name}", owner, by_name)
    indexed = _INDEXED[info.tree] = _ModuleCalls(by_name, parents)
    return indexed


def _index_function(function: FunctionNode, where: str, owner: str | None, by_name: dict[str, list[_Call]]) -> None:
    for call in ast.walk(function):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if called is not None:
            by_name.setdefault(called, []).append(_Call(call, function, where, owner, False))
        if isinstance(func, ast.Attribute) and func.attr in _RPC and call.args and isinstance(
                call.args[0], ast.Constant) and isinstance(call.args[0].value, str) and call.args[0].value != called:
            by_name.setdefault(call.args[0].value, []).append(_Call(call, function, where, owner, True))


def _spread(function: ast.AST, call: ast.Call) -> tuple[tuple[str, ...], tuple[str, ...], str] | None:
    """The keys of the one ``**name`` the call unpacks, where the function makes ``name`` only from dict literals
    with string keys (``d = {...}``, ``d = {...} if test else {...}``) and changes it nowhere: (keys on every path,
    keys on some, the test that picks them); None where the call unpacks anything else."""
    spread = [k.value for k in call.keywords if k.arg is None]
    if any(isinstance(a, ast.Starred) for a in call.args) or len(spread) != 1 or not isinstance(spread[0], ast.Name):
        return None
    name = spread[0].id
    values = _assignments(function).get(name, [])
    if len(values) != 1:
        return None
    value, test = values[0], ""
    options = [value]
    if isinstance(value, ast.IfExp):
        options, test = [value.body, value.orelse], ast.unparse(value.test)
    if not all(isinstance(o, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                for k in o.keys) for o in options):
        return None
    for node in ast.walk(function):  # d["k"] = ..., d.update(...), f(d): not only the literal's keys
        if isinstance(node, ast.Name) and node.id == name and node is not spread[0] and not isinstance(
                node.ctx, ast.Store):
            return None
    keys = [{str(cast(ast.Constant, k).value) for k in cast(ast.Dict, o).keys} for o in options]
    every = set.intersection(*keys)
    some = set.union(*keys) - every
    when = "" if not some else test if some <= keys[0] else f"not ({test})" if some <= keys[-1] else \
        f"{test} (some on each side)"
    return tuple(sorted(every)), tuple(sorted(some)), when


def _module_sites(surface: StaticSurface, info: ModuleInfo, name: str) -> list[CallSite]:
    indexed = _calls(info)
    sites = []
    for found in indexed.by_name.get(name, ()):
        call, function = found.call, found.function
        maybe: tuple[str, ...] = ()
        maybe_when = ""
        if found.rpc:
            positional, keywords, unpacks = _rpc_shape(call)
            receiver = ""
        else:
            positional, keywords, unpacks = _shape(call)  # a bare name too: a function called by its name
            receiver = _receiver_class(surface, call.func.value, function, found.owner, info) \
                if isinstance(call.func, ast.Attribute) else ""
            spread = _spread(function, call) if unpacks else None
            if spread is not None:
                keywords, unpacks = keywords + spread[0], False
                maybe, maybe_when = spread[1], spread[2]
        sites.append(CallSite(f"{info.relpath}:{call.lineno}", found.where, positional, keywords, unpacks, found.rpc,
                              _reads(function, call, indexed.parents), ast.unparse(call)[:200],
                              _guarded(function, call, indexed.parents), receiver,
                              _condition(function, call, indexed.parents)[:400],
                              _handles_not_implemented(function, call, indexed.parents), maybe, maybe_when[:200]))
    return sites


FACT = Fact("callers", read)


@dataclass(frozen=True)
class SentRpcs:
    """The names of the worker methods the build sends by ``collective_rpc("name", ...)``."""

    names: tuple[str, ...] = ()


def _read_sent(surface: StaticSurface) -> SentRpcs:
    pattern = re.compile(rb"""\b(?:%s)\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""" % b"|".join(r.encode() for r in _RPC))
    names: set[str] = set()
    for _, data in surface.index.texts():
        names.update(m.group(1).decode() for m in pattern.finditer(data))
    return SentRpcs(tuple(sorted(names)))


SENT_RPCS = Fact("sent-rpcs", _read_sent)
