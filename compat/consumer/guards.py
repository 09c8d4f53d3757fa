"""Conditions under which consumer code runs, reduced to what the audit can evaluate.

The scan turns ``if Version(vllm.__version__) >= Version("0.12"):`` (or a helper the consumer
defines for it, or ``hasattr(some_vllm_module, "name")``) into a small expression tree; the
audit evaluates it for the build it reads. ``None`` means "cannot tell".
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from packaging.version import InvalidVersion, Version

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
    "!=": operator.ne,
}


class VersionForm(StrEnum):
    """How the consumer holds or compares the audited build's version (``VersionValue.form``, ``VersionCmp.mode``)."""

    VERSION = "version"
    """A parsed version (``Version(vllm.__version__)``), compared as a version."""
    TUPLE = "tuple"
    """A release tuple (``__version_tuple__``), compared on the tuple's width."""
    STRING = "string"
    """The raw string, compared as a string."""
    PREFIX = "prefix"
    """The raw string's prefix (``vllm.__version__.startswith("0.11")``): comparisons only."""


@dataclass(frozen=True)
class GuardExpr:
    """Base of the guard expression tree."""


@dataclass(frozen=True)
class VersionCmp(GuardExpr):
    """``<audited version> op other``, compared as ``mode`` says."""

    op: str
    other: str
    mode: VersionForm = VersionForm.VERSION


@dataclass(frozen=True)
class HasAttr(GuardExpr):
    """``hasattr(<vLLM object>, name)``. ``instance``: asked of an instance (``hasattr(self, "x")`` in a subclass
    of the vLLM class ``symbol``), which code at run time may give the attribute, so only its presence in the
    build decides (absent: not known). ``not_none``: ``getattr(obj, name, None) is not None``, which a present
    attribute holding None would make false (only a def, a class or a module is surely not None)."""

    symbol: str
    name: str
    instance: bool = False
    not_none: bool = False


@dataclass(frozen=True)
class HasParam(GuardExpr):
    """``"name" in inspect.signature(<vLLM callable>).parameters``: the build's callable ``symbol`` declares a
    parameter of that name."""

    symbol: str
    name: str


@dataclass(frozen=True)
class Imports(GuardExpr):
    """True when every one of these dotted vLLM names can be imported from the build."""

    symbols: tuple[str, ...]


@dataclass(frozen=True)
class Not(GuardExpr):
    item: GuardExpr


@dataclass(frozen=True)
class All(GuardExpr):
    items: tuple[GuardExpr, ...]


@dataclass(frozen=True)
class Any_(GuardExpr):
    items: tuple[GuardExpr, ...]


@dataclass(frozen=True)
class Const(GuardExpr):
    value: bool


@dataclass(frozen=True)
class Opaque(GuardExpr):
    text: str


@dataclass(frozen=True)
class Unevaluated(GuardExpr):
    """A test of the build's version the scan could not evaluate (a helper it cannot run): code under it is
    neither run nor skipped for certain, so its findings cannot be ``broken``."""

    text: str
    reason: str


def involves_target(expr: GuardExpr) -> bool:
    """Whether the condition depends on the audited build at all."""
    if isinstance(expr, (VersionCmp, HasAttr, HasParam, Imports, Unevaluated)):
        return True
    if isinstance(expr, Not):
        return involves_target(expr.item)
    if isinstance(expr, (All, Any_)):
        return any(involves_target(i) for i in expr.items)
    return False


def _parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


BuildQuery = Callable[[GuardExpr], "bool | None"]
"""Answers a leaf that needs the build's code (``HasAttr``, ``HasParam``, ``Imports``): True, False, or None."""


def evaluate(expr: GuardExpr, version: str | None, lookup: BuildQuery | None = None) -> bool | None:
    """True / False for the audited build, or None when it cannot be told.

    ``lookup`` answers the leaves that need the build's code (``HasAttr``, ``Imports``).
    """
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, (Opaque, Unevaluated)):
        return None
    if isinstance(expr, Not):
        inner = evaluate(expr.item, version, lookup)
        return None if inner is None else not inner
    if isinstance(expr, All):
        results = [evaluate(i, version, lookup) for i in expr.items]
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if isinstance(expr, Any_):
        results = [evaluate(i, version, lookup) for i in expr.items]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if isinstance(expr, (HasAttr, HasParam, Imports)):
        return lookup(expr) if lookup else None
    if isinstance(expr, VersionCmp):
        if version is None:
            return None
        if expr.mode == VersionForm.PREFIX:
            result = version.startswith(expr.other)
            return result if expr.op == "==" else not result
        mine, other = _parse_version(version), _parse_version(expr.other)
        if mine is None or other is None:
            return None
        if expr.mode == VersionForm.TUPLE:
            width = len(other.release)
            return _OPS[expr.op](mine.release[:width], other.release)
        # A local build ("0.32.0+cpu") compares as its public release.
        return _OPS[expr.op](Version(mine.public), other)
    return None


_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def simplify(expr: GuardExpr) -> GuardExpr:
    """The same test, written shorter: constants that decide nothing dropped, a negated comparison flipped."""
    if isinstance(expr, (All, Any_)):
        neutral = Const(isinstance(expr, All))
        items = tuple(i for i in (simplify(i) for i in expr.items) if i != neutral)
        if Const(not neutral.value) in items:
            return Const(not neutral.value)
        if not items:
            return neutral
        return items[0] if len(items) == 1 else type(expr)(items)
    if isinstance(expr, Not):
        inner = simplify(expr.item)
        if isinstance(inner, Const):
            return Const(not inner.value)
        if isinstance(inner, VersionCmp) and inner.mode != VersionForm.PREFIX:
            return VersionCmp(_NEGATED[inner.op], inner.other, inner.mode)
        return inner.item if isinstance(inner, Not) else Not(inner)
    return expr


def render(expr: GuardExpr) -> str:
    expr = simplify(expr)
    if isinstance(expr, VersionCmp):
        if expr.mode == VersionForm.PREFIX:
            return f"version {'starts' if expr.op == '==' else 'does not start'} with {expr.other!r}"
        return f"version {expr.op} {expr.other}"
    if isinstance(expr, HasAttr):
        return f"hasattr({expr.symbol}, {expr.name!r})"
    if isinstance(expr, HasParam):
        return f"{expr.symbol} takes a parameter {expr.name!r}"
    if isinstance(expr, Imports):
        return "import of " + ", ".join(expr.symbols) + " succeeds"
    if isinstance(expr, Not):
        return f"not ({render(expr.item)})"
    if isinstance(expr, All):
        return " and ".join(f"({render(i)})" for i in expr.items)
    if isinstance(expr, Any_):
        return " or ".join(f"({render(i)})" for i in expr.items)
    if isinstance(expr, Const):
        return str(expr.value)
    if isinstance(expr, Opaque):
        return expr.text
    if isinstance(expr, Unevaluated):
        return f"{expr.text}, a test of the version the audit could not run: {expr.reason}"
    return "?"
