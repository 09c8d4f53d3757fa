"""Every sample against the rest of its dataset, from what ``--values`` measured (no model runs): the
``consistency`` rule (``compat.gate.rules.dataset``) judges what this measures.

Two comparisons, each said to have run or not, and why:

- **Shared first tokens.** A causal model's state at position ``t`` depends only on tokens ``0..t``, so samples
  that start with the same tokens (a chat template's opening, a BOS token) must hold the same rows there, up
  to rounding. Per group of samples sharing a prefix, each stored layer's rows are compared with the group's
  median row: a sample is off when its relative distance exceeds both the dtype's floor (the reference's
  tolerance for that dtype, ``recompute.TOLERANCES``) and ``MARGIN`` times the group's own typical distance
  (the rounding of this extraction, measured). A sample made by other weights (a fine-tuned copy), scaled, or
  with its rows shifted is off by as much as the reference would find it off. A group of two that disagree
  cannot say which one is wrong: both are undecided. A stored layer where the typical sample is not within half
  the floor of its group decides nothing (synthetic data, or not one causal model's states), as the pairing
  check calibrates itself on the dataset. Each sample also counts the shared rows where it agrees with its group
  at every layer: kernels that round by batch leave some rows alike (the first, whose attention sees one token)
  and move the others by a few percent (an MoE router picks among near-tied experts, and a flip moves the
  layers after it), while other weights, a scale or shifted rows move every shared row
  (``PrefixDeviation.like_batch_rounding``).
- **Scale.** Per stored layer, each sample's per-token RMS against the other samples', position band by band
  (positions 1, 2-3, 4-7, ...: early tokens attend to few and are larger; the first token, the attention sink,
  is left out): its offset from each band's median over the samples (of each sample's mean log RMS there),
  averaged over its tokens; then in
  deviations: the dataset's robust spread of those offsets (1.4826 x their median absolute deviation) combined
  with the sample's own chance (a mean of T tokens strays by about their spread / sqrt(T)). A sample
  is off when it is more than ``SCALE_DEVIATIONS`` deviations and a factor ``SCALE_FACTOR`` away. Judged only
  where ``SCALE_MIN_SAMPLES`` samples of ``SCALE_MIN_TOKENS`` tokens or more have that shape.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from compat.gate.recompute import Tolerance, tolerance
from compat.gate.value_stats import Prefix, SampleValues

if TYPE_CHECKING:  # imported where samples are compared: header mode runs without numpy
    import numpy as np

MARGIN = 8.0
"""A sample is off when its distance to the group's median row is over this many times the group's typical one:
were the distances of right samples half-normal, 8 typical ones is 5.4 standard deviations, which one right sample
in ten million reaches (4 would be one in 150: dozens in a large dataset whose kernels round by batch)."""
BATCH_ROUNDING = {"deepseek_v2": Tolerance(8e-2, 0.95), "deepseek_v3": Tolerance(8e-2, 0.95),
                  "kimi_k2": Tolerance(8e-2, 0.95)}
"""How far two samples' rows at the same tokens may differ for MoE/MLA model types whose kernels round by batch (a
router's near-tied experts flip): only between samples of one dataset, never against the reference."""
LOOSEST = max(t.max_rel for t in BATCH_ROUNDING.values())
"""The loosest model type's floor (MoE/MLA): how far batch-dependent rounding may move such a model's rows.
Measured on a tiny DeepSeek-V3 extracted by vLLM in bfloat16, samples sharing first tokens differ by up to 6.5%
(1-4% typically) past their first row, with that row alike; a wrong or shifted sample is off by 50-150% at every
shared row."""
SCALE_DEVIATIONS = 8.0
SCALE_FACTOR = 1.25
SCALE_MIN_SAMPLES = 8
SCALE_MIN_TOKENS = 16


@dataclass(frozen=True)
class PrefixDeviation:
    """A sample's worst row among those it shares with other samples."""

    slot: int
    position: int
    tokens: tuple[int, ...]
    """The shared tokens, ``0..position``."""
    members: int
    """Samples sharing them, this one included."""
    distance: float
    """Relative L2 distance of this sample's row to the group's median row."""
    typical: float
    """The group's median distance: the rounding of this extraction."""
    bound: float
    floor: float
    decided: bool
    """False for a group of two: the two disagree, and which is wrong cannot be told."""
    agreeing: int = 0
    """This sample's shared rows where it is within the bound of its group at every compared layer."""

    @property
    def off(self) -> bool:
        return self.distance > self.bound

    @property
    def like_batch_rounding(self) -> bool:
        """Off, yet alike at one of its shared rows at every layer and within ``LOOSEST`` of the group: what
        kernels that round by batch make of an MoE/MLA model's rows, which only its model type can tell from a
        fault."""
        return self.off and self.agreeing > 0 and self.distance <= LOOSEST


