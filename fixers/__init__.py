"""Fixers: each module here turns one kind of finding into shim code and source edits, found through this
registry (as ``probes/`` is).

A fixer module defines ``FIXER``, an instance of ``Fixer`` (``compat.fix.fixer``) naming the probes whose
findings it handles. Its ``plan(ctx)`` reads the findings of every audited build (``compat.fix.context.FixContext``)
and the facts the probes read, and returns a ``FixerPlan``: pieces of the shim module (feature-detecting code: the
shim adapts to the vLLM it meets by signatures, attributes and module locations, never by version number), LibCST
edits of the consumer's files, and claims on the findings it fixes. Adding a fixer means adding one module here.
"""

from __future__ import annotations

from compat.fix.fixer import Fixer, all_fixers

__all__ = ["Fixer", "all_fixers"]
