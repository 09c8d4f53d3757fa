"""Rules on tensor values (``--values``), judged from each sound sample's statistics (``SampleValues``):
finite values, no all-zero layer, no duplicate layer, a plausible layer order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from compat.gate.expect import Expectations
from compat.gate.read.views import SampleView
from compat.gate.rules.rule import SHOWN, Context, Phase, Rule, RuleFinding, ValueSubject
from compat.gate.value_stats import SampleValues

NONFINITE_POLICIES = ("fail", "warn", "skip")
T = TypeVar("T")
ORDER_RATIO = 0.5
"""layer_order fires when a later layer's median RMS is below this fraction of an earlier layer's."""


def slot_names(view: SampleView, exp: Expectations) -> SlotNames:
    """Each stored layer's name, with its layer id when the ids are known: ``hidden_states[2] (layer 30)``."""
    return SlotNames(view, exp)


class SlotNames:
    """``slot_names``, made when first read: every rule of every sample asks, and a sound sample's rules name no
    layer (making a sample's names cost more than its rules' checks)."""

    def __init__(self, view: SampleView, exp: Expectations) -> None:
        self._view, self._exp = view, exp
        self._names: list[str] | None = None

    def __len__(self) -> int:
        return len(self._view.layers)

    def __getitem__(self, i: int) -> str:
        if self._names is None:
            ids = self._exp.stored_layer_ids(self._view) or ()
            self._names = [t.name + (f" (layer {ids[k]})" if k < len(ids) else " (after the final norm)"
                                     if t.key == "target" else "") for k, t in enumerate(self._view.layers)]
        return self._names[i]


