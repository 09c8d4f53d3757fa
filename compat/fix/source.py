"""Small readings of the consumer's source that fixers need beyond the scan: how a name is imported, which
call encloses a call, the statements around a place (with ``ast``; edits use LibCST)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def imported_as(root: Path, file: str, line: int, name: str) -> str | None:
    """The local name ``from m import name [as alias]`` on ``line`` binds (None: no such import there)."""
    for node in ast.walk(parsed(root / file)):
        if isinstance(node, ast.ImportFrom) and node.lineno == line:
            for alias in node.names:
                if alias.name == name:
                    return alias.asname or alias.name
    return None


def calls_at(root: Path, file: str, line: int) -> list[tuple[ast.Call, ast.Call | None]]:
    """Every call starting on ``line``, with the call whose arguments hold it (None at the top)."""
    found: list[tuple[ast.Call, ast.Call | None]] = []

    def walk(node: ast.AST, enclosing: ast.Call | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                if child.lineno == line:
                    found.append((child, enclosing))
                walk(child, child)
            else:
                walk(child, enclosing if isinstance(child, (ast.keyword, ast.expr)) else None)

    walk(parsed(root / file), None)
    return found


def call_of(root: Path, file: str, line: int, callee: str) -> tuple[ast.Call, ast.Call | None] | None:
    """The call of ``callee`` (as written: ``SchedulerConfig``, ``self.executor.execute_model``) on ``line``."""
    for call, enclosing in calls_at(root, file, line):
        if ast.unparse(call.func) == callee or ast.unparse(call.func).endswith("." + callee):
            return call, enclosing
    return None


def function_of(root: Path, file: str, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose body holds ``line``."""
    best = None
    for node in ast.walk(parsed(root / file)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (
                node.end_lineno or node.lineno):
            if best is None or node.lineno > best.lineno:
                best = node
    return best


def statement_at(body: list[ast.stmt], line: int) -> int | None:
    """The index in ``body`` of the statement that holds ``line``."""
    return next((i for i, s in enumerate(body) if s.lineno <= line <= (s.end_lineno or s.lineno)), None)


def segment(root: Path, file: str, node: ast.AST) -> str:
    return ast.get_source_segment((root / file).read_text(encoding="utf-8"), node) or ast.unparse(node)
