"""Facts about what a vLLM build's code does, read from its source for the semantic probes.

Each module reads one concern (reply shapes, the execution protocol, block hashing, model
conventions, the start-up sequence) from a ``StaticSurface`` and returns plain JSON-able data, so
that the answer is cached per build and the probes stay free of AST walking.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found


def loc(found_or_info, node: ast.AST | None = None) -> str | None:
    """'file:line' for a node of a module (or the location of a Found)."""
    if isinstance(found_or_info, Found):
        return str(found_or_info.location) if found_or_info.location else None
    if found_or_info is None or node is None:
        return None
    return f"{found_or_info.relpath}:{getattr(node, 'lineno', 0)}"


def method(surface: StaticSurface, owner: str | Found, name: str):
    """(Found, FunctionDef, ModuleInfo) of a method along the MRO, or None."""
    found = surface.lookup(owner) if isinstance(owner, str) else owner
    if not isinstance(found, Found) or found.kind != "class":
        return None
    member = surface.member(found, name)
    if not isinstance(member, Found) or not member.handle or member.handle[0] != "method":
        return None
    cls, node = member.handle[1], member.handle[2]
    return member, node, cls.module


def function(surface: StaticSurface, path: str):
    """(Found, FunctionDef, ModuleInfo) of a module-level function, or None."""
    found = surface.lookup(path)
    if not isinstance(found, Found) or not found.handle or found.handle[0] != "def":
        return None
    return found, found.handle[2], found.handle[1]


def find_class(surface: StaticSurface, name: str, prefer: str = "") -> Found | None:
    """A class by its bare name anywhere in the build (the candidate under ``prefer`` first)."""
    candidates = sorted(surface.definitions(name), key=lambda p: (not p.startswith(prefer), len(p)))
    for path in candidates:
        found = surface.lookup(path)
        if isinstance(found, Found) and found.kind == "class":
            return found
    return None


def string_of(node: ast.AST) -> str | None:
    """The text of a string literal, an implicit concatenation, or an f-string (placeholders kept)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values)
    return None


def walk_shallow(node: ast.AST) -> Iterator[ast.AST]:
    """Like ast.walk, without descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        current = stack.pop()
        yield current
        if not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(current))
