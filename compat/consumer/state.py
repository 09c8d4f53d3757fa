"""What each method of a consumer class does with the object's own state: the ``self.x`` it writes and reads.

An override vLLM stops calling loses what it wrote; when it was the only method writing ``self.x`` after
construction and another method still reads it, that method now reads a stale value (``probes/patches.py``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TypeGuard

from compat.syntax import FunctionNode

MUTATORS = frozenset({"append", "extend", "update", "clear", "insert", "pop", "setdefault", "add", "discard",
                      "remove"})
"""Methods that change their object in place (besides torch's, which end in ``_``: ``copy_``, ``fill_``)."""


@dataclass(frozen=True)
class MethodState:
    method: str
    writes: tuple[str, ...]
    """``self.x = v``, ``self.x += v``, ``self.x[i] = v``, ``self.x.copy_(v)``, ``self.x.append(v)``."""
    reads: tuple[str, ...]
    """``self.x`` read anywhere else in the method."""


def method_state(name: str, node: FunctionNode) -> MethodState | None:
    """The attributes of ``self`` that method ``node`` writes and reads; None for a static method."""
    params = node.args.posonlyargs + node.args.args
    if not params or any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
        return None
    me = params[0].arg
    writes: dict[str, None] = {}
    written: set[int] = set()
    for sub in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
            targets = [sub.target]
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and _mutates(sub.func.attr):
            targets = [sub.func.value]
        for target in targets:
            for part in ast.walk(target) if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                inner = part.value if isinstance(part, ast.Subscript) else part
                if _own(inner, me):
                    writes[inner.attr] = None
                    written.add(id(inner))
    reads = {sub.attr: None for sub in ast.walk(node)
             if _own(sub, me) and id(sub) not in written and isinstance(sub.ctx, ast.Load)}
    return MethodState(name, tuple(writes), tuple(reads))


def class_state(methods: dict[str, FunctionNode]) -> tuple[MethodState, ...]:
    return tuple(state for name, node in sorted(methods.items()) if (state := method_state(name, node)) is not None)


def _own(node: ast.AST, me: str) -> TypeGuard[ast.Attribute]:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == me


def _mutates(method: str) -> bool:
    return method in MUTATORS or method.endswith("_") and not method.startswith("_")
