"""The start-up sequence: what the engine core does between creating the executor and the first step."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import loc, method
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found

ENGINE_CORE = "vllm.v1.engine.core.EngineCore"
_SKIP_MODULES = ("vllm.utils", "vllm.logger", "vllm.envs", "vllm.tracing", "vllm.usage")
_MAX_DEPTH = 2


@dataclass(frozen=True)
class Step:
    """One start-up step: an executor method, a worker RPC or a vLLM function, and where it is called."""

    kind: str
    """``executor``, ``rpc`` or ``function``."""
    name: str
    at: str | None
    path: str | None = None
    """The function's dotted path (functions only)."""


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


def _step(surface: StaticSurface, call: ast.Call, info: ModuleInfo) -> Step | None:
    text, at = ast.unparse(call.func), loc(info, call)
    if text.startswith("self.model_executor."):
        name = text.rsplit(".", 1)[-1]
        rpc = _rpc_name(call) if name == "collective_rpc" else None
        return Step("rpc", rpc, at) if rpc is not None else Step("executor", name, at)
    if text == "self.collective_rpc" and _rpc_name(call) is not None:
        return Step("rpc", _rpc_name(call), at)  # type: ignore[arg-type]
    if isinstance(call.func, ast.Name):
        found = surface.resolve_expr(info, call.func)
        if isinstance(found, Found) and found.kind == "function" and not found.path.startswith(_SKIP_MODULES):
            return Step("function", call.func.id, at, found.path)
    return None


def _steps_of(surface: StaticSurface, owner: Found, node: ast.AST, info: ModuleInfo, depth: int,
              out: list[Step], seen: set[str]) -> None:
    for call in _calls(node):
        step = _step(surface, call, info)
        text = ast.unparse(call.func)
        if step is None and text.startswith("self.") and text.count(".") == 1:
            # A call of one of the engine core's own methods: its steps count as the caller's.
            inner = method(surface, owner, text[5:]) if depth < _MAX_DEPTH else None
            if inner is not None and text not in seen:
                seen.add(text)
                _steps_of(surface, owner, inner.node, inner.module, depth + 1, out, seen)
            continue
        if step is not None and not any(s.name == step.name for s in out):
            out.append(step)


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
    for stmt in [s for s in init.node.body if s.lineno > start.lineno]:
        _steps_of(surface, owner, stmt, init.module, 0, steps, set())  # type: ignore[arg-type]
    return StartupFacts(loc(init.found), loc(init.module, start), tuple(steps))


FACT = Fact("startup", read)