@dataclass(frozen=True)
class ScaleDeviation:
    slot: int
    ratio: float
    """This sample's median per-token RMS over the dataset's median."""
    spread: float
    """The dataset's robust spread, as a factor (exp of 1.4826 x MAD of the logs)."""
    own: float
    """How far this sample's median may stray by chance (from its tokens' spread and count), as a factor."""
    deviations: float
    """``|log ratio|`` over the dataset's spread and this sample's own, combined."""
    samples: int
    rows: int
    """This sample's tokens."""

    @property
    def off(self) -> bool:
        gap = abs(math.log(self.ratio))
        return gap > math.log(SCALE_FACTOR) and self.deviations > SCALE_DEVIATIONS


@dataclass(frozen=True)
class Standing:
    """One sample against the rest: its worst shared row and its scale, where they were compared."""

    values: SampleValues
    prefix: PrefixDeviation | None = None
    scale: ScaleDeviation | None = None

    @property
    def outlier(self) -> bool:
        return bool((self.prefix and self.prefix.off) or (self.scale and self.scale.off))

    def why(self) -> str:
        """What makes it an outlier, in a few words (the reference's report says why it was recomputed)."""
        parts = []
        if self.prefix is not None and self.prefix.off:
            parts.append(f"row {self.prefix.position} of layer slot {self.prefix.slot} is {self.prefix.distance:.3g} "
                         f"from the {self.prefix.members - 1} other samples sharing its first tokens")
        if self.scale is not None and self.scale.off:
            parts.append(f"layer slot {self.scale.slot}'s RMS is {self.scale.ratio:.3g}x the dataset's")
        return "; ".join(parts)


@dataclass(frozen=True)
class Consistency:
    standings: list[Standing]
    summary: dict


def _shape(v: SampleValues) -> tuple:
    """Samples compared with each other: same layout, layers and hidden size, dtype."""
    first = v.view.layers[0]
    return v.view.layout, len(v.view.layers), first.shape[-1], first.dtype


def compare_samples(values: Sequence[SampleValues], model_type: str | None = None) -> Consistency:
    """Each sample's standing among those of its shape; the summary says which comparisons ran. ``model_type``
    (when a model config is given) sets the floor as it sets the reference's: looser for MoE/MLA models."""
    import numpy as np

    prefix: dict[int, PrefixDeviation] = {}
    scale: dict[int, ScaleDeviation] = {}
    groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    by_shape: dict[tuple, list[int]] = defaultdict(list)
    prefixes: dict[int, Prefix] = {}
    for k, v in enumerate(values):
        shape = _shape(v)
        by_shape[shape].append(k)
        if v.prefix is not None:
            prefixes[k] = v.prefix
            ids = v.prefix.ids
            for t in range(len(ids)):
                groups[(shape, ids[:t + 1])].append((k, t))
    # Each group's distances first, then the verdicts: a layer where samples sharing first tokens do not agree
    # typically (synthetic data, or not one causal model's states) decides nothing.
    measured: list[tuple[tuple, tuple, list[tuple[int, int]], list[list[float]]]] = []
    everyone: dict[tuple, list[float]] = defaultdict(list)
    for (shape, tokens), members in groups.items():
        if len(members) < 2:
            continue
        rows = np.stack([prefixes[k].rows[t] for k, t in members])  # [members, layers, width]
        median = _lower_median(rows)
        with np.errstate(invalid="ignore", over="ignore"):
            distance = (np.linalg.norm(rows - median, axis=-1) /
                        np.maximum(np.linalg.norm(median, axis=-1), np.float32(1e-30)))  # [members, layers]
        by_slot = np.nan_to_num(distance, nan=np.inf).T.tolist()
        measured.append((shape, tokens, members, by_slot))
        for slot, column in enumerate(by_slot):
            everyone[(shape, slot)] += column
    usable = {key: statistics.median(ds) <= _floor(key[0], model_type) / 2 for key, ds in everyone.items()}
    apart: dict[tuple[int, int], bool] = defaultdict(bool)  # a sample's shared row off at one layer or more
    for shape, tokens, members, by_slot in measured:
        floor = _floor(shape, model_type)
        for slot, column in enumerate(by_slot):
            if not usable[(shape, slot)]:
                continue
            typical = statistics.median(column)
            if len(members) == 2:
                # The median of two is their mean: each is half their distance from the other.
                bound, decided = floor / 2, False
            else:
                bound, decided = max(floor, MARGIN * typical), True
            for (k, t), d in zip(members, column):
                apart[(k, t)] |= d > bound
                if _worse((d > bound, decided, d / max(bound, 1e-30)), prefix.get(k)):  # made only when kept
                    prefix[k] = PrefixDeviation(slot, t, tokens, len(members), d, typical, bound, floor, decided)
    agreeing = Counter(k for (k, _), off in apart.items() if not off)
    prefix = {k: replace(p, agreeing=agreeing[k]) for k, p in prefix.items()}
    unusable = sorted({slot for (_, slot), ok in usable.items() if not ok})
    for shape, ks in by_shape.items():
        judged = [k for k in ks if (n := values[k].view.tokens) is not None and n >= SCALE_MIN_TOKENS]
        if len(judged) < SCALE_MIN_SAMPLES:
            continue
        for slot in range(shape[1]):
            _scale(values, judged, slot, scale)
    standings = [Standing(v, prefix.get(k), scale.get(k)) for k, v in enumerate(values)]
    summary = {
        "samples": len(values),
        "shared_prefix": {"groups": len(measured), "samples": len(prefix), "note": _prefix_note(measured, unusable)},
        "scale": {"samples": len(scale),
                  "note": None if scale else f"not run: fewer than {SCALE_MIN_SAMPLES} samples of "
                                             f"{SCALE_MIN_TOKENS} tokens or more of one shape"},
        "outliers": sum(s.outlier for s in standings),
    }
    return Consistency(standings, summary)


