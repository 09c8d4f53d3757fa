"""The seed's failures, rebuilt by their mechanism on a tiny model's real hidden states, each rejected by the
rule that explains it: 771 tensors of [512]; a batch not sliced per sample; the wrong dtype; a layer count
off by one; NaN in one layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.findings import Status
from compat.gate import GateOptions, run_gate

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from .gate_files import speculators_generate_slicing  # noqa: E402
from .seed_dataset import LAYER_IDS, captured_batch, tiny_llama, write_samples  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("m") / "llama")


@pytest.fixture(scope="module")
def batch(model):
    return captured_batch(model)


def _write(directory: Path, results: list[dict], layer_ids=LAYER_IDS) -> Path:
    return write_samples(directory, results, layer_ids)


def _gate(directory: Path, model: Path, **kw):
    return run_gate(GateOptions(paths=(directory,), model=model, **kw))


def _failing(result, rule: str):
    return [f for f in result.failing() if f.check == rule]


def test_correct_slicing_passes_header_and_values(tmp_path, model, batch):
    aux, prompts = batch
    d = _write(tmp_path, speculators_generate_slicing(aux, prompts))
    result = _gate(d, model, values=True)
    assert result.exit_code == 0, [f.message for f in result.failing()]
    assert result.summary.samples == 2 and result.summary.tokens == 771
    assert result.expected.layers.value == 4 and "data_config.json" in result.expected.layers.source


def test_771_tensors_of_512_fail_layer_shape_and_count(tmp_path, model, batch):
    aux, prompts = batch
    # The seed's bug: collective_rpc(..., unique_reply_rank=0) already returned rank 0's list of layers,
    # so `[0]` picked the first layer's [771, H] tensor, which generate() then iterated as "layers".
    results = speculators_generate_slicing(aux[0], prompts)
    assert len(results[0]["hidden_states"]) == 771 and results[0]["hidden_states"][0].shape == (512,)
    result = _gate(_write(tmp_path, results), model)
    assert result.exit_code == 1
    shape = _failing(result, "layer_shape")
    assert {f.symbol for f in shape} == {"data_0.pt", "data_1.pt"}
    first = next(f for f in shape if f.symbol == "data_0.pt")
    assert "771 of 771 layers" in first.message and "[512]" in first.message and "collective_rpc" in first.message
    count = _failing(result, "layer_count")
    assert len(count) == 2 and all("771 layers where 4" in f.message for f in count)


def test_batch_not_sliced_per_sample_fails_seq_len(tmp_path, model, batch):
    aux, prompts = batch
    unsliced = [{"input_ids": torch.tensor(prompts[0]), "hidden_states": aux}]  # every layer keeps all 771 rows
    result = _gate(_write(tmp_path, unsliced), model)
    (finding,) = _failing(result, "seq_len")
    assert "771 rows" in finding.message and "512 tokens" in finding.message and "259 rows too many" in \
        finding.message
    assert {f.check for f in result.failing()} == {"seq_len"}


def test_wrong_dtype_fails_dtype(tmp_path, model, batch):
    aux, prompts = batch
    as_float32 = speculators_generate_slicing([h.float() for h in aux], prompts)  # extracted with dtype=float32
    result = _gate(_write(tmp_path, as_float32), model)
    assert {f.check for f in result.failing()} == {"dtype"}
    assert all("float32, expected bfloat16" in f.message and "config.json" in f.message for f in result.failing())
    assert run_gate(GateOptions(paths=(tmp_path,), model=model, dtype="fp32")).exit_code == 0  # --dtype overrides


@pytest.mark.parametrize("stored", [3, 5])
def test_layer_count_off_by_one_fails_layer_count(tmp_path, model, batch, stored):
    aux, prompts = batch
    layers = aux[:stored] if stored < 4 else aux + [aux[-1] * 2]
    result = _gate(_write(tmp_path, speculators_generate_slicing(layers, prompts)), model)
    findings = _failing(result, "layer_count")
    assert len(findings) == 2 and {f.check for f in result.failing()} == {"layer_count"}
    assert f"{stored} layers where 4 [0, 1, 2, 3] were expected" in findings[0].message
    assert "one layer too many or too few" in findings[0].message


def test_nan_in_one_layer_fails_finite_with_each_policy(tmp_path, model, batch):
    aux, prompts = batch
    results = speculators_generate_slicing(aux, prompts)
    results[1]["hidden_states"][2][17, 5] = float("nan")
    d = _write(tmp_path, results)
    assert _gate(d, model).exit_code == 0  # headers alone cannot see values
    failed = _gate(d, model, values=True)
    (finding,) = failed.failing()
    assert finding.check == "finite" and finding.symbol == "data_1.pt"
    assert "hidden_states[2] (layer 2): 1 NaN, 0 Inf, first at token 17" in finding.message
    warned = _gate(d, model, values=True, nonfinite="warn")
    assert warned.exit_code == 0 and [f.allowed for f in warned.findings if f.check == "finite"] == [
        "--nonfinite warn: reported, sample kept"]
    skipped = _gate(d, model, values=True, nonfinite="skip")
    assert skipped.exit_code == 0 and skipped.summary.skipped_samples == ("data_1.pt",)
    assert [f.status for f in skipped.findings if f.check == "finite"] == [Status.BROKEN]
