"""The fixers name the probes they handle by the probe objects: each is a probe of the registry, and every check
a fixer claims findings of (or reads the failing findings of) is one some fixer handles."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from compat.fixers import Fixer, all_fixers
from compat.probe import Probe
from compat.probes import all_probes

FIXERS = all_fixers()


def _module(fixer: Fixer):
    return importlib.import_module(type(fixer).__module__)


def _named_checks(fixer: Fixer) -> set[str]:
    """The checks named in the fixer's module by ``Claim(check, ...)`` and ``ctx.failing(probe)``, each argument
    evaluated in the module (they name probes through module-level objects, never local values)."""
    module = _module(fixer)
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        claim = isinstance(node.func, ast.Name) and node.func.id == "Claim"
        failing = isinstance(node.func, ast.Attribute) and node.func.attr == "failing"
        if claim or failing:
            value = eval(compile(ast.Expression(node.args[0]), module.__file__, "eval"), vars(module))  # noqa: S307
            names.add(value.name if isinstance(value, Probe) else value)
    return names


@pytest.mark.parametrize("fixer", FIXERS, ids=[f.name for f in FIXERS])
def test_handles_are_registered_probes(fixer: Fixer) -> None:
    registry = all_probes()
    for probe in fixer.handles:
        assert any(probe is p for p in registry), f"{fixer.name} handles {probe!r}, not a probe of the registry"
    assert fixer.checks == tuple(p.name for p in fixer.handles)


@pytest.mark.parametrize("fixer", FIXERS, ids=[f.name for f in FIXERS])
def test_claimed_checks_are_handled(fixer: Fixer) -> None:
    handled = {name for f in FIXERS for name in f.checks}
    registered = {p.name for p in all_probes()}
    named = _named_checks(fixer)
    assert named <= registered, f"{fixer.name} names checks that are no probe's: {sorted(named - registered)}"
    assert named <= handled, f"{fixer.name} claims findings of checks no fixer handles: {sorted(named - handled)}"


def test_every_fixer_that_claims_handles_something() -> None:
    for fixer in FIXERS:
        if _named_checks(fixer):
            assert fixer.handles, f"{fixer.name} claims findings but handles no probe"