def _lower_median(rows: np.ndarray) -> np.ndarray:
    """The lower median over the first axis, NaN wherever a NaN is among the values (torch's ``median``)."""
    import numpy as np

    picked = np.sort(rows, axis=0)[(rows.shape[0] - 1) // 2]
    return np.where(np.isnan(rows).any(axis=0), np.nan, picked).astype(rows.dtype)


def _scale(values: Sequence[SampleValues], judged: list[int], slot: int, scale: dict[int, ScaleDeviation]) -> None:
    """Each judged sample's size at ``slot`` against the others', band of positions by band: its offset from each
    band's median over the samples, averaged over its tokens. In arrays (``[samples, bands]``): a dataset's
    samples are many."""
    import numpy as np

    layers = [values[k].layers[slot] for k in judged]
    bands = max(len(layer.by_position) for layer in layers)
    medians = np.full((len(layers), bands), np.nan)
    counts = np.zeros((len(layers), bands))
    by_bands: dict[int, list[int]] = defaultdict(list)  # samples of one token count have the same bands
    for i, layer in enumerate(layers):
        by_bands[len(layer.by_position)].append(i)
    for n, members in by_bands.items():
        if n:
            table = np.array([layers[i].by_position for i in members], dtype=np.float64)  # [samples, bands, 3]
            medians[members, :n], counts[members, :n] = table[:, :, 2], table[:, :, 1]
    finite = np.isfinite(medians)
    reference = np.array([np.median(medians[finite[:, b], b]) if finite[:, b].any() else 0.0 for b in range(bands)])
    weights = np.where(finite, counts, 0.0)
    has = weights.sum(axis=1) > 0
    if int(has.sum()) < SCALE_MIN_SAMPLES:
        return
    offsets = (weights * np.where(finite, medians - reference, 0.0)).sum(axis=1)[has] / weights.sum(axis=1)[has]
    center = float(np.median(offsets))
    spread = 1.4826 * float(np.median(np.abs(offsets - center)))
    rows = np.array([layer.rows for layer in layers])[has]
    # The dataset's spread, and this sample's own chance: a mean of T tokens whose logs spread by s strays by
    # about s / sqrt(T) (a short prompt's is a rough one).
    own = np.array([layer.spread for layer in layers])[has] / np.sqrt(np.maximum(1, rows - 1))
    width = np.hypot(spread, own)
    gap = np.abs(offsets - center)
    with np.errstate(divide="ignore", invalid="ignore"):
        deviations = np.where(width > 0, gap / width, np.where(gap > 0, np.inf, 0.0))
    kept = [k for k, h in zip(judged, has.tolist()) if h]
    for i, (k, d) in enumerate(zip(kept, deviations.tolist())):
        if (before := scale.get(k)) is None or d > before.deviations:  # made only when kept
            scale[k] = ScaleDeviation(slot, math.exp(offsets[i] - center), math.exp(spread), math.exp(own[i]), d,
                                      len(kept), int(rows[i]))


def _floor(shape: tuple, model_type: str | None) -> float:
    """The dtype's bound: what the reference accepts between vLLM and HF for that dtype (and model type)."""
    loose = BATCH_ROUNDING.get(model_type or "")
    return max(tolerance(shape[3], None, None).max_rel, loose.max_rel if loose else 0.0)


def _prefix_note(measured: list, unusable: list[int]) -> str | None:
    if not measured:
        return "not run: no two samples start with the same token"
    if unusable:
        return (f"not decided for layer slots {unusable}: samples that start with the same tokens do not agree there "
                "typically (not one causal model's states)")
    return None


def _worse(new: tuple[bool, bool, float], old: PrefixDeviation | None) -> bool:
    """The row to report: an off row before any other, a decided one before an undecided one, then the furthest
    past its bound (``new``: a row's ``(off, decided, distance / bound)``)."""
    return old is None or new > (old.off, old.decided, old.distance / max(old.bound, 1e-30))
