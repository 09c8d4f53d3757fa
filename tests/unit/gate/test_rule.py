"""compat/gate/rules/rule.py and the registry (compat/gate/rules/__init__.py): what a rule is, the order checks run
in, which rules are structural, what a finding defaults to, how messages shorten lists, and --ignore."""

from __future__ import annotations

import pytest
import torch

from compat.errors import CompatError
from compat.findings import Status
from compat.gate.rules import RULES, STRUCTURAL, checks
from compat.gate.rules.rule import SHOWN, Phase, Rule, RuleFinding, some

from .conftest import H, spec

NAMES = ["readable", "layout", "data_config", "layer_count", "layer_shape", "seq_len", "hidden_size", "dtype",
         "token_ids", "loss_mask", "finite", "nonzero_layer", "zero_rows", "distinct_rows", "distinct_layers",
         "layer_order", "consistency", "reference", "partial_reference", "pairing"]


def test_rules_in_module_order_then_definition_order():
    assert list(RULES) == NAMES
    assert STRUCTURAL == {"readable", "layout", "layer_shape", "seq_len", "token_ids"}


@pytest.mark.parametrize(("phase", "order"), [
    (Phase.READ, ["readable", "layout", "data_config", "loss_mask"]),
    (Phase.HEADER, ["layer_count", "layer_shape", "seq_len", "hidden_size", "dtype", "token_ids", "loss_mask"]),
    (Phase.VALUES, ["finite", "nonzero_layer", "zero_rows", "distinct_rows", "distinct_layers", "layer_order",
                    "readable", "token_ids", "loss_mask"]),
    (Phase.DATASET, ["consistency"]),
    (Phase.REFERENCE, ["reference", "partial_reference", "pairing"]),
])
def test_a_phase_runs_its_own_rules_then_the_others_checks(phase, order):
    ran = checks(phase)
    assert [name for name, _ in ran] == order
    assert ran[0][1] is RULES[order[0]].check
    assert [p.value for p in Phase] == ["read", "header", "values", "dataset", "reference"]


def test_a_rule_finding_is_a_failure_by_default():
    f = RuleFinding("m")
    assert (f.status, f.fix, f.allowed, f.skip_sample) == (Status.BROKEN, None, None, False)
    rule = Rule("r", "d", Phase.HEADER, lambda s, c: ())
    assert not rule.structural and dict(rule.also) == {}


@pytest.mark.parametrize(("count", "text"), [
    (0, ""),
    (1, "0"),
    (SHOWN, "0, 1, 2, 3, 4"),
    (SHOWN + 3, "0, 1, 2, 3, 4, and 3 more"),
])
def test_some_lists_the_first_items_then_how_many_more(count, text):
    assert some([str(i) for i in range(count)]) == text


def test_ignore_drops_a_rule_s_findings_and_refuses_an_unknown_rule(gate):
    entries = spec()
    entries["hidden_states"] = [h[:4] for h in entries["hidden_states"]]
    gate.write("data_0.pt", entries)
    assert {f.check for f in gate.run().failing()} == {"seq_len"}
    result = gate.run(ignore=frozenset({"seq_len"}))
    assert not [f for f in result.findings if f.check == "seq_len"] and result.exit_code == 0
    with pytest.raises(CompatError, match="--ignore no_such_rule: no such rule"):
        gate.run(ignore=frozenset({"no_such_rule"}))


def test_a_sound_sample_passes_every_rule(gate):
    gate.write("data_0.pt", spec(dtype=torch.float32))
    result = gate.run(hidden_size=H, values=True)
    assert result.exit_code == 0 and not result.failing()
