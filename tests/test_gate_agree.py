"""Flags and files agree: EAGLE-3's layer ids in the reference check, flags against data_config.json, a sample
of another layout among its dataset's, loss masks that train nothing (findings about a dataset as a whole)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.findings import Status
from compat.gate import GateOptions, run_gate
from compat.models import build

from .gate_files import layered, write_data_config, write_eagle, write_speculators, write_vllm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return build("qwen3", tmp_path_factory.mktemp("agree") / "qwen3", hidden_size=64).path


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
    (f,) = result.failing()
    assert f.check == "reference" and f.status is Status.BROKEN and "3 of 4 layers differ" in f.message
    assert [m["state"] for m in result.reference["samples"][0]["layers"]] == [0, 1, 2, "final_norm"]
    assert "All layers are off by one: the file follows --layer-numbering output" in f.message
