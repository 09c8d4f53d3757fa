"""The dataset comparison (``compat.gate.consistency``) on an MoE/MLA model's real hidden states, without
``--model``: a tiny DeepSeek-V3 run by HF transformers in bfloat16, most samples with one attention kernel and
some with another, as an engine's batch composition picks kernels. Their rounding differs a little, and where a
router's experts are near-tied it flips one for a token: the shared rows of those samples move by a few percent at
the layers after it, their first row stays alike. That is unknown without the model type (which gets a looser
floor), not broken; a sample off by as much at every shared row stays broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.findings import Status
from compat.gate import GateOptions, run_gate
from compat.gate.consistency import BATCH_ROUNDING
from compat.gate.recompute import TOLERANCES
from compat.models import build

from .gate_files import write_data_config, write_speculators

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HIDDEN = 128
LAYER_IDS = (0, 1, 2)
"""Layer 0 is dense, 1 and 2 are MoE."""
SAMPLES = 10
OTHER_KERNEL = (8, 9)
SHARED = 4


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """The model, its two kernels, and shared first tokens whose rows the two kernels put apart by more than
    bfloat16's floor (an expert flipped) but within the MoE/MLA model types' floor."""
    path = build("deepseek_v3", tmp_path_factory.mktemp("moe") / "deepseek_v3", hidden_size=HIDDEN).path
    kernels = {impl: transformers.AutoModelForCausalLM.from_pretrained(
        str(path), dtype=torch.bfloat16, attn_implementation=impl).eval() for impl in ("sdpa", "eager")}
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        prefix = torch.randint(3, 1000, (SHARED,), generator=g)
        a, b = (_states(hf, prefix) for hf in kernels.values())
        apart = max(_worst_row(x, y) for x, y in zip(a, b))
        if 1.3 * TOLERANCES["bfloat16"].max_rel < apart < 0.9 * BATCH_ROUNDING["deepseek_v3"].max_rel:
            return path, kernels, prefix
    pytest.fail("no shared first tokens whose rows the two kernels put apart")


def _worst_row(x, y) -> float:
    return ((x - y).float().norm(dim=-1) / x.float().norm(dim=-1)).max().item()


def _states(hf, ids) -> list:
    """speculators' layer_ids: the output of decoder layer k is HF's hidden_states[k + 1]."""
    with torch.no_grad():
        hs = hf(ids[None], output_hidden_states=True).hidden_states
    return [hs[k + 1][0] for k in LAYER_IDS]


def _dataset(directory: Path, moe, scaled: int | None = None) -> None:
    _, kernels, prefix = moe
    g = torch.Generator().manual_seed(1)
    for i in range(SAMPLES):
        ids = torch.cat([prefix, torch.randint(3, 1000, (int(torch.randint(14, 30, (1,), generator=g)),),
                                               generator=g)])
        layers = _states(kernels["eager" if i in OTHER_KERNEL else "sdpa"], ids)
        if i == scaled:
            layers = [1.05 * h for h in layers]
        write_speculators(directory / f"data_{i}.pt", ids, layers)
    write_data_config(directory, list(LAYER_IDS), HIDDEN)


def _consistency(result) -> dict[str, Status]:
    return {f.symbol: f.status for f in result.findings if f.check == "consistency" and f.status is not Status.OK}


def test_an_moe_dataset_whose_rows_vary_by_kernel_is_unknown_without_model_and_passes_with_it(moe, tmp_path):
    _dataset(tmp_path, moe)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    assert _consistency(result) == {f"data_{i}.pt": Status.UNKNOWN for i in OTHER_KERNEL}
    f = next(f for f in result.findings if f.symbol == f"data_{OTHER_KERNEL[0]}.pt" and f.check == "consistency")
    assert "agrees with them at" in f.message and "pass --model" in f.fix
    # With the model type, its floor decides: the rows are within it.
    result = run_gate(GateOptions(paths=(tmp_path,), values=True, model=moe[0], dtype="bfloat16"))
    assert result.exit_code == 0 and _consistency(result) == {}


def test_a_sample_off_by_a_few_percent_at_every_shared_row_stays_broken_without_model(moe, tmp_path):
    _dataset(tmp_path, moe, scaled=3)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert _consistency(result) == {"data_3.pt": Status.BROKEN,
                                    **{f"data_{i}.pt": Status.UNKNOWN for i in OTHER_KERNEL}}
