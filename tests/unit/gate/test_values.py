"""compat/gate/rules/values.py (--values): finite (under each --nonfinite policy), nonzero_layer, zero_rows,
distinct_layers, distinct_rows and layer_order, each on a sample the test damages in that one way."""

from __future__ import annotations

import pytest
import torch

from compat.findings import Status

from .conftest import H, one, spec, write_data_config


def _damaged(change):
    def write(gate):
        entries = spec(layers=3, dtype=torch.float32)
        change(entries["hidden_states"])
        gate.write("data_0.pt", entries)
    return write


def _nan(layers):
    layers[1][2, 0] = float("nan")
    layers[1][3, 1] = float("inf")


def _zero_layer(layers):
    layers[2].zero_()


def _zero_row(layers):
    layers[0][4].zero_()


def _subnormal_rows(layers):
    """4 rows of float32 subnormals, each unlike the others (memory never written), in the middle layer."""
    g = torch.Generator().manual_seed(5)
    layers[1][1:5] = torch.rand(4, layers[1].shape[1], generator=g) * 1e-40


def _duplicate(layers):
    layers[2].copy_(layers[1])


def _repeated_row(layers):
    layers[1][3].copy_(layers[1][2])


def _reversed(layers):
    layers.reverse()


@pytest.mark.parametrize(("rule", "change", "says"), [
    ("finite", _nan, "non-finite values in 1 of 3 layers: hidden_states[1]: 1 NaN, 1 Inf, first at token 2"),
    ("nonzero_layer", _zero_layer, "hidden_states[2] is all zeros"),
    ("zero_rows", _zero_row, "rows of all zeros in 1 of 3 layers (hidden_states[0]: 1 of 6 rows, first at token 4)"),
    ("zero_rows", _subnormal_rows, "rows of values too small for any state in 1 of 3 layers (hidden_states[1]: 4 of "
                                   "6 rows, first at token 1): every value is below about 4e-23 (subnormals)"),
    ("distinct_layers", _duplicate, "hidden_states[1] and hidden_states[2] are identical: one layer was stored twice"),
    ("distinct_rows", _repeated_row, "rows equal to the row before them although their tokens differ, in 1 of 3"),
    ("layer_order", _reversed, "less than half of hidden_states[0] before it"),
])
def test_value_rules(gate, rule, change, says):
    _damaged(change)(gate)
    one(gate.findings(rule, values=True), Status.BROKEN, says)
    assert gate.findings(rule) == []  # values are read only under --values


@pytest.mark.parametrize(("policy", "allowed", "skipped", "exit_code"), [
    ("fail", None, [], 1),
    ("warn", "--nonfinite warn: reported, sample kept", [], 0),
    ("skip", "--nonfinite skip: sample excluded from the dataset", ["data_0.pt"], 0),
])
def test_nonfinite_policies(gate, policy, allowed, skipped, exit_code):
    _damaged(_nan)(gate)
    result = gate.run(values=True, nonfinite=policy)
    [found] = [f for f in result.findings if f.check == "finite"]
    assert found.allowed == allowed and result.exit_code == exit_code
    assert [s.rsplit("/", 1)[-1].split("#")[0] for s in result.summary.skipped_samples] == skipped


def test_layer_names_carry_their_ids(gate):
    _damaged(_zero_layer)(gate)
    write_data_config(gate.root, [2, 5, 9], H)
    one(gate.findings("nonzero_layer", values=True), Status.BROKEN, "hidden_states[2] (layer 9) is all zeros")


def test_sound_values_give_no_finding(gate):
    _damaged(lambda layers: None)(gate)
    result = gate.run(values=True)
    assert not [f for f in result.findings if f.check in ("finite", "nonzero_layer", "zero_rows", "distinct_layers",
                                                          "distinct_rows", "layer_order")]
    assert result.exit_code == 0


def test_slots_of_one_declared_layer_may_be_identical(gate):
    """speculators' default ids for a six-layer model are [2, 3, 3, 5]: two slots hold layer 3 by design."""
    _damaged(_duplicate)(gate)
    write_data_config(gate.root, [2, 3, 3], H)
    assert not gate.findings("distinct_layers", values=True)
    write_data_config(gate.root, [2, 3, 4], H)
    one(gate.findings("distinct_layers", values=True), Status.BROKEN,
        "hidden_states[1] (layer 3) and hidden_states[2] (layer 4) are identical")
