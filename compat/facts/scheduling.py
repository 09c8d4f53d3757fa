"""What a build's scheduler may do to a prompt between the steps a hand-written loop runs.

A loop that finishes every request a step scheduled (speculators 0.3.0) is right only where a step computes
whole prompts, in the order they were added, and nothing it scheduled is taken back. The build's scheduler says
whether that holds: chunked prefill on by default splits a prompt at the step's token budget (vLLM 0.11.1 on);
without chunked prefill vLLM 0.11.0 leaves a prompt that does not fit the step for later and runs the prompts
after it first (``skipped_waiting_requests``); a running request is preempted when the KV cache is full and
computed again from its start; and from some build on a preempted request is not resumed until the output of its
last step was handed back (``update_from_output``), so a loop that never hands outputs back stalls.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import declared, loc, method
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found


@dataclass(frozen=True)
class SchedulingFacts:
    scheduler: str | None
    """Where the scheduler's ``schedule`` is (None: the build has no such scheduler)."""
    chunked_prefill_default: str | None
    """``SchedulerConfig.enable_chunked_prefill``'s declared default (``True``; ``None`` in vLLM 0.11.0)."""
    chunked_prefill_at: str | None
    skips_ahead_at: str | None
    """Where ``schedule`` leaves a prompt that does not fit the step's budget for later and goes on with the
    prompts after it (chunked prefill off); None where it stops there instead."""
    skips_ahead_text: str | None
    preempts_at: str | None
    """Where ``schedule`` preempts a running request when the KV cache cannot hold its next tokens."""
    holds_preempted_at: str | None
    """Where ``schedule`` keeps a preempted request waiting until its last step's output was handed back."""
    holds_preempted_text: str | None
    update_from_output_at: str | None


def _first(nodes, predicate) -> ast.AST | None:
    return next((n for n in nodes if predicate(n)), None)


def _exits(node: ast.If) -> str | None:
    """``continue`` or ``break`` when the branch ends a turn of the loop around it that way."""
    for stmt in node.body:
        if isinstance(stmt, ast.Continue):
            return "continue"
        if isinstance(stmt, ast.Break):
            return "break"
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and "skip" in ast.unparse(stmt.value.func):
            return "continue"
    return None


def read(surface: StaticSurface, scheduler: str, config: str) -> SchedulingFacts:
    code = method(surface, scheduler, "schedule")
    update = method(surface, scheduler, "update_from_output")
    found = surface.lookup(config)
    chunked = declared(surface, found, "enable_chunked_prefill") if isinstance(found, Found) else None
    default, declared_at = (chunked.default, chunked.at) if chunked is not None else (None, None)
    if code is None:
        return SchedulingFacts(None, default, declared_at, None, None, None, None, None,
                               loc(update.found) if update else None)
    nodes = list(ast.walk(code.node))
    ifs = [n for n in nodes if isinstance(n, ast.If)]
    skip = _first(ifs, lambda n: "chunked_prefill" in ast.unparse(n.test) and "budget" in ast.unparse(n.test)
                  and _exits(n) == "continue")
    preempt = _first(nodes, lambda n: isinstance(n, ast.Call) and (
        ast.unparse(n.func).endswith("_preempt_request") or ast.unparse(n.func).endswith("preempted_reqs.append")))
    hold = _first(ifs, lambda n: "stale_output" in ast.unparse(n.test) and _exits(n) == "continue")
    return SchedulingFacts(
        scheduler=loc(code.found),
        chunked_prefill_default=default,
        chunked_prefill_at=declared_at,
        skips_ahead_at=loc(code.module, skip) if skip else None,
        skips_ahead_text=f"if {ast.unparse(skip.test)}: ... continue" if isinstance(skip, ast.If) else None,
        preempts_at=loc(code.module, preempt) if preempt else None,
        holds_preempted_at=loc(code.module, hold) if hold else None,
        holds_preempted_text=f"if {ast.unparse(hold.test)}: skip it" if isinstance(hold, ast.If) else None,
        update_from_output_at=loc(update.found) if update else None)


FACT = Fact("scheduling", read)