def _finite(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    names = slot_names(v.view, ctx.expected)
    bad = [(names[i], s) for i, s in enumerate(v.layers) if s.nan or s.inf]
    if not bad:
        return ()
    parts = "; ".join(f"{name}: {s.nan} NaN, {s.inf} Inf, first at token {s.first_bad}" for name, s in _first(bad))
    if len(bad) > SHOWN:
        parts += f"; and {len(bad) - SHOWN} more layers"
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
    zero = [names[i] for i, s in enumerate(v.layers) if not s.nonzero]
    if not zero:
        return ()
    what = f"{zero[0]} is" if len(zero) == 1 else f"{_listed(zero)} ({len(zero)} of {len(names)} layers) are"
    return [RuleFinding(f"{what} all zeros: the capture never wrote this layer (a hook on the wrong module, or a "
                        "buffer returned before it was filled)", "check that the capture hook runs for this layer id")]


NONZERO_LAYER = Rule("nonzero_layer", "--values: no layer is all zeros", Phase.VALUES, _nonzero_layer)


def _zero_rows(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    names = slot_names(v.view, ctx.expected)
    # A layer that is all zeros is nonzero_layer's finding; here, the rows of the others.
    bad = [(names[i], s.zero_rows, s.first_zero) for i, s in enumerate(v.layers) if s.zero_rows and s.nonzero]
    tiny = [(names[i], s.tiny_rows, s.first_tiny) for i, s in enumerate(v.layers) if s.tiny_rows]
    out = []
    if bad:
        parts = _rows_per_layer(bad, v.layers[0].rows)
        out.append(RuleFinding(f"rows of all zeros in {len(bad)} of {len(v.layers)} layers ({parts}): a token's state "
                               "is never all zeros, so these rows were never written (padding stored as states, a "
                               "buffer cut short, or rows lost in a batch)", "store only the rows of the sample's "
                               "real tokens, each captured", found=parts))
    if tiny:
        parts = _rows_per_layer(tiny, v.layers[0].rows)
        out.append(RuleFinding(f"rows of values too small for any state in {len(tiny)} of {len(v.layers)} layers "
                               f"({parts}): every value is below about 4e-23 (subnormals), which is what memory "
                               "never written reads, never a token's state", "store only the rows of the sample's "
                               "real tokens, each captured (an empty buffer was saved for these)", found=parts))
    return out


def _rows_per_layer(bad: list[tuple[str, int, int | None]], tokens: int) -> str:
    """``name: n of T rows, first at token t`` for the first layers of ``bad`` (name, rows, first), and how many
    more layers there are."""
    parts = "; ".join(f"{name}: {n} of {tokens} rows, first at token {first}" for name, n, first in _first(bad))
    return parts + (f"; and {len(bad) - SHOWN} more layers" if len(bad) > SHOWN else "")


ZERO_ROWS = Rule("zero_rows", "--values: no token's state is all zeros, or all values below about 4e-23 (subnormals: "
                              "memory never written), in any layer", Phase.VALUES, _zero_rows)


def _distinct_layers(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    names = slot_names(v.view, ctx.expected)
    ids = ctx.expected.stored_layer_ids(v.view)
    # Slots whose expected layer ids are one id hold one layer by design (speculators' default ids for six layers
    # are [2, 3, 3, 5]): alike as they must be. Any other identical slots are one layer stored twice.
    groups = [g for g in _not_empty(v) if ids is None or len({ids[i] for i in g if i < len(ids)}) > 1
              or any(i >= len(ids) for i in g)]
    return [RuleFinding(f"{_listed([names[i] for i in group])} are identical: one layer was stored "
                        f"{'twice' if len(group) == 2 else f'{len(group)} times'} (duplicate layer ids, or a reused "
                        "capture buffer)", "capture each layer into its own tensor") for group in _first(groups)]


def _not_empty(v: SampleValues) -> list[tuple[int, ...]]:
    """Groups of identical layers, leaving out all-zero layers (alike because empty: nonzero_layer's finding)."""
    return [group for group in v.identical if v.layers[group[0]].nonzero]


def _distinct_rows(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(v, SampleValues):
        return ()
    names = slot_names(v.view, ctx.expected)
    bad = [(names[i], s.repeated_rows, s.first_repeated) for i, s in enumerate(v.layers) if s.repeated_rows]
    if not bad:
        return ()
    parts = _rows_per_layer(bad, v.layers[0].rows)
    return [RuleFinding(f"rows equal to the row before them although their tokens differ, in {len(bad)} of "
                        f"{len(v.layers)} layers ({parts}): two different tokens never have the same state, so one "
                        "row was stored for several tokens (a broadcast, an index that did not advance)",
                        "store each token's own row", found=parts)]


DISTINCT_ROWS = Rule("distinct_rows", "--values: no token's row repeats the previous token's when the tokens differ",
                     Phase.VALUES, _distinct_rows)

DISTINCT_LAYERS = Rule("distinct_layers", "--values: no two layers are identical", Phase.VALUES, _distinct_layers)

def _first(items: Sequence[T]) -> Sequence[T]:
    return items[:SHOWN]


def _listed(names: Sequence[str]) -> str:
    if len(names) > SHOWN:
        return ", ".join(names[:SHOWN]) + f" and {len(names) - SHOWN} more"
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


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
    # Some earlier layer is over twice a later one exactly when the largest earlier one is: one pass.
    peak: int | None = None
    for j in slots:
        if peak is not None and medians[j] < ORDER_RATIO * medians[peak]:
            return [RuleFinding(f"{names[j]} has median RMS {medians[j]:.4g}, less than half of {names[peak]} "
                                f"before it ({medians[peak]:.4g}): the residual stream grows with depth, so the "
                                "layers look reversed or shuffled (or the layer ids are wrong)",
                                "store layers in the order of their ids; check the ids the extraction used",
                                found=", ".join(f"{medians[k]:.4g}" for k in _first(slots)))]
        if peak is None or medians[j] > medians[peak]:
            peak = j
    return ()


LAYER_ORDER = Rule(
    "layer_order", "--values: the residual stream's median per-token RMS does not fall below half its value at an "
                   "earlier layer (it grows with depth; a fall means layers reversed or shuffled)",
    Phase.VALUES, _layer_order)
