"""How the build's own code passes a parameter when it calls a callable.

When a build starts requiring a parameter (``Scheduler(block_size=...)``, ``SchedulerConfig(
is_encoder_decoder=...)``), a hand-built pipeline must pass what vLLM itself passes. This fact finds vLLM's
own calls of the callable and the expression each gives the parameter, with the local names it assigned
first substituted one step at a time (``scheduler_block_size`` becomes ``resolve_kv_cache_block_sizes(
kv_cache_config, vllm_config)[0]``). Each variant lists the names a caller must supply and the build's
functions and constants it uses, so a fixer can keep the variants it can bind at the consumer's call site.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import loc
from compat.syntax import FunctionNode, module_name
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found

_MAX_SUBSTITUTIONS = 3


@dataclass(frozen=True)
class Source:
    """One expression vLLM passes for the parameter, over ``names`` (values a caller supplies) and
    ``imports`` (the build's own functions and constants, by the name used and where it is defined)."""

    expression: str
    names: tuple[str, ...]
    imports: tuple[tuple[str, str], ...]
    at: str | None
    """The build's call."""
    steps: int = 0
    """How many local assignments were substituted to reach this expression."""


@dataclass(frozen=True)
class ArgumentFacts:
    callable: str
    parameter: str
    sources: tuple[Source, ...] = ()


def _locals_before(function: FunctionNode, line: int) -> dict[str, ast.expr]:
    """What each local name holds at ``line``: its last simple assignment before it (``a, b = f()`` gives
    ``a`` the expression ``f()[0]``)."""
    found: dict[str, tuple[int, ast.expr]] = {}
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign) or node.lineno >= line or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name):
            values = [(target.id, node.value)]
        elif isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
            values = [(e.id, ast.Subscript(node.value, ast.Constant(i), ast.Load()))
                      for i, e in enumerate(target.elts) if isinstance(e, ast.Name)]
        else:
            continue
        for name, value in values:
            if name not in found or found[name][0] < node.lineno:
                found[name] = (node.lineno, value)
    return {name: value for name, (_, value) in found.items()}


def _substitute(expr: ast.expr, assigned: dict[str, ast.expr]) -> ast.expr | None:
    """``expr`` with every local it reads replaced by the local's value (None when it reads none)."""
    changed = False

    class Replace(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            nonlocal changed
            if isinstance(node.ctx, ast.Load) and node.id in assigned:
                changed = True
                return ast.copy_location(assigned[node.id], node)
            return node

    result = Replace().visit(ast.parse(ast.unparse(expr), mode="eval").body)
    return result if changed else None


def _source(surface: StaticSurface, info: ModuleInfo, expr: ast.expr, at: str | None, steps: int) -> Source:
    names: list[str] = []
    imports: list[tuple[str, str]] = []
    for node in ast.walk(expr):
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            continue
        if node.id in info.bindings:
            found = surface.resolve_expr(info, node)
            if isinstance(found, Found) and (node.id, found.path) not in imports:
                imports.append((node.id, found.path))
                continue
        if not hasattr(builtins, node.id) and node.id not in names:
            names.append(node.id)
    return Source(ast.unparse(expr), tuple(names), tuple(imports), at, steps)


def _calls_it(surface: StaticSurface, info: ModuleInfo, call: ast.Call, target: str, local_names: set[str]) -> bool:
    func = call.func
    bare = target.rsplit(".", 1)[-1]
    if isinstance(func, ast.Name) and func.id in local_names:
        # ``Scheduler = vllm_config.scheduler_config.get_scheduler_cls()`` then ``Scheduler(...)``.
        return func.id == bare
    if not isinstance(func, (ast.Name, ast.Attribute)) or ast.unparse(func).rsplit(".", 1)[-1] != bare:
        return False
    found = surface.resolve_expr(info, func)
    return isinstance(found, Found) and found.path == target


def read(surface: StaticSurface, callable_path: str, parameter: str) -> ArgumentFacts:
    """Every expression the build's own calls of ``callable_path`` pass as ``parameter``."""
    found = surface.lookup(callable_path)
    target = found.path if isinstance(found, Found) else callable_path
    bare = target.rsplit(".", 1)[-1]
    pattern = re.compile(rb"\b" + re.escape(parameter.encode()) + rb"\s*=")
    sources: list[Source] = []
    root = surface.index.root
    for path, data in surface.index.texts():
        if bare.encode() not in data or not pattern.search(data):
            continue
        info = surface.index.module(module_name(root, path))
        if info is None:
            continue
        for function in ast.walk(info.tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            local_names = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            for call in ast.walk(function):
                if not isinstance(call, ast.Call) or not any(k.arg == parameter for k in call.keywords):
                    continue
                if not _calls_it(surface, info, call, target, local_names):
                    continue
                expr: ast.expr | None = next(k.value for k in call.keywords if k.arg == parameter)
                assigned = _locals_before(function, call.lineno)
                for steps in range(_MAX_SUBSTITUTIONS + 1):
                    if expr is None:
                        break
                    source = _source(surface, info, expr, loc(info, call), steps)
                    if all(s.expression != source.expression for s in sources):
                        sources.append(source)
                    expr = _substitute(expr, assigned)
    return ArgumentFacts(callable_path, parameter, tuple(sources))


FACT = Fact("arguments", read)
