"""Comparing a static signature with a runtime one: names, kinds, defaults (literal defaults by value)."""

from __future__ import annotations

import ast

from compat.signature import Signature


def comparable(sig: Signature) -> list[tuple]:
    out = []
    for p in sig.parameters:
        default = None
        if p.default is not None:
            try:
                default = repr(ast.literal_eval(p.default))
            except (ValueError, SyntaxError):
                default = "<factory>" if p.default == "<factory>" else "<non-literal>"
        out.append((p.name, p.kind.value, p.has_default, default))
    return out


def views(static: Signature, runtime: Signature) -> tuple[list[tuple], list[tuple]]:
    """Both sides comparable; a default the static reading could not evaluate only has to exist at run time."""
    static_view, runtime_view = comparable(static), comparable(runtime)
    for index, (s, r) in enumerate(zip(static_view, runtime_view)):
        if s[3] == "<non-literal>" and r[2]:
            static_view[index] = s[:3] + (r[3],)
    return static_view, runtime_view
