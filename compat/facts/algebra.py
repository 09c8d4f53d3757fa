"""The values ``compat.facts.evaluator`` runs a decoder layer's code on: the residual stream as a sum of terms, and
the conditions a path assumes.

A ``Stream`` is a tensor as a sum: the layer's stream inputs, each with its exact factor (``Fraction``; ``None``
where an unknown factor scales it), and the tensors computed inside the layer (a norm's output, a sublayer's
result), each only present or not (their factors never decide which outputs are the stream). Everything else
a forward handles is another value: a constant, a dtype, a condition, a value that is not a tensor of the stream
(``Other``: a config attribute, positions), the layer or one of its submodules (``Obj``), a function of the build
(``Func``), a tuple, or ``Unknown`` (what the code does there cannot be read: anything made from it is unknown).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

from compat.vllm.surface import Found

RUN_DTYPE = "run"
"""The dtype of a value nothing cast: the model's."""


class AtomKind(StrEnum):
    """What a condition the code does not decide is about."""

    SELF = "self"
    """The layer object (``self.tp_size > 1``): the shim evaluates it on the real layer."""
    DTYPE = "dtype"
    """The run's dtype (``hidden_states.dtype == torch.float16``): evaluable once the model's dtype is known."""
    INPUT = "input"
    """The inputs or a callee's locals (``hidden_states.shape[0] != n``): nothing can evaluate it beforehand."""


@dataclass(frozen=True)
class Atom:
    kind: AtomKind
    text: str
    """A Python expression over ``self`` (the layer) in ``module``'s globals; for a DTYPE atom, the dtype the run's
    is equal to when the atom holds."""
    module: str = ""


Formula = tuple[Any, ...]
"""``("true",)``, ``("false",)``, ``("atom", Atom)``, ``("not", f)``, ``("and", f, g)`` or ``("or", f, g)``."""
TRUE: Formula = ("true",)
FALSE: Formula = ("false",)
Assumption = tuple[Formula, bool]


def negate(f: Formula) -> Formula:
    if f == TRUE:
        return FALSE
    if f == FALSE:
        return TRUE
    return f[1] if f[0] == "not" else ("not", f)


def both(f: Formula, g: Formula) -> Formula:
    if FALSE in (f, g):
        return FALSE
    return g if f == TRUE else f if g == TRUE else ("and", f, g)


def either(f: Formula, g: Formula) -> Formula:
    if TRUE in (f, g):
        return TRUE
    return g if f == FALSE else f if g == FALSE else ("or", f, g)


def atoms(f: Formula) -> Iterator[Atom]:
    if f[0] == "atom":
        yield f[1]
        return
    for part in f[1:]:
        yield from atoms(part)


def render(f: Formula) -> str:
    """A formula as words and Python: what a refusal quotes."""
    if f[0] == "atom":
        return f"the model's dtype is {f[1].text}" if f[1].kind == AtomKind.DTYPE else f[1].text
    if f[0] == "not":
        inner = f[1]
        if inner[0] == "atom" and inner[1].kind == AtomKind.DTYPE:
            return f"the model's dtype is not {inner[1].text}"
        return f"not {render(inner)}"
    if f[0] in ("and", "or"):
        return f"({render(f[1])} {f[0]} {render(f[2])})"
    return str(f[0])


@dataclass(frozen=True)
class Stream:
    inputs: tuple[tuple[str, Fraction | None], ...] = ()
    terms: frozenset[str] = frozenset()
    oid: str = ""
    """Which tensor object it is: names holding the same ``oid`` hold one object, which an in-place operation
    changes for all of them."""
    dtype: str = RUN_DTYPE

    @property
    def carries(self) -> bool:
        """Whether the layer's stream inputs are in it: only then can a call that receives it add the stream."""
        return bool(self.inputs)

    def factor(self, name: str) -> Fraction | None:
        return dict(self.inputs).get(name, Fraction(0))


@dataclass(frozen=True)
class Const:
    value: object


@dataclass(frozen=True)
class DType:
    name: str


@dataclass(frozen=True)
class Cond:
    formula: Formula


