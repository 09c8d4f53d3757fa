"""Callable signatures as the audit models them, and binding a call's shape against one.

Both readings of vLLM (static AST and runtime ``inspect``) produce these objects, so the
probes and the reports never know which reading made them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ParamKind(StrEnum):
    POSITIONAL_ONLY = "POSITIONAL_ONLY"
    POSITIONAL_OR_KEYWORD = "POSITIONAL_OR_KEYWORD"
    VAR_POSITIONAL = "VAR_POSITIONAL"
    KEYWORD_ONLY = "KEYWORD_ONLY"
    VAR_KEYWORD = "VAR_KEYWORD"


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: ParamKind
    has_default: bool = False
    default: str | None = None
    """Source text (static) or repr (runtime) of the default; ``None`` when there is none."""
    annotation: str | None = None

    @property
    def required(self) -> bool:
        return not self.has_default and self.kind not in (ParamKind.VAR_POSITIONAL, ParamKind.VAR_KEYWORD)

    def render(self) -> str:
        prefix = {ParamKind.VAR_POSITIONAL: "*", ParamKind.VAR_KEYWORD: "**"}.get(self.kind, "")
        text = prefix + self.name
        if self.has_default:
            text += "=" + (self.default if self.default is not None else "...")
        return text


@dataclass(frozen=True)
class CallShape:
    """How a call site passes its arguments (values are not known statically)."""

    positional: int = 0
    keywords: tuple[str, ...] = ()
    star_args: bool = False
    star_kwargs: bool = False

    def render(self) -> str:
        parts = [f"<{i}>" for i in range(self.positional)]
        if self.star_args:
            parts.append("*args")
        parts += [f"{k}=" for k in self.keywords]
        if self.star_kwargs:
            parts.append("**kwargs")
        return "(" + ", ".join(parts) + ")"


class BindCode(StrEnum):
    """Why a call does not bind to a signature (``BindProblem.code``)."""

    UNEXPECTED_KEYWORD = "unexpected-keyword"
    """A keyword the signature does not take (and no ``**kwargs`` to catch it)."""
    MISSING_REQUIRED = "missing-required"
    """A required parameter the call does not pass."""
    TOO_MANY_POSITIONAL = "too-many-positional"
    """More positional arguments than the signature's positional parameters (and no ``*args``)."""
    POSITIONAL_ONLY_BY_KEYWORD = "positional-only-by-keyword"
    """A positional-only parameter passed by keyword."""
    DUPLICATE_ARGUMENT = "duplicate-argument"
    """A parameter passed both positionally and by keyword."""


@dataclass(frozen=True)
class BindProblem:
    code: BindCode
    parameter: str | None
    message: str


