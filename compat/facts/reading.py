"""Helpers for the fact readers: where a def of the build is, and small readings of its syntax."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.syntax import FunctionNode
from compat.vllm.definitions import definition
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found


@dataclass(frozen=True)
class Code:
    """A def of the build: the Found that names it, its node and the module it is in."""

    found: Found
    node: FunctionNode
    module: ModuleInfo


def loc(found_or_info: Found | ModuleInfo | None, node: ast.AST | None = None) -> str | None:
    """'file:line' for a node of a module (or the location of a Found)."""
    if isinstance(found_or_info, Found):
        return str(found_or_info.location) if found_or_info.location else None
    if found_or_info is None or node is None:
        return None
    return f"{found_or_info.relpath}:{getattr(node, 'lineno', 0)}"


def method(surface: StaticSurface, owner: str | Found, name: str) -> Code | None:
    """A method along the MRO of a class (given by path or Found), or None."""
    found = surface.lookup(owner) if isinstance(owner, str) else owner
    if not isinstance(found, Found) or found.kind != "class":
        return None
    member = surface.member(found, name)
    defined = definition(member) if isinstance(member, Found) else None
    if defined is None or defined.owner is None or defined.function is None:
        return None
    return Code(member, defined.function, defined.module)  # type: ignore[arg-type]


def function(surface: StaticSurface, path: str) -> Code | None:
    """A module-level function, or None."""
    found = surface.lookup(path)
    defined = definition(found) if isinstance(found, Found) else None
    if defined is None or defined.owner is not None or defined.function is None:
        return None
    return Code(found, defined.function, defined.module)  # type: ignore[arg-type]


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