@dataclass(frozen=True)
class Other:
    """Not a tensor of the stream: its expression, and whether that expression reaches only the layer object and
    constants (so a condition on it can be evaluated on the real layer), in the globals of ``module``."""

    text: str
    on_self: bool = False
    module: str = ""


@dataclass(frozen=True)
class Obj:
    """The layer or one of its submodules: its class, and the expression that reaches it from the layer."""

    cls: Found
    path: str


@dataclass(frozen=True)
class Choice:
    """One of several submodules (``self.input_layernorm`` built as one class or another): a call reaches each."""

    objs: tuple[Obj, ...]
    path: str


@dataclass(frozen=True)
class Ext:
    """A submodule of another library's class (``torch.nn.LayerNorm``)."""

    path: str
    text: str


@dataclass(frozen=True)
class Func:
    """A module, function or class of the build, and the expression that names it (in ``module``'s globals)."""

    found: Found
    text: str = ""
    module: str = ""


@dataclass(frozen=True)
class Bound:
    """A method of the layer or of a submodule, reached through it."""

    obj: Obj
    found: Found


@dataclass(frozen=True)
class Tup:
    items: tuple[Any, ...]


@dataclass(frozen=True)
class Unknown:
    reason: str


Value = Stream | Const | DType | Cond | Other | Obj | Choice | Ext | Func | Bound | Tup | Unknown


def carries(value: Value) -> bool:
    """The value may hold the stream (an unknown one may)."""
    if isinstance(value, Stream):
        return value.carries
    if isinstance(value, Tup):
        return any(carries(v) for v in value.items)
    return isinstance(value, Unknown)


def add(a: Stream, b: Stream, sign: int, oid: str) -> Stream:
    factors: dict[str, Fraction | None] = dict(a.inputs)
    for name, f in b.inputs:
        mine = factors.get(name, Fraction(0))
        factors[name] = None if mine is None or f is None else mine + sign * f
    inputs = tuple(sorted((n, f) for n, f in factors.items() if f != 0))
    return Stream(inputs, a.terms | b.terms, oid, a.dtype)


def scale(a: Stream, factor: Fraction | None, oid: str) -> Stream:
    inputs = tuple((n, None if f is None or factor is None else f * factor) for n, f in a.inputs)
    return Stream(tuple(i for i in inputs if i[1] != 0), a.terms, oid, a.dtype)


def number(value: Value) -> Fraction | None:
    if isinstance(value, Const) and isinstance(value.value, (int, float)) and not isinstance(value.value, bool):
        return Fraction(value.value).limit_denominator(10 ** 9)
    return None


def swap(value: Value, oid: str, new: Value) -> Value:
    """``value`` with the tensor object ``oid`` replaced by ``new`` wherever it holds it."""
    if isinstance(value, Stream) and value.oid == oid:
        return new
    if isinstance(value, Tup):
        return Tup(tuple(swap(v, oid, new) for v in value.items))
    return value


def text_of(value: Value) -> str:
    if isinstance(value, Other):
        return value.text
    if isinstance(value, Const):
        return repr(value.value)
    if isinstance(value, (Obj, Choice)):
        return value.path
    if isinstance(value, Ext):
        return value.text
    if isinstance(value, DType):
        return f"torch.{value.name}"
    if isinstance(value, Func):
        return value.text or value.found.path
    return f"<{type(value).__name__.lower()}>"


@dataclass(frozen=True)
class CodeRead:
    """A def a reading depended on: its module, its qualified name in it and a fingerprint of its source."""

    module: str
    qualname: str
    fingerprint: str


def fingerprint(lines: Sequence[str], node: ast.AST) -> str:
    """The def's source (decorators included), each line stripped of its indentation: what the shim compares with
    the running build's file, so that what was read of one build's code is used only where that code runs."""
    decorators = getattr(node, "decorator_list", ())
    start = min([getattr(node, "lineno", 1), *(d.lineno for d in decorators)])
    end = getattr(node, "end_lineno", None) or start
    text = "\n".join(line.strip() for line in lines[start - 1:end] if line.strip())
    return hashlib.sha1(text.encode()).hexdigest()[:16]
