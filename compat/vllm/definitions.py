"""What the static reading keeps about each name it resolves, so that later questions about it need no search.

A ``Found`` made by the static reading carries a ``Definition`` as its handle: the module, the node that
defines the name and, for members of a class, the class (and for an instance attribute, the method that
assigns it). ``ClassModel`` is a class with its resolved bases and linearised MRO. ``Reading`` is what the
readers of signatures, classes and types (``callables``, ``classes``, ``type_inference``) ask the static reading.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from compat.signature import Signature
from compat.syntax import FunctionNode
from compat.vllm.modules import ModuleInfo
from compat.vllm.surface import Found, Lookup, Missing, Unresolved


@dataclass(eq=False)
class ClassModel:
    """A class of the build: its node, module, resolved bases and linearised MRO."""

    found: Found
    module: ModuleInfo
    node: ast.ClassDef
    bases: list[Found | Unresolved | Missing]
    mro: list[ClassModel] | None = None
    external: list[str] | None = None
    members: dict[str, Found | ast.stmt] | None = field(default=None, repr=False)
    """The names the class body itself defines, each with its last definition (a ``Found`` once asked for):
    built on the first question, so each member is one dict lookup, not a pass over the body."""
    assigned: SelfAssignments | None = field(default=None, repr=False)
    """``self.<name> = ...`` in the class's own methods, read as far as the names asked for need."""
    constructor: Signature | Unresolved | None = field(default=None, repr=False)
    """The signature ``inspect.signature(cls)`` gives, once read (``compat.vllm.callables``)."""


class SelfAssignments:
    """The first ``self.<name> = ...`` (plain, annotated or augmented) of each name in a class's own methods, in
    the order of the methods and of ``ast.walk`` within one, with its method. The walk goes only as far as the
    names asked for need (a runner's methods run to thousands of lines) and is never made twice."""

    def __init__(self, assignments: Iterator[tuple[str, ast.stmt, FunctionNode]]) -> None:
        self._walk = assignments
        self._first: dict[str, tuple[ast.stmt, FunctionNode]] = {}

    def first(self, name: str) -> tuple[ast.stmt, FunctionNode] | None:
        for attr, stmt, method in self._walk:
            self._first.setdefault(attr, (stmt, method))
            if attr == name:
                break
        return self._first.get(name)


@dataclass(frozen=True, eq=False)
class Definition:
    """Where a name is defined: a module (``node`` is its tree), a top-level statement, a statement of a class
    body (``owner``), or an instance attribute (``owner``, and ``method`` unless it comes from ``__slots__``)."""

    module: ModuleInfo
    node: ast.AST
    owner: ClassModel | None = None
    method: FunctionNode | None = None

    @property
    def function(self) -> FunctionNode | None:
        """The def, when the name is a function or a method."""
        return self.node if isinstance(self.node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def definition(found: Found) -> Definition | None:
    """The static definition behind a ``Found`` (None for external names, runtime objects and memo answers)."""
    return found.handle if isinstance(found.handle, Definition) else None


class Reading(Protocol):
    """The static reading's questions that its readers (signatures, classes, types) ask back."""

    def class_model(self, found: Found) -> ClassModel | None: ...

    def mro(self, model: ClassModel, depth: int = 0) -> tuple[list[ClassModel], list[str]]: ...

    def own_member(self, cls: ClassModel, name: str) -> Found | None: ...

    def resolve_expr(self, info: ModuleInfo, expr: ast.expr, depth: int = 0, types: bool = False) -> Lookup: ...

    def module_lookup(self, module: str, name: str, depth: int = 0) -> Lookup: ...

    def member(self, owner: Found, name: str) -> Lookup: ...
