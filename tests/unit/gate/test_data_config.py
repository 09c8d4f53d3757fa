"""compat/gate/rules/data_config.py: a flag that contradicts speculators' data_config.json beside the files fails
(the file wins), or with --override-data-config is reported as allowed (the flag wins); a flag that agrees, or no
data_config.json, gives nothing."""

from __future__ import annotations

import os

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


def _config_text(layer_ids: str = "[1, 2, 3]", hidden: str = str(H)) -> str:
    """speculators' data_config.json as text, with the two values the gate reads spelled as given."""
    return ('{"version": "2.0", "model": {"target_model_path": "tiny", "hidden_size": ' + hidden + '}, '
            '"hidden_states": {"layer_ids": ' + layer_ids + '}}')


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(("text", "says"), [
    pytest.param(_config_text(layer_ids='"012"'), 'hidden_states.layer_ids is "012" (a string)', id="ids-a-string"),
    pytest.param(_config_text(layer_ids="[true, false, 2]"), "hidden_states.layer_ids[0] is true (a boolean)",
                 id="ids-booleans"),
    pytest.param(_config_text(layer_ids="[1.9, 2, 3]"), "hidden_states.layer_ids[0] is 1.9", id="an-id-1.9"),
    pytest.param(_config_text(layer_ids="[1, 2, 1e23]"), "hidden_states.layer_ids[2] is 1e+23", id="an-id-1e23"),
    pytest.param(_config_text(layer_ids="[1, 2, 100000000000000000000000]"),
                 "hidden_states.layer_ids[2] is 100000000000000000000000 (an integer), not a layer id",
                 id="an-integer-id-beyond-any-model"),
    pytest.param(_config_text(layer_ids="[]"), "hidden_states.layer_ids is [] (a list), not a non-empty list",
                 id="no-ids"),
    pytest.param(_config_text(hidden="128.7"), "model.hidden_size is 128.7", id="hidden-128.7"),
    pytest.param(_config_text(hidden="1e999"), "model.hidden_size is Infinity", id="hidden-1e999"),
    pytest.param(_config_text(hidden='"abc"'), 'model.hidden_size is "abc" (a string)', id="hidden-a-string"),
    pytest.param(_config_text(hidden="[128]"), "model.hidden_size is [128] (a list)", id="hidden-a-list"),
    pytest.param(_config_text(hidden="NaN"), "NaN is not JSON", id="hidden-nan"),
    pytest.param('{"model": ' + DEEP + '}', "nested deeper than 64 levels", id="100k-deep"),
    pytest.param('{"model": 1', "JSONDecodeError", id="cut-short"),
    pytest.param(b'{"model": {"hidden_size": 16, "x": "\xff"}}', "UnicodeDecodeError", id="not-utf-8"),
    pytest.param('["a list"]', 'the file is ["a list"] (a list), not a JSON object', id="not-an-object"),
])
def test_a_config_that_cannot_be_taken_at_its_word_fails_and_states_nothing(gate, text, says):
    """Nothing is coerced (``"012"`` was read as ids 0, 1, 2; ``1.9`` as id 1) and nothing ends the run: the
    file fails with the key and the value, and the samples are judged without it (its wrong ids and size would
    have failed every sample)."""
    gate.write("data_0.pt", spec())
    (gate.root / "data_config.json").write_bytes(text.encode() if isinstance(text, str) else text)
    result = gate.run()
    found = [f for f in result.findings if f.check == "data_config"]
    one(found, Status.BROKEN, says)
    assert "the samples are judged without this file" in found[0].message
    assert found[0].consumer_location.endswith("data_config.json"), found[0].consumer_location
    assert [f.check for f in result.findings if f.status is Status.BROKEN] == ["data_config"], \
        [(f.check, f.message) for f in result.findings]


def test_a_huge_config_is_refused_from_its_size_unread(gate):
    """A 2 GiB data_config.json (sparse: no disk is used) is refused before a byte of it is read."""
    gate.write("data_0.pt", spec())
    with open(gate.root / "data_config.json", "wb") as f:
        f.truncate(2 << 30)
    one(gate.findings("data_config"), Status.BROKEN, f"{2 << 30} bytes, over the 1048576-byte limit")


def test_a_fifo_named_as_the_config_is_not_opened(gate):
    """Opening a FIFO for reading waits for a writer: the run would hang until killed."""
    gate.write("data_0.pt", spec())
    os.mkfifo(gate.root / "data_config.json")
    one(gate.findings("data_config"), Status.BROKEN, "a FIFO, not a file: not opened")


@pytest.mark.parametrize("target", ["/proc/self/environ", "/proc/self/cmdline"])
def test_a_config_linked_to_a_system_file_is_never_read(gate, target, monkeypatch):
    """``/proc/self/environ`` holds the environment: none of it may reach a report."""
    monkeypatch.setenv("COMPAT_SECRET_PROBE", "hunter2-secret")
    gate.write("data_0.pt", spec())
    os.symlink(target, gate.root / "data_config.json")
    result = gate.run()
    found = one([f for f in result.findings if f.status is Status.BROKEN], Status.BROKEN, "a system file: never read")
    assert found.consumer_location == "data_config.json", found
    assert not any("hunter2" in f.message for f in result.findings)
