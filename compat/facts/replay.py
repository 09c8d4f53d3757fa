"""The engine core's own code for a start-up step, as statements a pipeline outside the engine core can run.

``read(surface, first, last)`` finds the method of ``EngineCore`` whose statements call ``first`` and then
``last`` (``resolve_kv_cache_layout`` ... ``set_kv_cache_layout``), takes those statements and the earlier
assignments they read (``kv_cache_specs = self.model_executor.get_kv_cache_specs()``), and rewrites the
engine core's objects as parameters: ``self.model_executor`` becomes ``executor``, ``self.vllm_config``
becomes ``vllm_config``. Anything else of ``self`` makes the step unsupported (with the reason).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import loc
from compat.facts.startup import ENGINE_CORE
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found

OBJECTS = {"self.model_executor": "executor", "self.vllm_config": "vllm_config"}


@dataclass(frozen=True)
class Replay:
    statements: tuple[str, ...] = ()
    imports: tuple[tuple[str, str], ...] = ()
    """The build's functions and constants the statements use: (name used, dotted path)."""
    executor_methods: tuple[str, ...] = ()
    config_methods: tuple[str, ...] = ()
    at: str | None = None
    unsupported: str | None = None


def _calls(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Call) and (getattr(n.func, "id", None) == name or
                                           getattr(n.func, "attr", None) == name) for n in ast.walk(node))


def _stored(nodes: list[ast.stmt]) -> set[str]:
    return {n.id for s in nodes for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded(nodes: list[ast.stmt]) -> list[str]:
    seen: list[str] = []
    for s in nodes:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in seen:
                seen.append(n.id)
    return seen


class _Rewrite(ast.NodeTransformer):
    def __init__(self) -> None:
        self.unsupported: list[str] = []

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        text = ast.unparse(node)
        if text in OBJECTS:
            return ast.copy_location(ast.Name(OBJECTS[text], ast.Load()), node)
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            self.unsupported.append(text)
        return self.generic_visit(node)


def read(surface: StaticSurface, first: str, last: str) -> Replay:
    owner = surface.lookup(ENGINE_CORE)
    model = surface.class_model(owner) if isinstance(owner, Found) else None
    if model is None:
        return Replay(unsupported=f"cannot read {ENGINE_CORE}")
    for cls in surface.mro(model)[0]:
        for method in (s for s in cls.node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))):
            body = method.body
            starts = [i for i, s in enumerate(body) if _calls(s, first)]
            ends = [i for i, s in enumerate(body) if _calls(s, last)]
            if not starts or not ends or ends[-1] < starts[0]:
                continue
            return _replay(surface, cls.module, body, starts[0], ends[-1], method)
    return Replay(unsupported=f"{ENGINE_CORE} does not call {first} and then {last} in one method")


def _replay(surface: StaticSurface, info, body: list[ast.stmt], start: int, end: int, method) -> Replay:
    chosen = list(range(start, end + 1))
    # Earlier assignments the chosen statements read, nearest first, until nothing new is read.
    while True:
        needed = set(_loaded([body[i] for i in chosen])) - _stored([body[i] for i in chosen])
        extra = [i for i in range(start) if i not in chosen and isinstance(body[i], ast.Assign)
                 and _stored([body[i]]) & needed]
        if not extra:
            break
        chosen = sorted(set(chosen) | {extra[-1]})
    rewrite = _Rewrite()
    statements = [rewrite.visit(ast.parse(ast.unparse(body[i])).body[0]) for i in chosen]
    if rewrite.unsupported:
        return Replay(at=loc(info, body[start]), unsupported="the step reads the engine core's own state: "
                      + ", ".join(sorted(set(rewrite.unsupported))))
    imports: list[tuple[str, str]] = []
    free = []
    for name in set(_loaded(statements)) - _stored(statements) - {"executor", "vllm_config"} - set(dir(builtins)):
        found = surface.resolve_expr(info, ast.Name(name, ast.Load()))
        if isinstance(found, Found) and name in info.bindings:
            imports.append((name, found.path))
        else:
            free.append(name)
    comprehension = {n.id for s in statements for c in ast.walk(s) if isinstance(c, ast.comprehension)
                     for n in ast.walk(c.target) if isinstance(n, ast.Name)}
    free = [n for n in free if n not in comprehension]
    if free:
        return Replay(at=loc(info, body[start]), unsupported=f"the step reads {', '.join(sorted(free))}, which the "
                      f"engine core computes elsewhere in {method.name}")
    methods: dict[str, list[str]] = {"executor": [], "vllm_config": []}
    for s in statements:
        for n in ast.walk(s):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                    and n.func.value.id in methods and n.func.attr not in methods[n.func.value.id]:
                methods[n.func.value.id].append(n.func.attr)
    return Replay(tuple(ast.unparse(s) for s in statements), tuple(sorted(imports)), tuple(methods["executor"]),
                  tuple(methods["vllm_config"]), loc(info, body[start]))


FACT = Fact("replay", read)
