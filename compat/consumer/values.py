"""What the consumer scan knows about a value while it walks the code (see ``compat.consumer.scan``)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from compat.consumer.guards import GuardExpr
from compat.consumer.model import Ref
from compat.location import Location


@dataclass(frozen=True)
class Sym:
    """A vLLM object named by its dotted path (module, class, function...)."""

    path: str


@dataclass(frozen=True)
class Obj:
    """An object of the target whose class the probes work out from ``ref``."""

    ref: Ref


@dataclass(frozen=True)
class SelfOf:
    """``self`` inside a consumer class (``worker``: the class extends vLLM's worker)."""

    qualname: str
    worker: bool = False


@dataclass(frozen=True)
class Local:
    """A name bound to a consumer-defined function or class."""

    qualname: str


@dataclass(frozen=True)
class Reply:
    """What a worker RPC returned, tracked to see how the consumer uses it."""

    location: Location


@dataclass(frozen=True)
class Either:
    """A name bound by an import and by its ``except ImportError`` fallback: which one depends on the build."""

    options: tuple[tuple[Sym, GuardExpr, str], ...]
    location: Location


@dataclass(frozen=True)
class VersionValue:
    """The audited build's version as the consumer holds it: raw string, parsed, or tuple."""

    form: str


@dataclass(frozen=True)
class Lit:
    """A literal; ``parsed``: a string passed through a version parser (``Version("0.12")``)."""

    value: Any
    parsed: bool = False


Value = Sym | Obj | SelfOf | Local | VersionValue | Lit | GuardExpr | Either | Reply | None


@dataclass
class _Scope:
    names: dict[str, Value] = field(default_factory=dict)
    kind: str = "module"
    qualname: str = ""


@dataclass
class _ClassInfo:
    qualname: str
    node: ast.ClassDef
    module: str
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    attrs: dict[str, Value] = field(default_factory=dict)
    bases: tuple[str, ...] = ()
