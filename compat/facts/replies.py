"""What ``collective_rpc`` returns with and without ``unique_reply_rank``, read from the executor's code."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from enum import StrEnum

from compat.facts import Fact
from compat.facts.reading import find_class, loc, method
from compat.vllm.static import StaticSurface

RANK = "unique_reply_rank"


class ReplyShape(StrEnum):
    """What ``collective_rpc`` returns."""

    LIST = "list"
    """A list with one entry per worker."""
    SINGLE = "single"
    """The chosen rank's value itself."""


@dataclass(frozen=True)
class RpcReplies:
    """What one executor's ``collective_rpc`` returns, with and without a rank, and where that is decided."""

    executor: str
    error: str | None = None
    location: str | None = None
    accepts_rank: bool = False
    without_rank: ReplyShape = ReplyShape.LIST
    with_rank: ReplyShape | None = None
    evidence: str | None = None
    text: str | None = None
    single_value_param: str | None = None


@dataclass(frozen=True)
class ReplyFacts:
    """The audited executor's replies, and the single-process executor's for comparison."""

    executor: str
    multiproc: RpcReplies
    uniproc: RpcReplies | None = None


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


def _shape(expr: ast.expr) -> ReplyShape:
    single = isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant)
    return ReplyShape.SINGLE if single else ReplyShape.LIST


def read_collective_rpc(surface: StaticSurface, executor: str) -> RpcReplies:
    """The reply shapes of one executor class's ``collective_rpc``."""
    found = method(surface, executor, "collective_rpc")
    if found is None:
        return RpcReplies(executor, error=f"{executor} has no collective_rpc method")
    node, info = found.node, found.module
    params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    result = RpcReplies(executor, location=loc(found.found), accepts_rank=RANK in params, evidence=loc(found.found),
                        single_value_param="single_value" if "single_value" in params else None)
    if RANK not in params:
        return result
    aliases = {RANK}
    for sub in ast.walk(node):  # output_rank = unique_reply_rank (in any branch)
        if isinstance(sub, ast.Assign) and _names_in(sub.value) & aliases and isinstance(sub.value, ast.Name):
            aliases.update(t.id for t in sub.targets if isinstance(t, ast.Name))
    result = replace(result, with_rank=ReplyShape.LIST)
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
                returns = [r.value for r in branch if isinstance(r, ast.Return) and r.value is not None]
                if returns:
                    decided = _shape(returns[0])
        if decided is not None:
            return replace(result, with_rank=decided, evidence=loc(info, sub), text=ast.unparse(sub)[:200])
    return result


def read(surface: StaticSurface, executor: str) -> ReplyFacts:
    """The executor's reply shapes, and the single-process executor's equivalent for comparison."""
    uniproc = find_class(surface, "UniProcExecutor", prefer="vllm.v1")
    return ReplyFacts(executor, read_collective_rpc(surface, executor),
                      read_collective_rpc(surface, uniproc.path) if uniproc is not None else None)


FACT = Fact("replies", read)
