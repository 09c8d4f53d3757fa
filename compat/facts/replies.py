"""What ``collective_rpc`` returns with and without ``unique_reply_rank``, read from the executor's code."""

from __future__ import annotations

import ast

from compat.facts import find_class, loc, method
from compat.vllm.static import StaticSurface

RANK = "unique_reply_rank"


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _branch_when_set(test: ast.expr, aliases: set[str]) -> bool | None:
    """True: the test holds when a rank is given; False: it holds when none is; None: not about the rank."""
    if not (_names_in(test) & aliases):
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        if isinstance(test.ops[0], ast.IsNot):
            return True
        if isinstance(test.ops[0], ast.Is):
            return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _branch_when_set(test.operand, aliases)
        return None if inner is None else not inner
    if isinstance(test, ast.Name):
        return True
    return None


def _shape(expr: ast.expr) -> str:
    return "single" if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) else "list"


def read_collective_rpc(surface: StaticSurface, executor: str) -> dict:
    """{'accepts_rank', 'with_rank', 'without_rank', 'evidence', 'text', 'location'} for one executor class."""
    found = method(surface, executor, "collective_rpc")
    if found is None:
        return {"error": f"{executor} has no collective_rpc method"}
    member, node, info = found
    params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    result = {"location": loc(member), "accepts_rank": RANK in params, "without_rank": "list",
              "with_rank": None, "evidence": loc(member), "text": None,
              "single_value_param": "single_value" if "single_value" in params else None}
    if RANK not in params:
        return result
    aliases = {RANK}
    for sub in ast.walk(node):  # output_rank = unique_reply_rank (in any branch)
        if isinstance(sub, ast.Assign) and _names_in(sub.value) & aliases and isinstance(sub.value, ast.Name):
            aliases.update(t.id for t in sub.targets if isinstance(t, ast.Name))
    result["with_rank"] = "list"
    for sub in ast.walk(node):
        decided = None
        if isinstance(sub, ast.Return) and isinstance(sub.value, ast.IfExp):
            when_set = _branch_when_set(sub.value.test, aliases)
            if when_set is not None:
                decided = _shape(sub.value.body if when_set else sub.value.orelse)
        elif isinstance(sub, ast.If):
            when_set = _branch_when_set(sub.test, aliases)
            if when_set is not None:
                branch = sub.body if when_set else sub.orelse
                returns = [r for r in branch if isinstance(r, ast.Return) and r.value is not None]
                if returns:
                    decided = _shape(returns[0].value)
        if decided is not None:
            result["with_rank"] = decided
            result["evidence"] = loc(info, sub)
            result["text"] = ast.unparse(sub)[:200]
            break
    return result


def read(surface: StaticSurface, executor: str) -> dict:
    """The executor's reply shapes, and the single-process executor's equivalent for comparison."""
    facts = {"executor": executor, "multiproc": read_collective_rpc(surface, executor)}
    uniproc = find_class(surface, "UniProcExecutor", prefer="vllm.v1")
    if uniproc is not None:
        facts["uniproc"] = read_collective_rpc(surface, uniproc.path) | {"class": uniproc.path}
    return facts
