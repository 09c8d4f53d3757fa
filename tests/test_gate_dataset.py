"""Every sample against the rest of its dataset (``compat.gate.consistency``), on real hidden states of a tiny
model: prompts made with its chat template (so the samples share their first tokens, as real datasets do), states
from HF transformers. A scaled sample, a sample from a fine-tuned copy and a sample of repeated rows fail without
being recomputed; ``--reference`` recomputes the outliers first."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from compat.findings import Status
from compat.gate import GateOptions, run_gate
from compat.gate.recompute import TOLERANCES, compare
from compat.models import build

from .gate_files import write_data_config, write_speculators

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HIDDEN = 64
LAYER_IDS = (0, 2)
SAMPLES = 12
WORDS = "the of and to in is that for it as with was model layer hidden state token tensor shape cache".split()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return build("llama", tmp_path_factory.mktemp("dataset") / "llama", hidden_size=HIDDEN).path


def _prompts(model: Path, count: int, seed: int = 0) -> list:
    """Chat-formatted conversations of 20 to 150 tokens, tokenized by the model's own tokenizer."""
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        chat = [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 50)))},
                {"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 50)))}]
        out.append(torch.tensor(tok(tok.apply_chat_template(chat, tokenize=False))["input_ids"]))
    return out


def _states(hf, ids, dtype=torch.float32) -> list:
    """speculators' layer_ids: the output of decoder layer k is HF's hidden_states[k + 1]."""
    with torch.no_grad():
        hs = hf(ids[None], output_hidden_states=True).hidden_states
    return [hs[k + 1][0].to(dtype) for k in LAYER_IDS]


@pytest.fixture(scope="module")
def hf(model):
    return transformers.AutoModelForCausalLM.from_pretrained(str(model))


@pytest.fixture(scope="module")
def fine_tuned(model):
    """The same model after a small update of every weight but the embeddings (which the pairing check reads)."""
    copy = transformers.AutoModelForCausalLM.from_pretrained(str(model))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in copy.named_parameters():
            if "embed" not in name and "norm" not in name:
                p.add_(0.01 * p.std() * torch.randn(p.shape, generator=g))
    return copy


def _dataset(directory: Path, model: Path, hf, dtype=torch.float32, odd: dict | None = None) -> list[Path]:
    """``SAMPLES`` speculators samples; ``odd`` maps a sample's index to how its states are made instead."""
    paths = []
    for i, ids in enumerate(_prompts(model, SAMPLES)):
        layers = (odd or {}).get(i, lambda ids: _states(hf, ids, dtype))(ids)
        paths.append(write_speculators(directory / f"data_{i}.pt", ids, layers))
    write_data_config(directory, list(LAYER_IDS), HIDDEN)
    return paths


def _ratio(message: str) -> float:
    """The scale ratio a consistency finding reports."""
    return float(re.search(r"RMS is ([0-9.]+)x the dataset's median", message).group(1))


def _failing(result) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in result.failing():
        out.setdefault(f.check, []).append(f.symbol)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_correct_dataset_passes_and_says_what_was_compared(model, hf, tmp_path, dtype):
    _dataset(tmp_path, model, hf, dtype)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    (summary,) = result.consistency.values()
    assert summary["shared_prefix"]["samples"] == SAMPLES and summary["shared_prefix"]["note"] is None
    assert summary["scale"]["samples"] == SAMPLES and summary["outliers"] == 0


def test_a_sample_scaled_by_two_fails(model, hf, tmp_path):
    scaled = {7: lambda ids: [2 * h for h in _states(hf, ids, torch.bfloat16)]}
    _dataset(tmp_path, model, hf, torch.bfloat16, odd=scaled)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert _failing(result) == {"consistency": ["data_7.pt"]}
    (f,) = result.failing()
    assert "share its first" in f.message and _ratio(f.message) == pytest.approx(2, rel=0.1)


def test_a_sample_from_a_fine_tuned_copy_fails_without_being_recomputed(model, hf, fine_tuned, tmp_path):
    paths = _dataset(tmp_path, model, hf, odd={5: lambda ids: _states(fine_tuned, ids)})
    drifted = torch.load(paths[5])
    right = _states(hf, drifted["input_ids"])
    # The drift is one the reference check would find: over float32's tolerance at every stored layer...
    assert all(compare(h, r)[0] > TOLERANCES["float32"].max_rel for h, r in zip(drifted["hidden_states"], right))
    # ...and too small for the scale comparison, which is not what finds it.
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert _failing(result) == {"consistency": ["data_5.pt"]}
    (f,) = result.failing()
    assert "RMS" not in f.message and "fine-tuned copy" in f.message


def test_rows_repeated_across_different_tokens_fail(model, hf, tmp_path):
    def repeated(ids):
        layers = _states(hf, ids)
        return [h[:1].expand_as(h).clone() for h in layers]  # the first row stored for every token

    _dataset(tmp_path, model, hf, odd={3: repeated})
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert "data_3.pt" in _failing(result)["distinct_rows"]
    assert set(_failing(result)) <= {"distinct_rows", "consistency"}
    assert all(symbol == "data_3.pt" for symbols in _failing(result).values() for symbol in symbols)


def test_the_reference_recomputes_the_outliers_first_and_says_why(model, hf, fine_tuned, tmp_path):
    _dataset(tmp_path, model, hf, odd={9: lambda ids: _states(fine_tuned, ids)})
    result = run_gate(GateOptions(paths=(tmp_path,), reference=model, reference_samples=3))
    picked = result.reference["picked"]
    assert len(picked) == 3 and picked[0]["sample"].endswith("data_9.pt") and "row" in picked[0]["why"]
    assert picked[0]["why"].endswith("; the partial recompute found it too"), picked[0]["why"]
    assert all("random" in p["why"] for p in picked[1:])
    assert _failing(result) == {"consistency": ["data_9.pt"], "partial_reference": ["data_9.pt"],
                                "reference": ["data_9.pt"]}


def test_an_outlier_the_reference_reproduces_is_allowed(model, hf, tmp_path, monkeypatch):
    """With bounds so tight that right samples are set apart by their scale, the ones HF reproduces are allowed, and
    the ones not recomputed still fail: the reference is what clears an outlier."""
    from compat.gate import consistency

    monkeypatch.setattr(consistency, "SCALE_DEVIATIONS", 0.0)
    monkeypatch.setattr(consistency, "SCALE_FACTOR", 1.0)
    _dataset(tmp_path, model, hf)
    result = run_gate(GateOptions(paths=(tmp_path,), reference=model, reference_samples=3))
    picked = {p["sample"].rsplit("/", 1)[-1] for p in result.reference["picked"]}
    outliers = {f.symbol for f in result.findings if f.check == "consistency"}
    assert len(picked) == 3 and picked < outliers
    allowed = {f.symbol for f in result.findings if f.check == "consistency" and f.allowed}
    assert allowed == picked and set(_failing(result)["consistency"]) == outliers - picked


def test_without_shared_first_tokens_the_scale_still_compares(model, hf, tmp_path):
    g = torch.Generator().manual_seed(3)
    for i in range(SAMPLES):
        ids = torch.randint(3, 1000, (40,), generator=g)
        ids[0] = 1000 + i  # no two samples start alike
        layers = _states(hf, ids)
        write_speculators(tmp_path / f"data_{i}.pt", ids, [3 * h for h in layers] if i == 4 else layers)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    (summary,) = result.consistency.values()
    assert summary["shared_prefix"]["note"].startswith("not run")
    assert _failing(result) == {"consistency": ["data_4.pt"]}
    (f,) = result.failing()
    assert f.status is Status.BROKEN and _ratio(f.message) == pytest.approx(3, rel=0.1)


def test_repeated_rows_are_counted_across_read_parts(tmp_path, monkeypatch):
    """The count and the first repeated token are the same whether the sample is read whole or a few rows at a
    time (a repeat that straddles two parts included); a repeat of the same token, or of zeros, is not one."""
    from compat.gate import value_stats
    from compat.gate.read.files import read_file

    from .gate_files import write_vllm

    x = torch.randn(10, 3, 37)
    x[4, 1] = x[3, 1]  # token 4 repeats token 3 in the second layer
    x[7] = x[6]  # tokens 6 and 7 are the same token: allowed
    x[8:, 2] = 0  # zeros: zero_rows' finding
    ids = torch.tensor([5, 6, 7, 8, 9, 10, 11, 11, 12, 13])
    path = write_vllm(tmp_path / "r.safetensors", ids, x)
    whole = value_stats.scan_file(read_file(str(path)), False).samples[0]
    monkeypatch.setattr(value_stats, "CHUNK_BYTES", 4 * 3 * 37 * 4)  # four rows per part: 3 and 4 in two parts
    parts = value_stats.scan_file(read_file(str(path)), False).samples[0]
    for v in (whole, parts):
        assert [(s.repeated_rows, s.first_repeated) for s in v.layers] == [(0, None), (1, 4), (0, None)]


@pytest.mark.parametrize("hidden", [37, 300])  # kept as they are; projected
def test_the_first_rows_kept_are_the_same_however_the_sample_is_read(tmp_path, monkeypatch, hidden):
    """The first rows are kept from the scan's first part when it holds them, else read on their own: rows,
    layers or columns at a time, the kept rows (or their projections) are the same."""
    from compat.gate import value_stats
    from compat.gate.read.files import read_file

    from .gate_files import write_vllm

    x = torch.randn(10, 3, hidden)
    path = write_vllm(tmp_path / "p.safetensors", torch.arange(10), x)
    whole = value_stats.scan_file(read_file(str(path)), False).samples[0].prefix
    expected = x[:value_stats.PREFIX_ROWS].numpy()
    if hidden > value_stats.PROJECTED:
        expected = expected @ value_stats._projection(hidden)
    assert whole.ids == (0, 1, 2, 3) and np.allclose(whole.rows, expected, atol=1e-5)
    for chunk in (3 * hidden * 4 * 2, hidden * 4, 16):  # two rows, one layer's row, four columns at a time
        monkeypatch.setattr(value_stats, "CHUNK_BYTES", chunk)
        parts = value_stats.scan_file(read_file(str(path)), False).samples[0].prefix
        assert parts.ids == whole.ids and np.allclose(parts.rows, whole.rows, atol=1e-5), chunk


def test_two_models_datasets_side_by_side_are_not_compared_with_each_other(model, hf, fine_tuned, tmp_path):
    _dataset(tmp_path / "base", model, hf)
    _dataset(tmp_path / "tuned", model, fine_tuned)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    assert sorted(result.consistency) == ["base (speculators-pt)", "tuned (speculators-pt)"]
    assert all(c["shared_prefix"]["samples"] == SAMPLES for c in result.consistency.values())


def _run_of(directory: Path, hf, prompts: list, layer_ids: tuple[int, ...], stated: tuple[int, ...]) -> None:
    """One extraction run's files: each prompt's real states at ``layer_ids``, beside a data_config.json that
    states ``stated`` (the run's own ids, where it is right)."""
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            hs = hf(ids[None], output_hidden_states=True).hidden_states
            write_speculators(directory / f"data_{i}.pt", ids, [hs[k + 1][0] for k in layer_ids])
    write_data_config(directory, list(stated), HIDDEN)


def test_each_directory_is_judged_by_its_own_data_config(model, hf, tmp_path):
    """Two right runs of one model with other layer ids, in two directories under one root, each with its own
    data_config.json: the first config read judged both, and the second run's 4 samples failed layer_count. A
    third directory whose config says 3 layers while its files hold 2 passed, judged by the first config."""
    prompts = _prompts(model, 4)
    _run_of(tmp_path / "data" / "two", hf, prompts, (0, 2), (0, 2))
    _run_of(tmp_path / "data" / "three", hf, prompts, (0, 1, 3), (0, 1, 3))
    write_data_config(tmp_path / "data", [0, 2], HIDDEN)  # the top's: governs what no nearer one does
    result = run_gate(GateOptions(paths=(tmp_path / "data",), values=True))
    assert result.exit_code == 0, [(f.check, f.symbol, f.message) for f in result.failing()]
    assert sum("governs the files under its directory" in n for n in result.notes) == 3, result.notes
    _run_of(tmp_path / "data" / "short", hf, prompts, (0, 2), (0, 1, 3))
    result = run_gate(GateOptions(paths=(tmp_path / "data",), values=True))
    assert _failing(result) == {"layer_count": [f"short/data_{i}.pt" for i in range(4)]}, \
        [(f.check, f.symbol, f.message) for f in result.failing()]
    assert all("short/data_config.json" in f.message for f in result.failing()), \
        [f.message for f in result.failing()]


def _plain_prompts(count: int, seed: int = 3) -> list:
    """Token ids drawn at random, 40 to 80 of them: no two samples share first tokens, so the between-sample
    comparison has nothing to compare row by row."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1000, (int(torch.randint(40, 80, (1,), generator=g)),), generator=g)
            for _ in range(count)]


def _unwritten(states: list) -> list:
    """4 rows of float32 subnormals, each unlike the others, as memory never written reads."""
    out = [s.clone() for s in states]
    g = torch.Generator().manual_seed(11)
    for s in out:
        s[10:14] = torch.rand(s[10:14].shape, generator=g) * 1e-40
    return out


@pytest.mark.parametrize("odd", ["fine-tuned", "other-tokens-rows", "subnormal-rows"])
def test_every_sample_is_checked_against_the_model_up_to_its_first_layer(model, hf, fine_tuned, tmp_path, odd):
    """One sample among 12 from other weights, whose last 5 rows are another sample's, or with 4 rows of
    subnormals passed ``--reference`` whenever the full recompute (one sample here) picked another; recomputing
    every sample's shallowest stored layer (embeddings and layer 0 only) finds it, wherever it is."""
    prompts = _plain_prompts(SAMPLES)
    odd_at = 7
    for i, ids in enumerate(prompts):
        states = _states(fine_tuned if odd == "fine-tuned" and i == odd_at else hf, ids)
        if i == odd_at and odd == "other-tokens-rows":
            other = _states(hf, prompts[0])
            states = [torch.cat([s[:-5], o[:5]]) for s, o in zip(states, other)]
        if i == odd_at and odd == "subnormal-rows":
            states = _unwritten(states)
        write_speculators(tmp_path / f"data_{i}.pt", ids, states)
    write_data_config(tmp_path, list(LAYER_IDS), HIDDEN)
    result = run_gate(GateOptions(paths=(tmp_path,), reference=model, reference_samples=1))
    partial = [f for f in result.failing() if f.check == "partial_reference"]
    assert [f.symbol for f in partial] == [f"data_{odd_at}.pt"], [(f.check, f.symbol, f.message) for f in
                                                                   result.failing()]
    assert "is not what the model recomputed up to it gives" in partial[0].message
    if odd != "fine-tuned":
        assert "rows " in partial[0].message, partial[0].message
    summary = result.reference["partial"]
    assert (summary["samples"], summary["of"], summary["failed"], summary["deepest_state"]) == (SAMPLES, SAMPLES, 1, 1)
    assert result.reference["picked"][0] == {"sample": str(tmp_path / f"data_{odd_at}.pt"),
                                             "why": "the partial recompute found it"}, result.reference["picked"]


def test_a_right_dataset_passes_every_sample_s_partial_recompute(model, hf, tmp_path):
    for i, ids in enumerate(_plain_prompts(SAMPLES)):
        write_speculators(tmp_path / f"data_{i}.pt", ids, _states(hf, ids))
    write_data_config(tmp_path, list(LAYER_IDS), HIDDEN)
    result = run_gate(GateOptions(paths=(tmp_path,), reference=model, reference_samples=1))
    assert result.exit_code == 0, [(f.check, f.symbol, f.message) for f in result.failing()]
    assert result.reference["partial"]["samples"] == SAMPLES and result.reference["partial"]["failed"] == 0
    assert any("every sample's shallowest stored layer recomputed up to it: 12 of 12" in text
               for _, text in result.facts()), result.facts()


def test_rows_of_unwritten_memory_fail_without_a_model(model, hf, tmp_path):
    """4 rows of subnormals in one sample among 12 of real states passed --values (each row unlike the others, so
    no two repeat; no shared prefix, so the between-sample comparison did not look): a check of the sample alone
    finds them."""
    for i, ids in enumerate(_plain_prompts(SAMPLES)):
        states = _states(hf, ids)
        write_speculators(tmp_path / f"data_{i}.pt", ids, _unwritten(states) if i == 4 else states)
    write_data_config(tmp_path, list(LAYER_IDS), HIDDEN)
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert _failing(result) == {"zero_rows": ["data_4.pt"]}, [(f.check, f.symbol, f.message) for f in
                                                              result.failing()]
    assert "rows of values too small for any state in 2 of 2 layers" in result.failing()[0].message
