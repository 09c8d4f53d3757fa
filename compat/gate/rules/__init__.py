"""The gate's rules: each one ``Rule`` value (``compat.gate.rules.rule``) in the module of its phase.

``RULES`` (name -> Rule, in this order) is collected from ``reading``, ``data_config``, ``header``, ``values``,
``dataset``
and ``reference``, each in the order its rules are defined; ``--list-rules``, ``--ignore`` and ``STRUCTURAL``
derive from it. Adding a rule is defining one ``Rule`` in one of those modules.
"""

from __future__ import annotations

from types import ModuleType

from compat.gate.rules import data_config, dataset, header, reading, reference, values
from compat.gate.rules.rule import Check, Phase, Rule


def _defined(*modules: ModuleType) -> dict[str, Rule]:
    found = [rule for module in modules for rule in vars(module).values() if isinstance(rule, Rule)]
    rules = {rule.name: rule for rule in found}
    if len(rules) != len(found):
        raise RuntimeError("two gate rules share a name")
    return rules


RULES: dict[str, Rule] = _defined(reading, data_config, header, values, dataset, reference)
STRUCTURAL = frozenset(name for name, rule in RULES.items() if rule.structural)
"""Rules whose failure means a sample cannot be compared row by row (``--reference`` skips it)."""


def checks(phase: Phase) -> list[tuple[str, Check]]:
    """What runs in ``phase``, in order: the rules of that phase, then the other rules' checks for it, each in
    ``RULES`` order. A subject's findings come out in this order."""
    own = [(rule.name, rule.check) for rule in RULES.values() if rule.phase is phase]
    return own + [(rule.name, rule.also[phase]) for rule in RULES.values() if rule.phase is not phase
                  and phase in rule.also]
