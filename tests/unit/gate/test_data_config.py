"""compat/gate/rules/data_config.py: a flag that contradicts speculators' data_config.json beside the files fails
(the file wins), or with --override-data-config is reported as allowed (the flag wins); a flag that agrees, or no
data_config.json, gives nothing."""

from __future__ import annotations

import pytest

from compat.findings import Status

from .conftest import H, model_config, one, spec, write_data_config


def _dataset(gate, layer_ids=(1, 2, 3), hidden=H):
    gate.write("data_0.pt", spec())
    write_data_config(gate.root, list(layer_ids), hidden)


@pytest.mark.parametrize(("options", "says", "fix"), [
    ({"hidden_size": 32}, "--hidden-size 32 contradicts", "drop --hidden-size"),
    ({"layer_ids": (4, 5, 6)}, "--layer-ids [4, 5, 6] contradicts", "drop --layer-ids"),
    ({"layers": 4}, "--layers 4 contradicts", "drop --layers"),
    ({"model": "model"}, "--model", "pass the model that wrote this dataset"),
])
def test_a_flag_against_the_file_fails(gate, options, says, fix):
    _dataset(gate)
    if options.get("model"):
        options["model"] = model_config(gate.root.parent / "model", hidden_size=2 * H)
    found = one(gate.findings("data_config", **options), Status.BROKEN, says)
    assert "the samples are judged by data_config.json" in found.message and found.fix.startswith(fix)
    assert found.allowed is None


def test_override_lets_the_flag_win_and_is_allowed(gate):
    _dataset(gate)
    found = one(gate.findings("data_config", hidden_size=32, override_data_config=True), Status.BROKEN,
                "--hidden-size 32 overrides")
    assert "judged by the flag" in found.message and "--override-data-config" in found.allowed


@pytest.mark.parametrize(("config", "options"), [
    (True, {"hidden_size": H, "layer_ids": (1, 2, 3), "layers": 3}),
    (False, {"hidden_size": 32}),
], ids=["flags agree", "no data_config.json"])
def test_no_conflict_no_finding(gate, config, options):
    if config:
        _dataset(gate)
    else:
        gate.write("data_0.pt", spec())
    assert gate.findings("data_config", **options) == []
