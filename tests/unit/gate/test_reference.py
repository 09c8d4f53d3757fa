"""compat/gate/rules/reference.py (--reference): ``reference`` (stored layers against HF transformers'
recomputation: match, differ, off by one, out of depth order, loose bound, inferred numbering, could not run) and
``pairing`` (the rows lean toward their own tokens' embeddings: mismatch, undecided, could not run), on files
written from a tiny random Qwen3 (built once per session, about 5 s)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from compat.findings import Status
from compat.gate.pairing import Lean, Pairing
from compat.gate.recompute import ComparisonError
from compat.gate.rules.reference import PAIRING, REFERENCE

from .conftest import one, write_data_config, write_eagle, write_speculators

HIDDEN = 64
TOKENS = 23


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    import os

    from compat.models import build

    old = os.environ.get("COMPAT_CACHE_DIR")
    os.environ["COMPAT_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return build("qwen3", tmp_path_factory.mktemp("qwen3") / "qwen3", hidden_size=HIDDEN).path
    finally:
        if old is None:
            del os.environ["COMPAT_CACHE_DIR"]
        else:
            os.environ["COMPAT_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def states(tiny_model):
    """Per prompt: its ids, each decoder layer's output (hooks) and the final-norm state."""
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model))
    outputs: list = []
    for layer in hf.model.layers:
        layer.register_forward_hook(lambda _m, _i, out: outputs.append(out[0] if isinstance(out, tuple) else out))
    found = []
    for seed in (1, 2, 3, 4):
        outputs.clear()
        ids = torch.randint(3, 1000, (TOKENS,), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            final = hf(ids[None], output_hidden_states=True).hidden_states[-1][0]
        found.append((ids, [o[0] for o in outputs], final))
    return found


def _run(gate, model, **options):
    return gate.run(model=model, reference=model, **options)


def _findings(result, rule):
    return [f for f in result.findings if f.check == rule]


@pytest.mark.parametrize(("stored", "layer_ids", "options", "status", "says"), [
    ((1, 3), (1, 3), {}, Status.OK, "2 layers match HF transformers (states 2, 4;"),
    ((1, 3), (2, 3), {}, Status.BROKEN, "1 of 2 layers differ from HF transformers: hidden_states[0]: relative error"),
    ((0, 2), (1, 3), {}, Status.BROKEN, "All layers are off by one: the file follows --layer-numbering input."),
    ((1, 3), None, {}, Status.UNKNOWN, "2 layers match HF transformers' states 2, 4 (worst relative error"),
    ((1, 2), (1, 2), {"max_rel": 5.0, "min_cos": -1.0}, Status.UNKNOWN,
     "layers are within their bound, but the bound cannot tell their state from another one"),
], ids=["match", "differs", "off by one", "inferred numbering", "loose bound"])
def test_reference_on_speculators_files(gate, tiny_model, states, stored, layer_ids, options, status, says):
    ids, outs, _ = states[0]
    write_speculators(gate.root / "data_0.pt", ids, [outs[k] for k in stored])
    if layer_ids is not None:
        write_data_config(gate.root, list(layer_ids), HIDDEN)
    one(_findings(_run(gate, tiny_model, **options), "reference"), status, says)


def test_reference_layers_out_of_depth_order(gate, tiny_model, states):
    ids, outs, final = states[0]
    write_eagle(gate.root / "data_0.ckpt", ids, torch.cat([outs[3], outs[1], outs[0]], dim=-1), target=final)
    one(_findings(_run(gate, tiny_model), "reference"), Status.BROKEN,
        "1 of 4 layers differ from HF transformers: stored layers match residual-stream states [4, 2, 1]: "
        "not in increasing depth")


def test_a_width_that_is_not_the_model_s_differs_without_error(gate, tiny_model, states):
    ids, outs, _ = states[0]
    write_speculators(gate.root / "data_0.pt", ids, [outs[1][:, :32], outs[3][:, :32]])
    write_data_config(gate.root, [1, 3], 32)
    result = _run(gate, tiny_model)
    one(_findings(result, "reference"), Status.BROKEN, "2 of 2 layers differ from HF transformers: hidden_states[0]: "
                                                       "relative error inf")
    assert _findings(result, "pairing") == []  # the hidden_size rule's finding
    assert _findings(result, "partial_reference") == []  # nor the partial recompute's: another width, not checked
    assert "1 whose layer is not the shape of the model's state" in result.reference["partial"]["note"]


def test_a_sample_the_reference_could_not_run_on():
    """No written file makes HF's recomputation or the pairing measurement raise (the gate's own rules stop such a
    sample first), so the errors they hand the rules are made here."""
    [ref] = REFERENCE.check(ComparisonError(None, "CUDA out of memory", "OutOfMemoryError", "Traceback ..."), None)
    assert (ref.status, ref.message, ref.found, ref.traceback) == (
        Status.ERROR, "reference check could not run: OutOfMemoryError: CUDA out of memory", "OutOfMemoryError",
        "Traceback ...")
    [pair] = PAIRING.check(Pairing(None, "error", message="short read", error_type="OSError", traceback="tb"), None)
    assert (pair.status, pair.message, pair.traceback) == (
        Status.ERROR, "token pairing could not be measured: OSError: short read", "tb")
    assert PAIRING.check(ComparisonError(None, "m", "E", "tb"), None) == ()


def test_rows_stored_with_another_sample_s_ids_do_not_pair(gate, tiny_model, states):
    for i, (ids, outs, _) in enumerate(states):
        other = states[(i + 1) % len(states)][0] if i == 0 else ids
        write_speculators(gate.root / f"data_{i}.pt", other, [outs[1], outs[3]])
    write_data_config(gate.root, [1, 3], HIDDEN)
    found = [f for f in _findings(_run(gate, tiny_model), "pairing") if f.status is not Status.OK]
    assert [(f.consumer_location, f.status) for f in found] == [("data_0.pt", Status.BROKEN)], \
        [(f.consumer_location, f.message) for f in found]
    assert "the stored rows do not belong to these token ids" in found[0].message


@pytest.mark.parametrize(("verdict", "status", "says"), [
    ("ok", None, ""),
    ("mismatch", Status.BROKEN, "the stored rows do not belong to these token ids: hidden_states[1] leans 0.01"),
    ("undecided", Status.UNKNOWN, "token pairing undecided: hidden_states[1] leans 0.01 (standard error 0.02)"),
], ids=["ok", "mismatch", "undecided"])
def test_each_pairing_verdict(verdict, status, says):
    """The verdicts a sample's lean gets, as the pairing measurement hands them to the rule."""
    found = PAIRING.check(Pairing(None, verdict, "hidden_states[1]", Lean(0.01, 0.02), 0.4), None)
    if status is None:
        assert found == ()
        return
    [finding] = found
    assert finding.status == status and says in finding.message and finding.expected == "lean about 0.4"
    assert REFERENCE.check(Pairing(None, verdict), None) == ()
