"""The start-up sequence: what the engine core does between creating the executor and the first step."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from enum import StrEnum

from compat.facts import Fact
from compat.facts.reading import loc, method
from compat.syntax import FunctionNode
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

ENGINE_CORE = "vllm.v1.engine.core.EngineCore"

_SKIP_MODULES = ("vllm.utils", "vllm.logger", "vllm.envs", "vllm.tracing", "vllm.usage")
_MAX_DEPTH = 2


class StepKind(StrEnum):
    """What a start-up step calls (``Step.kind``)."""

    EXECUTOR = "executor"
    """A method of the engine core's executor."""
    RPC = "rpc"
    """A worker RPC (``collective_rpc``)."""
    FUNCTION = "function"
    """A vLLM function."""


@dataclass(frozen=True)
class Step:
    """One start-up step: an executor method, a worker RPC or a vLLM function, and where it is called."""

    kind: StepKind
    name: str
    at: str | None
    path: str | None = None
    """The function's dotted path (functions only)."""
    guard: str = ""
    """The tests the engine core makes before the step (``vllm_config.cache_config.enable_extensible_kv_cache``),
    joined with ``and`` (an ``else`` as ``not (test)``), with the locals they name replaced by what they were
    assigned (``extensible = vllm_config.cache_config.enable_extensible_kv_cache``); "" when it always runs."""


@dataclass(frozen=True)
class StartupFacts:
    engine_core: str | None = None
    executor_created_at: str | None = None
    steps: tuple[Step, ...] = ()
    error: str | None = None


def _calls(node: ast.AST) -> list[ast.Call]:
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _rpc_name(call: ast.Call) -> str | None:
    first = call.args[0] if call.args else None
    return str(first.value) if isinstance(first, ast.Constant) else None


def _step(surface: StaticSurface, call: ast.Call, info: ModuleInfo, aliases: set[str]) -> Step | None:
    text, at = ast.unparse(call.func), loc(info, call)
    head, _, name = text.rpartition(".")
    if head == "self.model_executor" or head in aliases:
        rpc = _rpc_name(call) if name == "collective_rpc" else None
        return Step(StepKind.RPC, rpc, at) if rpc is not None else Step(StepKind.EXECUTOR, name, at)
    if text == "self.collective_rpc" and (sent := _rpc_name(call)) is not None:
        return Step(StepKind.RPC, sent, at)
    if isinstance(call.func, ast.Name):
        found = surface.resolve_expr(info, call.func)
        if isinstance(found, Found) and found.kind == FoundKind.FUNCTION and not found.path.startswith(_SKIP_MODULES):
            return Step(StepKind.FUNCTION, call.func.id, at, found.path)
    return None


def _tests(body: list[ast.stmt], tests: tuple[str, ...], assigned: dict[str, str],
           out: dict[int, tuple[str, ...]]) -> None:
    """The tests each call of ``body`` sits under (by the call's id), with locals replaced by their values."""
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            assigned[stmt.targets[0].id] = _substituted(stmt.value, assigned)
        if isinstance(stmt, (ast.If, ast.While)):
            test = _substituted(stmt.test, assigned)
            for node in ast.walk(stmt.test):
                if isinstance(node, ast.Call):
                    out[id(node)] = tests
            _tests(stmt.body, tests + (test,), assigned, out)
            _tests(stmt.orelse, tests + (f"not ({test})",), assigned, out)
            continue
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try)):
            for node in _headers_of(stmt):
                for call in ast.walk(node):
                    if isinstance(call, ast.Call):
                        out[id(call)] = tests
            inner = list(getattr(stmt, "body", [])) + list(getattr(stmt, "orelse", [])) + \
                list(getattr(stmt, "finalbody", [])) + [s for h in getattr(stmt, "handlers", []) for s in h.body]
            _tests(inner, tests, assigned, out)
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                out[id(node)] = tests


def _headers_of(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in stmt.items]
    return []


def _substituted(node: ast.expr, assigned: dict[str, str]) -> str:
    class Swap(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.AST:
            if name.id in assigned and isinstance(name.ctx, ast.Load):
                return ast.parse(f"({assigned[name.id]})", mode="eval").body
            return name
    return ast.unparse(Swap().visit(ast.parse(ast.unparse(node), mode="eval").body))


def _aliases(node: ast.AST) -> set[str]:
    """Locals bound to the executor (``executor = self.model_executor``)."""
    return {t.id for n in ast.walk(node) if isinstance(n, ast.Assign) and ast.unparse(n.value) == "self.model_executor"
            for t in n.targets if isinstance(t, ast.Name)}


def _steps_of(surface: StaticSurface, owner: Found, node: FunctionNode, info: ModuleInfo, depth: int,
              out: list[Step], seen: set[str], after: int = 0, guard: tuple[str, ...] = ()) -> None:
    tests: dict[int, tuple[str, ...]] = {}
    _tests([s for s in node.body if s.lineno > after], (), {}, tests)
    aliases = _aliases(node)
    for call in _calls(node):
        if call.lineno <= after or id(call) not in tests:
            continue
        under = guard + tests[id(call)]
        step = _step(surface, call, info, aliases)
        text = ast.unparse(call.func)
        if step is None and text.startswith("self.") and text.count(".") == 1:
            # A call of one of the engine core's own methods: its steps count as the caller's.
            inner = method(surface, owner, text[5:]) if depth < _MAX_DEPTH else None
            if inner is not None and text not in seen:
                seen.add(text)
                _steps_of(surface, owner, inner.node, inner.module, depth + 1, out, seen, 0, under)
            continue
        if step is not None and not any(s.name == step.name for s in out):
            out.append(replace(step, guard=" and ".join(f"({t})" if " or " in t else t for t in under)))


def read(surface: StaticSurface) -> StartupFacts:
    init = method(surface, ENGINE_CORE, "__init__")
    if init is None:
        return StartupFacts(error=f"{ENGINE_CORE}.__init__ not found")
    start = next((s for s in ast.walk(init.node) if isinstance(s, ast.Assign) and any(
        ast.unparse(t) == "self.model_executor" for t in s.targets)), None)
    if start is None:
        return StartupFacts(error="the engine core does not create self.model_executor in __init__")
    steps: list[Step] = []
    owner = surface.lookup(ENGINE_CORE)
    if not isinstance(owner, Found):  # its __init__ was read: not reached
        return StartupFacts(error=f"{ENGINE_CORE} not found")
    _steps_of(surface, owner, init.node, init.module, 0, steps, set(), start.lineno)
    return StartupFacts(loc(init.found), loc(init.module, start), tuple(steps))


FACT = Fact("startup", read)
