"""A consumer's own step loop: code that drives vLLM's scheduler and executor by hand, read from its body.

speculators 0.3.0's generator runs::

    while (scheduler_output := self.scheduler.schedule()).total_num_scheduled_tokens > 0:
        self.executor.execute_model(scheduler_output)
        for req_id in scheduler_output.num_scheduled_tokens:
            self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)

What such a loop does with a step decides whether its data is right on a build: it finishes every request the
step scheduled (a prompt the scheduler split across steps, or preempted, loses its rows), it never hands the
step's output back (``update_from_output``), and it stops at the first step with nothing scheduled. The probe
``steps`` judges that against what the build's scheduler may do to a prompt; a fixer rewrites the loop.
"""

from __future__ import annotations

import ast

from compat.consumer.index import ConsumerModule
from compat.consumer.result import Finishes, StepLoop
from compat.location import Location
from compat.syntax import walk_shallow

LOGGING = ("debug", "info", "warning", "warn", "error", "exception", "critical", "log")


def _scheduled_call(test: ast.expr) -> tuple[ast.Call, str | None] | None:
    """The ``<scheduler>.schedule()`` call a loop's test makes, and the name its output is bound to."""
    for node in ast.walk(test):
        if isinstance(node, ast.NamedExpr) and isinstance(node.value, ast.Call) and _is_schedule(node.value):
            return node.value, node.target.id
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and _is_schedule(node):
            return node, None
    return None


def _is_schedule(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "schedule"


def _receiver(call: ast.Call) -> str:
    """The source of what a method call is made on (``self.scheduler`` of ``self.scheduler.schedule()``)."""
    return ast.unparse(call.func.value) if isinstance(call.func, ast.Attribute) else ""


def _method_calls(body: list[ast.stmt], name: str) -> list[ast.Call]:
    return [n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == name]


def _finishes(body: list[ast.stmt], scheduler: str, output: str | None) -> tuple[Finishes, ast.Call | None]:
    """How the loop finishes requests (``scheduled``: by iterating the step's ``num_scheduled_tokens`` or
    ``scheduled_*`` ids), and the call that finishes them."""
    calls = [c for c in _method_calls(body, "finish_requests") if _receiver(c) == scheduler]
    if not calls:
        return Finishes.NONE, None
    loops = [n for stmt in body for n in ast.walk(stmt) if isinstance(n, (ast.For, ast.comprehension))]
    for call in calls:
        ids = ast.unparse(call.args[0]) if call.args else ""
        for loop in loops:
            source = ast.unparse(loop.iter)
            target = ast.unparse(loop.target)
            if output and source.startswith(f"{output}.") and "num_scheduled_tokens" in source and target in ids:
                return Finishes.SCHEDULED, call
        if output and ids.startswith(f"{output}.") and "num_scheduled_tokens" in ids:
            return Finishes.SCHEDULED, call
    return Finishes.OTHER, calls[0]


def _other_statements(loop: ast.While, executes: ast.Call | None, finish: ast.Call | None) -> tuple[str, ...]:
    """Statements of the loop body that are neither its step, its finishing, a counter nor a log call: a fixer
    that replaces the loop must not drop them."""
    kept = {id(n) for n in (executes, finish) if n is not None}
    others = []
    for stmt in loop.body:
        inner = {id(n) for n in ast.walk(stmt)}
        if kept & inner:
            if isinstance(stmt, ast.For) and len(stmt.body) == 1 and id(finish) in inner:
                continue
            if isinstance(stmt, ast.Expr):
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                continue
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            continue  # a step counter
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(
                stmt.value.func, ast.Attribute) and stmt.value.func.attr in LOGGING:
            continue
        elif isinstance(stmt, ast.Pass):
            continue
        others.append(ast.unparse(stmt).splitlines()[0][:120])
    return tuple(others)


def step_loops(source: ConsumerModule) -> list[StepLoop]:
    """Every ``while`` loop of the module whose test runs a scheduler step (``<x>.schedule()``)."""
    found = []
    functions = [n for n in ast.walk(source.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in functions:
        for loop in walk_shallow(function):
            if not isinstance(loop, ast.While):
                continue
            scheduled = _scheduled_call(loop.test)
            if scheduled is None:
                continue
            call, output = scheduled
            scheduler = _receiver(call)
            executes = next((c for c in _method_calls(loop.body, "execute_model")), None)
            finishes, finish = _finishes(loop.body, scheduler, output)
            updates = any(_receiver(c) == scheduler
                          for c in _method_calls(loop.body, "update_from_output"))
            found.append(StepLoop(
                function=f"{source.module}.{function.name}", location=Location(source.relpath, loop.lineno),
                end_line=loop.end_lineno or loop.lineno, scheduler=scheduler,
                schedule=Location(source.relpath, call.lineno), output=output or "",
                executor=_receiver(executes) if executes is not None else "",
                execute=Location(source.relpath, executes.lineno) if executes is not None else None,
                finishes=finishes, finish=Location(source.relpath, finish.lineno) if finish is not None else None,
                finish_status=ast.unparse(finish.args[1]) if finish is not None and len(finish.args) > 1 else "",
                updates=updates, stops_when_idle="total_num_scheduled_tokens" in ast.unparse(loop.test),
                others=_other_statements(loop, executes, finish)))
    return found
