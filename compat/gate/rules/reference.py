"""The ``reference`` rule: stored layers agree with HF transformers' recomputation (``compat.gate.recompute``)."""

from __future__ import annotations

from collections.abc import Sequence

from compat.findings import Status
from compat.gate.pairing import Pairing
from compat.gate.partial import Partial
from compat.gate.read.layouts import Layout
from compat.gate.recompute import BASELINE_MARGIN, Comparison, ComparisonError, LayerMatch, state_name
from compat.gate.rules.rule import Context, Phase, ReferenceSubject, Rule, RuleFinding, some


def _reference(c: ReferenceSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if isinstance(c, Pairing):
        return ()
    if isinstance(c, ComparisonError):
        return [RuleFinding(f"reference check could not run: {c.error_type}: {c.message}", status=Status.ERROR,
                            found=c.error_type, traceback=c.traceback)]
    if not isinstance(c, Comparison):
        return ()
    layers = c.layers
    problems = []
    for m in layers:
        # Written so that a NaN fails: it compares as neither above nor below a tolerance.
        if not (m.rel <= m.max_rel and m.min_cos >= m.required_cos):
            msg = (f"{c.view.layers[m.slot].name}: relative error {m.rel:.3g} (max {m.max_rel:.3g}{_why(m)}), min "
                   f"cosine {m.min_cos:.4f} (min {m.required_cos:.4g}) against "
                   f"{state_name(m.state, c.n_layers) if m.state is not None else '-'}")
            if m.best_state is not None and m.best_state != m.state and m.best_rel is not None \
                    and m.best_rel <= m.max_rel:
                msg += f"; it matches {state_name(m.best_state, c.n_layers)} (relative error {m.best_rel:.3g})"
            problems.append(msg)
    writer = _PRE_NORM_WRITERS.get(c.view.layout)
    if writer is not None:
        # The writer takes every state from the residual stream before the final norm (the last layer's output
        # is id n, s_n): a stored layer that is the state after it was not written by this writer's rules.
        problems += [f"{c.view.layers[m.slot].name} is the state after the final norm, which {writer} never "
                     f"stores (its last layer is {state_name(c.n_layers, c.n_layers)})"
                     for m, want in zip(layers, c.expected_states) if want is None and m.state == "final_norm"]
    inferred = [m.state for m, want in zip(layers, c.expected_states) if want is None and isinstance(m.state, int)]
    if c.inferred and not problems and (inferred != sorted(inferred) or len(set(inferred)) != len(inferred)):
        problems.append(f"stored layers match residual-stream states [{some([str(i) for i in inferred])}]: not in "
                        "increasing depth")
    matched = some([str(m.state) for m in layers])
    expected = f"states [{some([str(m.state) for m in layers])}]"
    if problems:
        hint = ""
        numbered = [m for m in layers if isinstance(m.state, int)]  # not EAGLE's final states, which have no id
        if not c.inferred and len(numbered) == len(problems) and all(
                m.best_state is not None and isinstance(m.state, int)
                and m.best_state == m.state + (1 if c.numbering == "input" else -1) for m in numbered):
            other = "output" if c.numbering == "input" else "input"
            hint = f" All layers are off by one: the file follows --layer-numbering {other}."
        return [RuleFinding(f"{len(problems)} of {len(layers)} layers differ from HF transformers: "
                            + some(problems, "; ") + hint,
                            "check the layer ids and numbering convention, the slicing, and the model weights",
                            expected=expected, found=matched)]
    worst = max(layers, key=lambda m: m.rel)
    loose = [m for m in layers if not m.decisive]
    if loose and not c.inferred:
        # A layer is loose only against another state (other_rel set), so other_state is set too.
        names = some([f"{c.view.layers[m.slot].name}: bound {m.max_rel:.3g}{_why(m)}, but "
                      f"{state_name(m.other_state, c.n_layers) if m.other_state is not None else '-'} is only "
                      f"{m.other_rel:.3g} away" for m in loose], "; ")
        return [RuleFinding(f"{len(loose)} of {len(layers)} layers are within their bound, but the bound cannot tell "
                            f"their state from another one: {names}", "recompute in float32, or compare with "
                            "--max-rel below the distance to the nearest other state",
                            expected=expected, found=matched, status=Status.UNKNOWN)]
    if c.inferred:
        return [RuleFinding(
            f"{len(layers)} layers match HF transformers' states {matched} (worst relative error {worst.rel:.2g}, "
            f"tolerance {worst.max_rel:.2g}), in increasing depth. Not verified: that these are the layers the "
            "extraction was asked for. Without layer ids each layer was matched to its closest state, so a "
            "numbering off by one, or a final state taken before the final norm, would match as well",
            "pass --layer-ids (or keep speculators' data_config.json beside the files) to verify the numbering",
            expected="states from layer ids", found=matched, status=Status.UNKNOWN)]
    return [RuleFinding(f"{len(layers)} layers match HF transformers (states {matched}; worst relative error "
                        f"{worst.rel:.2g}, tolerance {worst.max_rel:.2g}{_why(worst)})", status=Status.OK)]


_PRE_NORM_WRITERS = {
    Layout.VLLM_SAFETENSORS: "vLLM's hidden-state connector (and speculators >= 0.5, which caches its files)",
    Layout.SPECULATORS_PT: "speculators 0.3.0's capture (each layer's hidden_states + residual)",
}
"""Layouts whose writers capture only residual-stream states before the final norm (EAGLE's ``target`` and
EAGLE-1/2's one state are after it, by their writers' rules)."""


def _why(m: LayerMatch) -> str:
    """Where a layer's bound came from, when the dtype's measured error set it."""
    if m.baseline_rel is None or m.max_rel > BASELINE_MARGIN * m.baseline_rel + 1e-12:
        return ""
    return f": {BASELINE_MARGIN:g}x HF's own {m.baseline_rel:.3g} in this dtype"


REFERENCE = Rule(
    "reference", "--reference: HF transformers on the same weights reproduces each layer within the dtype's "
                 "tolerance (relative L2 error and per-token cosine)",
    Phase.REFERENCE, _reference)


def _partial(p: ReferenceSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(p, Partial) or p.passed:
        return ()
    rows = ""
    if p.bad_rows:
        more = " and more" if len(p.bad_rows) == 8 else ""
        rows = (f"; rows {', '.join(map(str, p.bad_rows))}{more} of {p.rows} have cosine below "
                f"{p.bound.min_cos:.4g} with their own tokens' states")
    state = state_name(p.state, p.n_layers)
    return [RuleFinding(
        f"{p.view.layers[p.slot].name} is not what the model recomputed up to it gives ({state}; {p.state} of "
        f"{p.n_layers} layers run): relative error {p.rel:.3g} (max {p.bound.max_rel:.3g}), min cosine "
        f"{p.min_cos:.4f} (min {p.bound.min_cos:.4g}){rows}",
        "these states are not this sample's tokens' states under these weights: check the checkpoint the sample "
        "was extracted with, its slicing per sample and the token ids stored with it",
        expected=state, found=f"relative error {p.rel:.3g}")]


PARTIAL = Rule(
    "partial_reference", "--reference, every sample with layer ids: its shallowest stored layer agrees with the "
                         "model's embeddings and the layers up to it, recomputed (row by row, the dtype's bound)",
    Phase.REFERENCE, _partial)


def _pairing(p: ReferenceSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(p, Pairing):
        return ()
    if p.verdict == "error":
        return [RuleFinding(f"token pairing could not be measured: {p.error_type}: {p.message}", status=Status.ERROR,
                            found=p.error_type, traceback=p.traceback)]
    if p.verdict == "ok" or p.lean is None or p.typical is None:  # a pairing judged has both
        return ()
    lean = (f"{p.layer} leans {p.lean.mean:.3g} (standard error {p.lean.se:.2g}) toward its tokens' embeddings, "
            f"where the typical sample leans {p.typical:.3g}")
    if p.verdict == "mismatch":
        return [RuleFinding(f"the stored rows do not belong to these token ids: {lean}. The states were stored with "
                            "another sample's ids, or shifted against them", "pair each sample's states with its own "
                            "token ids (check the per-sample slicing and the order results are saved in)",
                            expected=f"lean about {p.typical:.3g}", found=f"{p.lean.mean:.3g}")]
    return [RuleFinding(f"token pairing undecided: {lean}, a shortfall within this short sample's noise",
                        status=Status.UNKNOWN, expected=f"lean about {p.typical:.3g}", found=f"{p.lean.mean:.3g}")]


PAIRING = Rule(
    "pairing", "--reference, every sample: the stored rows lean toward their own tokens' embeddings as much as the "
               "dataset's typical sample does (states stored with another sample's ids do not; no model run)",
    Phase.REFERENCE, _pairing)