@dataclass(frozen=True)
class Signature:
    parameters: tuple[Parameter, ...] = ()
    returns: str | None = None

    def render(self) -> str:
        out: list[str] = []
        star_done = False
        for index, param in enumerate(self.parameters):
            if param.kind == ParamKind.KEYWORD_ONLY and not star_done:
                out.append("*")
                star_done = True
            if param.kind == ParamKind.VAR_POSITIONAL:
                star_done = True
            out.append(param.render())
            following = self.parameters[index + 1] if index + 1 < len(self.parameters) else None
            if param.kind == ParamKind.POSITIONAL_ONLY and (following is None or following.kind != param.kind):
                out.append("/")
        return "(" + ", ".join(out) + ")"

    def __str__(self) -> str:
        return self.render()

    def drop_first(self) -> Signature:
        """The signature seen through an instance or class: without ``self`` / ``cls``."""
        params = self.parameters
        if params and params[0].kind in (ParamKind.POSITIONAL_ONLY, ParamKind.POSITIONAL_OR_KEYWORD):
            params = params[1:]
        return Signature(params, self.returns)

    def with_self(self) -> Signature:
        """A method's signature seen through its class (``Class.method(obj, ...)``): ``self`` passed explicitly."""
        return Signature((Parameter("self", ParamKind.POSITIONAL_OR_KEYWORD),) + self.parameters, self.returns)

    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def get(self, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.name == name), None)

    def bind(self, call: CallShape, callable_name: str = "the callable") -> list[BindProblem]:
        """Every way ``call`` fails to bind to this signature (empty: it binds)."""
        problems: list[BindProblem] = []
        params = self.parameters
        positional = [p for p in params if p.kind in (ParamKind.POSITIONAL_ONLY, ParamKind.POSITIONAL_OR_KEYWORD)]
        var_pos = any(p.kind == ParamKind.VAR_POSITIONAL for p in params)
        var_kw = any(p.kind == ParamKind.VAR_KEYWORD for p in params)
        filled: set[str] = set()
        if call.positional > len(positional) and not var_pos:
            problems.append(BindProblem(
                BindCode.TOO_MANY_POSITIONAL, None,
                f"{callable_name} takes at most {len(positional)} positional argument(s) but the call passes "
                f"{call.positional}"))
        filled.update(p.name for p in positional[: call.positional])
        by_name = {p.name: p for p in params}
        for keyword in call.keywords:
            param = by_name.get(keyword)
            if param is None or param.kind in (ParamKind.VAR_POSITIONAL, ParamKind.VAR_KEYWORD):
                if not var_kw:
                    problems.append(BindProblem(
                        BindCode.UNEXPECTED_KEYWORD, keyword,
                        f"{callable_name} no longer accepts keyword '{keyword}'"))
                continue
            if param.kind == ParamKind.POSITIONAL_ONLY:
                if not var_kw:
                    problems.append(BindProblem(
                        BindCode.POSITIONAL_ONLY_BY_KEYWORD, keyword,
                        f"{callable_name} takes '{keyword}' positionally only, the call passes it by keyword"))
                continue
            if keyword in filled:
                problems.append(BindProblem(
                    BindCode.DUPLICATE_ARGUMENT, keyword,
                    f"{callable_name} gets '{keyword}' both positionally and by keyword"))
            filled.add(keyword)
        for param in params:
            if not param.required or param.name in filled:
                continue
            if param.kind == ParamKind.KEYWORD_ONLY and call.star_kwargs:
                continue
            if param.kind == ParamKind.POSITIONAL_ONLY and call.star_args:
                continue
            if param.kind == ParamKind.POSITIONAL_OR_KEYWORD and (call.star_args or call.star_kwargs):
                continue
            problems.append(BindProblem(
                BindCode.MISSING_REQUIRED, param.name,
                f"{callable_name} requires '{param.name}', which the call does not pass"))
        return problems

    def positional_targets(self, call: CallShape) -> tuple[str, ...]:
        """The parameter names the call's positional arguments land on."""
        positional = [p.name for p in self.parameters
                      if p.kind in (ParamKind.POSITIONAL_ONLY, ParamKind.POSITIONAL_OR_KEYWORD)]
        return tuple(positional[: call.positional])


def diff(old: Signature, new: Signature) -> list[str]:
    """What changed between two signatures, one short phrase per parameter."""
    changes: list[str] = []
    for param in old.parameters:
        after = new.get(param.name)
        if after is None:
            changes.append(f"-{param.name}")
        elif after.kind != param.kind:
            changes.append(f"~{param.name}: {param.kind.value.lower()} -> {after.kind.value.lower()}")
        elif after.required and not param.required:
            changes.append(f"~{param.name}: now required")
        elif param.required and not after.required:
            changes.append(f"~{param.name}: now optional")
    for param in new.parameters:
        if old.get(param.name) is None:
            changes.append(f"+{param.name}" + (" (required)" if param.required else ""))
    old_order = [p.name for p in old.parameters if new.get(p.name)]
    new_order = [p.name for p in new.parameters if old.get(p.name)]
    if old_order != new_order:
        changes.append("order changed")
    return changes
