"""The execution protocol: can ``execute_model`` return None, and what must follow it."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import loc, method, string_of
from compat.syntax import walk_shallow
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind


@dataclass(frozen=True)
class ProtocolFacts:
    """Whether the model runner's ``execute_model`` can return None so that ``sample_tokens`` must follow
    (``two_phase``), and the error the build raises when it does not."""

    executor: str
    worker: str
    executor_sample_tokens: str | None = None
    error: str | None = None
    model_runner: str | None = None
    execute_model: str | None = None
    returns_none_at: str | None = None
    error_text: str | None = None
    error_at: str | None = None
    two_phase: bool = False


def read(surface: StaticSurface, executor: str, worker: str) -> ProtocolFacts:
    sample = method(surface, executor, "sample_tokens")
    sample_at = loc(sample.found) if sample else None
    worker_found = surface.lookup(worker)
    runner = surface.attribute_type(worker_found, "model_runner") if isinstance(worker_found, Found) else None
    if not isinstance(runner, Found) or runner.kind != FoundKind.CLASS:
        return ProtocolFacts(executor, worker, sample_at, error=f"cannot tell the model runner class of {worker}")
    execute = method(surface, runner, "execute_model")
    if execute is None:
        return ProtocolFacts(executor, worker, sample_at, error=f"{runner.path} has no execute_model",
                             model_runner=runner.path)
    none_returns = [r for r in walk_shallow(execute.node) if isinstance(r, ast.Return) and (
        r.value is None or (isinstance(r.value, ast.Constant) and r.value.value is None))]
    returns_none_at = loc(execute.module, none_returns[0]) if none_returns else None
    error_text = error_at = None
    for sub in ast.walk(execute.node):
        if isinstance(sub, ast.Raise) and isinstance(sub.exc, ast.Call) and sub.exc.args:
            text = string_of(sub.exc.args[0])
            if text and "sample_tokens" in text:
                error_text, error_at = f"{ast.unparse(sub.exc.func)}: {text}", loc(execute.module, sub)
                break
    return ProtocolFacts(executor, worker, sample_at, model_runner=runner.path, execute_model=loc(execute.found),
                         returns_none_at=returns_none_at, error_text=error_text, error_at=error_at,
                         two_phase=bool(returns_none_at and sample_at))


FACT = Fact("protocol", read)
