"""Rules on tensor values (``--values``), judged from each sound sample's statistics (``SampleValues``):
finite values, no all-zero layer, no duplicate layer, a plausible layer order."""

from __future__ import annotations

from collections.abc import Sequence

from compat.gate.expect import Expectations
from compat.gate.read.views import SampleView
from compat.gate.rules.rule import Context, Phase, Rule, RuleFinding, ValueSubject
from compat.gate.value_stats import SampleValues

NONFINITE_POLICIES = ("fail", "warn", "skip")
ORDER_RATIO = 0.5
"""layer_order fires when a later layer's median RMS is below this fraction of an earlier layer's."""


def slot_names(view: SampleView, exp: Expectations) -> list[str]:
    """Each stored layer's name, with its layer id when the ids are known: ``hidden_states[2] (layer 30)``."""
    ids = exp.stored_layer_ids(view)
    return [f"{t.name}" + (f" (layer {ids[i]})" if ids else "") for i, t in enumerate(view.layers)]


def _finite(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    names = slot_names(v.view, ctx.expected)
    bad = [(names[i], s) for i, s in enumerate(v.layers) if s.nan or s.inf]
    if not bad:
        return ()
    parts = "; ".join(f"{name}: {s.nan} NaN, {s.inf} Inf, first at token {s.first_bad}" for name, s in bad)
    allowed, skip = None, False
    if ctx.options.nonfinite == "warn":
        allowed = "--nonfinite warn: reported, sample kept"
    elif ctx.options.nonfinite == "skip":
        allowed, skip = "--nonfinite skip: sample excluded from the dataset", True
    return [RuleFinding(f"non-finite values in {len(bad)} of {len(v.layers)} layers: {parts}",
                        "find the overflowing layer (fp16 overflow, a bad weight shard) or drop the sample",
                        found=parts, allowed=allowed, skip_sample=skip)]


FINITE = Rule("finite", "--values: no NaN or Inf (policy --nonfinite fail|warn|skip)", Phase.VALUES, _finite)


def _nonzero_layer(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    names = slot_names(v.view, ctx.expected)
    return [RuleFinding(f"{names[i]} is all zeros: the capture never wrote this layer (a hook on the wrong module, "
                        "or a buffer returned before it was filled)", "check that the capture hook runs for this "
                        "layer id") for i, s in enumerate(v.layers) if not s.nonzero]


NONZERO_LAYER = Rule("nonzero_layer", "--values: no layer is all zeros", Phase.VALUES, _nonzero_layer)


def _distinct_layers(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    names = slot_names(v.view, ctx.expected)
    return [RuleFinding(f"{names[i]} and {names[j]} are identical: one layer was stored twice (duplicate layer ids, "
                        "or a reused capture buffer)", "capture each layer into its own tensor")
            for i, j in v.identical]


DISTINCT_LAYERS = Rule("distinct_layers", "--values: no two layers are identical", Phase.VALUES, _distinct_layers)


def _layer_order(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    view = v.view
    # Order slots by layer id when known (speculators keeps the order asked for, vLLM sorts), else as stored;
    # EAGLE-3's `target` is after the final norm, outside the residual stream's growth, so it is left out.
    slots = [i for i, t in enumerate(view.layers) if t.key != "target"]
    ids = ctx.expected.stored_layer_ids(view)
    if ids is not None and not view.layout.sorts_layers:
        slots.sort(key=lambda i: ids[i])
    medians = {i: v.layers[i].median_rms for i in slots}
    names = slot_names(view, ctx.expected)
    for a, i in enumerate(slots):
        for j in slots[a + 1:]:
            if medians[j] < ORDER_RATIO * medians[i]:
                return [RuleFinding(f"{names[j]} has median RMS {medians[j]:.4g}, less than half of {names[i]} "
                                    f"before it ({medians[i]:.4g}): the residual stream grows with depth, so the "
                                    "layers look reversed or shuffled (or the layer ids are wrong)",
                                    "store layers in the order of their ids; check the ids the extraction used",
                                    found=", ".join(f"{medians[k]:.4g}" for k in slots))]
    return ()


LAYER_ORDER = Rule(
    "layer_order", "--values: the residual stream's median per-token RMS does not fall below half its value at an "
                   "earlier layer (it grows with depth; a fall means layers reversed or shuffled)",
    Phase.VALUES, _layer_order)
