"""The execution protocol: can ``execute_model`` return None, and what must follow it."""

from __future__ import annotations

import ast

from compat.facts import loc, method, string_of, walk_shallow
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found


def read(surface: StaticSurface, executor: str, worker: str) -> dict:
    facts: dict = {"executor": executor, "worker": worker}
    sample = method(surface, executor, "sample_tokens")
    facts["executor_sample_tokens"] = loc(sample[0]) if sample else None
    worker_found = surface.lookup(worker)
    runner = surface.attribute_type(worker_found, "model_runner") if isinstance(worker_found, Found) else None
    if not isinstance(runner, Found) or runner.kind != "class":
        facts["error"] = f"cannot tell the model runner class of {worker}"
        return facts
    facts["model_runner"] = runner.path
    execute = method(surface, runner, "execute_model")
    if execute is None:
        facts["error"] = f"{runner.path} has no execute_model"
        return facts
    member, node, info = execute
    facts["execute_model"] = loc(member)
    none_returns = [r for r in walk_shallow(node) if isinstance(r, ast.Return) and (
        r.value is None or (isinstance(r.value, ast.Constant) and r.value.value is None))]
    facts["returns_none_at"] = loc(info, none_returns[0]) if none_returns else None
    facts["error_text"] = facts["error_at"] = None
    for sub in ast.walk(node):
        if isinstance(sub, ast.Raise) and isinstance(sub.exc, ast.Call) and sub.exc.args:
            text = string_of(sub.exc.args[0])
            if text and "sample_tokens" in text:
                facts["error_text"] = f"{ast.unparse(sub.exc.func)}: {text}"
                facts["error_at"] = loc(info, sub)
                break
    facts["two_phase"] = bool(facts["returns_none_at"] and facts["executor_sample_tokens"])
    return facts
