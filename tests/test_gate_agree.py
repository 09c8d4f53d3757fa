"""Flags and files agree: EAGLE-3's layer ids in the reference check, flags against data_config.json, a sample
of another layout among its dataset's, loss masks that train nothing (findings about a dataset as a whole)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.findings import Status
from compat.gate import GateOptions, run_gate

from .gate_files import layered, markdown_text, write_data_config, write_eagle, write_speculators, write_vllm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model(tiny_qwen3) -> Path:
    return tiny_qwen3


@pytest.fixture(scope="module")
def hidden(model):
    """Token ids and HF's ``hidden_states`` for them (embeddings, each decoder layer's output, the final norm's)."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(model))
    ids = torch.randint(3, 1000, (19,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        states = hf(ids[None], output_hidden_states=True).hidden_states
    return ids, [h[0] for h in states]


def _failing(result) -> list[tuple[str, str, str]]:
    return [(f.check, f.symbol, f.message) for f in result.failing()]


# EAGLE-3: EAGLE's own data keeps hidden_states[k] for layer k (the state entering decoder layer k).

def test_eagle3_layer_ids_are_checked_by_the_reference(model, hidden, tmp_path):
    ids, hs = hidden
    write_eagle(tmp_path / "data_0.ckpt", ids, torch.cat([hs[1], hs[2], hs[3]], dim=-1), target=hs[-1])
    for strict in (False, True):
        result = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model, layer_ids=(1, 2, 3),
                                      strict=strict))
        assert result.exit_code == 0, _failing(result)
        (sample,) = result.reference["samples"]
        assert [m["state"] for m in sample["layers"]] == [1, 2, 3, "final_norm"]
        assert [f.status for f in result.findings if f.check == "reference"] == [Status.OK]


def test_eagle3_layers_off_by_one_fail_the_reference(model, hidden, tmp_path):
    ids, hs = hidden
    # hidden_states[1..3] are the outputs of layers 0, 1, 2: ids 0, 1, 2 numbered the speculators way.
    write_eagle(tmp_path / "data_0.ckpt", ids, torch.cat([hs[1], hs[2], hs[3]], dim=-1), target=hs[-1])
    result = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model, layer_ids=(0, 1, 2)))
    assert result.exit_code == 1
    assert sorted(f.check for f in result.failing()) == ["partial_reference", "reference"]  # s_0 is not layer 0's
    (f,) = [f for f in result.failing() if f.check == "reference"]
    assert f.status is Status.BROKEN and "3 of 4 layers differ" in f.message
    assert [m["state"] for m in result.reference["samples"][0]["layers"]] == [0, 1, 2, "final_norm"]
    assert "All layers are off by one: the file follows --layer-numbering output" in f.message


# Flags against data_config.json: the file wins unless the flags are marked as overriding it.

def _speculators_dataset(directory: Path, hs, ids, layer_ids: list[int]) -> Path:
    """speculators' output numbering: layer id k is hidden_states[k + 1]."""
    write_speculators(directory / "data_0.pt", ids, [hs[k + 1] for k in layer_ids])
    write_data_config(directory, layer_ids, 64)
    return directory


def test_a_flag_against_data_config_fails_and_the_file_judges_the_samples(model, hidden, tmp_path):
    ids, hs = hidden
    _speculators_dataset(tmp_path, hs, ids, [0, 2])
    result = run_gate(GateOptions(paths=(tmp_path,), reference=model, layer_ids=(1, 3), hidden_size=96))
    assert result.exit_code == 1
    by_rule = {f.check: f for f in result.failing()}
    assert set(by_rule) == {"data_config"}, _failing(result)  # the samples, judged by the file, pass
    conflicts = [f for f in result.failing() if f.check == "data_config"]
    assert len(conflicts) == 2 and {f.symbol for f in conflicts} == {"data_config.json"}
    ids_finding = next(f for f in conflicts if "--layer-ids" in f.message)
    assert "--layer-ids [1, 3]" in ids_finding.message and "hidden_states.layer_ids [0, 2]" in ids_finding.message
    assert str(tmp_path / "data_config.json") in ids_finding.message
    size_finding = next(f for f in conflicts if "--hidden-size" in f.message)
    assert "--hidden-size 96" in size_finding.message and "model.hidden_size 64" in size_finding.message
    assert result.expected.layer_ids.value == (0, 2) and result.expected.hidden_size.value == 64
    assert [m["state"] for m in result.reference["samples"][0]["layers"]] == [1, 3]


def test_a_model_whose_hidden_size_is_not_the_data_configs_is_a_finding(model, hidden, tmp_path):
    ids, hs = hidden
    data = _speculators_dataset(tmp_path / "data", hs, ids, [0, 2])
    other = tmp_path / "other-model"  # another model's config: its hidden size is not the one the data was made with
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 96}))
    result = run_gate(GateOptions(paths=(data,), model=other))
    (f,) = result.failing()
    assert f.check == "data_config" and f.symbol == "data_config.json"
    assert "--model (hidden_size in" in f.message and "96" in f.message and "model.hidden_size 64" in f.message
    assert f.fix.startswith("pass the model that wrote this dataset")
    assert result.expected.hidden_size.value == 64  # the file judged the samples: they pass
    overridden = run_gate(GateOptions(paths=(data,), model=other, override_data_config=True))
    assert overridden.expected.hidden_size.value == 96
    assert {check for check, _, _ in _failing(overridden)} == {"hidden_size"}  # the model judged them: all off


