"""The start-up sequence: what the engine core does between creating the executor and the first step."""

from __future__ import annotations

import ast

from compat.facts import loc, method
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found

ENGINE_CORE = "vllm.v1.engine.core.EngineCore"
_SKIP_MODULES = ("vllm.utils", "vllm.logger", "vllm.envs", "vllm.tracing", "vllm.usage")
_MAX_DEPTH = 2


def _calls(node: ast.AST) -> list[ast.Call]:
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _steps_of(surface: StaticSurface, owner: Found, node: ast.AST, info: ModuleInfo, depth: int,
              out: list[dict], seen: set[str]) -> None:
    for call in _calls(node):
        func = call.func
        text = ast.unparse(func)
        step = None
        if text.startswith("self.model_executor."):
            step = {"kind": "executor", "name": text.rsplit(".", 1)[-1]}
            if step["name"] == "collective_rpc" and call.args and isinstance(call.args[0], ast.Constant):
                step = {"kind": "rpc", "name": str(call.args[0].value)}
        elif text == "self.collective_rpc" and call.args and isinstance(call.args[0], ast.Constant):
            step = {"kind": "rpc", "name": str(call.args[0].value)}
        elif text.startswith("self.") and text.count(".") == 1 and depth < _MAX_DEPTH:
            inner = method(surface, owner, text[5:])
            if inner is not None and text not in seen:
                seen.add(text)
                _steps_of(surface, owner, inner[1], inner[2], depth + 1, out, seen)
            continue
        elif isinstance(func, ast.Name):
            found = surface.resolve_expr(info, func)
            if isinstance(found, Found) and found.kind == "function" and not found.path.startswith(_SKIP_MODULES):
                step = {"kind": "function", "name": func.id, "path": found.path}
        if step is not None and not any(s["name"] == step["name"] for s in out):
            step["at"] = loc(info, call)
            out.append(step)


def read(surface: StaticSurface) -> dict:
    init = method(surface, ENGINE_CORE, "__init__")
    if init is None:
        return {"error": f"{ENGINE_CORE}.__init__ not found"}
    member, node, info = init
    start = next((s for s in ast.walk(node) if isinstance(s, ast.Assign) and any(
        ast.unparse(t) == "self.model_executor" for t in s.targets)), None)
    if start is None:
        return {"error": "the engine core does not create self.model_executor in __init__"}
    steps: list[dict] = []
    body = [s for s in node.body if s.lineno > start.lineno]
    owner = surface.lookup(ENGINE_CORE)
    for stmt in body:
        _steps_of(surface, owner, stmt, info, 0, steps, set())
    return {"engine_core": loc(member), "executor_created_at": loc(info, start), "steps": steps}