def test_a_flag_marked_as_overriding_data_config_wins_and_is_reported(model, hidden, tmp_path):
    ids, hs = hidden
    # data_config.json copied from another run: it names [0, 2], the samples hold the outputs of layers 1 and 2.
    write_speculators(tmp_path / "data_0.pt", ids, [hs[2], hs[3]])
    write_data_config(tmp_path, [0, 2], 64)
    result = run_gate(GateOptions(paths=(tmp_path,), reference=model, layer_ids=(1, 2),
                                  override_data_config=True))
    assert result.exit_code == 0, _failing(result)
    (f,) = [f for f in result.findings if f.check == "data_config"]
    assert f.allowed and "--override-data-config" in f.allowed and f.symbol == "data_config.json"
    assert "--layer-ids [1, 2] overrides" in f.message and "hidden_states.layer_ids [0, 2]" in f.message
    assert result.expected.layer_ids.value == (1, 2) and "--override-data-config" in result.expected.layer_ids.source
    assert [m["state"] for m in result.reference["samples"][0]["layers"]] == [2, 3]
    without = run_gate(GateOptions(paths=(tmp_path,), reference=model, layer_ids=(1, 2)))
    assert {f.check for f in without.failing()} == {"data_config", "partial_reference", "reference"}


def test_the_cli_names_the_override_and_renders_the_dataset_finding_in_every_format(hidden, tmp_path):
    import json

    from compat.gate.cli import main

    ids, hs = hidden
    _speculators_dataset(tmp_path / "data", hs, ids, [0, 2])
    out = tmp_path / "report"
    for fmt in ("terminal", "json", "markdown", "junit", "github"):
        assert main([str(tmp_path / "data"), "--layer-ids", "1,3", "--format", fmt, "--output", str(out),
                     "--no-progress"]) == 1
        text = markdown_text(out.read_text()) if fmt == "markdown" else out.read_text()
        assert "data_config" in text and "[1, 3]" in text and "[0, 2]" in text, fmt
    report = json.loads(main([str(tmp_path / "data"), "--layer-ids", "1,3", "--override-data-config", "--format",
                              "json", "--output", str(out), "--no-progress"]) == 0 and out.read_text())
    (f,) = [f for f in report["findings"] if f["probe"] == "data_config"]
    assert f["allowed"] and report["options"]["override_data_config"] is True


# A sample of another layout among its dataset's.

def _speculators_files(directory: Path, n: int, masks: list[torch.Tensor] | None = None) -> None:
    for i in range(n):
        write_speculators(directory / f"data_{i}.pt", torch.arange(3, 11), layered(8, 16, 2, seed=i),
                          loss_mask=masks[i] if masks else None)


def test_a_vllm_dict_among_speculators_samples_fails_every_mode_two_datasets_in_two_directories_pass(tmp_path):
    _speculators_files(tmp_path / "speculators", 4)
    write_vllm(tmp_path / "vllm" / "hs_0.safetensors", torch.arange(3, 9), layered(6, 16, 3))
    write_eagle(tmp_path / "eagle" / "data_0.ckpt", torch.arange(3, 9), layered(6, 16, 1)[0])
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert result.exit_code == 0, _failing(result)
    assert dict(result.summary.layouts) == {"speculators-pt": 4, "vllm-safetensors": 1, "eagle": 1}
    # What vLLM's extraction writes, saved with torch.save under the speculators name, among speculators files.
    torch.save({"hidden_states": torch.stack(layered(8, 16, 2), dim=1), "token_ids": torch.arange(3, 11)},
               tmp_path / "speculators" / "data_4.pt")
    for values in (False, True):
        result = run_gate(GateOptions(paths=(tmp_path,), values=values))
        assert result.exit_code == 1
        (f,) = result.failing()
        assert (f.check, f.symbol) == ("layout", "speculators/data_4.pt")
        assert "follows vllm-safetensors" in f.message and "its dataset is speculators-pt" in f.message
        assert "4 of the 5 samples" in f.message and "'input_ids'" in f.message


# Loss masks that train nothing: read with --values, where the mask's values are read anyway.

def test_one_all_zero_mask_is_a_finding_on_its_sample(tmp_path):
    masks = [torch.ones(8, dtype=torch.long) for _ in range(4)]
    masks[2] = torch.zeros(8, dtype=torch.long)
    _speculators_files(tmp_path, 4, masks)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    (f,) = result.failing()
    assert (f.check, f.symbol) == ("loss_mask", "data_2.pt") and "all zero" in f.message
    assert "1 of 4" in f.message and result.exit_code == 1


def test_every_mask_all_zero_is_one_finding_for_the_dataset(tmp_path):
    _speculators_files(tmp_path / "data", 4, [torch.zeros(8, dtype=torch.bool) for _ in range(4)])
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    (f,) = result.failing()
    assert (f.check, f.symbol) == ("loss_mask", "data") and "4 of 4" in f.message
    assert result.exit_code == 1 and result.failures_by_rule() == {"loss_mask": 1}
    assert run_gate(GateOptions(paths=(tmp_path,), values=True, ignore=frozenset({"loss_mask"}))).exit_code == 0


def test_float_masks_of_zeros_and_ones_still_pass(tmp_path):
    masks = [torch.tensor([0.0] * 3 + [1.0] * 5) for _ in range(4)]
    _speculators_files(tmp_path, 4, masks)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert result.exit_code == 0, _failing(result)
    assert {f.check for f in result.findings if f.allowed} == {"loss_mask"}  # float, not all zero
    _speculators_files(tmp_path, 4, [torch.zeros(8) for _ in range(4)])
    (f,) = run_gate(GateOptions(paths=(tmp_path,), values=True)).failing()
    assert f.check == "loss_mask" and "every loss_mask is all zero" in f.message
