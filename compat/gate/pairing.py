"""``--reference``, on every sample, not only the few recomputed: do the stored rows belong to the stored token ids?

A stored state is its token's embedding plus what the layers added, so (centred) it leans toward its own
token's embedding row more than toward other tokens' rows. Per sample and stored layer, over its tokens:
``d_t = cos(h_t, e[id_t]) - cos(h_t, e[id_(t + T/2)])``, the second term pairing each row with another token of
the same sample (the ids rolled by half its length). A sample stored with another sample's ids, or with its
rows shifted by a token, loses the lean: the mean of ``d_t`` falls to zero.

The lean's size depends on the model and the layer, so it is calibrated on the dataset itself: the stored
layer where the typical sample leans furthest from zero (in standard errors) is used, and a sample is a
mismatch when its lean is below half the typical lean by more than four of its own standard errors. No model
runs: it costs one read of each sample's layers and an embedding lookup per token.
"""

from __future__ import annotations

import statistics
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

from compat.gate.read.tensor_data import open_sample
from compat.gate.read.views import SampleView

USABLE = 6.0
"""The typical sample's lean must be this many standard errors above zero for the check to decide anything."""
MARGIN = 4.0
"""A mismatch falls short of half the typical lean by more than this many of its own standard errors."""
_ROWS = 4096


@dataclass(frozen=True)
class Lean:
    """One stored layer of one sample: the mean of ``d_t`` over its tokens and its standard error."""

    mean: float
    se: float


@dataclass(frozen=True)
class Pairing:
    """The verdict on one sample: ``ok``, ``mismatch``, ``undecided`` (too few tokens to tell) or ``error``."""

    view: SampleView
    verdict: str
    layer: str | None = None
    lean: Lean | None = None
    typical: float | None = None
    message: str | None = None
    error_type: str | None = None
    traceback: str | None = None


@dataclass(frozen=True)
class PairingRun:
    pairings: list[Pairing]
    summary: dict


def _lean(st, embedding, slots: int) -> list[Lean]:
    import torch

    ids = st.token_ids().long()
    tokens = int(ids.numel())
    if tokens < 2:
        return [Lean(0.0, float("inf"))] * slots
    if int(ids.min()) < 0 or int(ids.max()) >= embedding.shape[0]:
        raise ValueError(f"token ids outside the reference model's vocabulary of {embedding.shape[0]}")
    other = ids.roll(tokens // 2)
    leans = []
    for slot in range(slots):  # one layer in memory at a time
        h = st.layer(slot).float()
        h = h - h.mean(dim=0, keepdim=True)
        d = torch.empty(tokens)
        for start in range(0, tokens, _ROWS):
            stop = min(tokens, start + _ROWS)
            own, rolled, rows = embedding[ids[start:stop]], embedding[other[start:stop]], h[start:stop]
            norm = rows.norm(dim=-1).clamp_min(1e-30)
            d[start:stop] = ((rows * own).sum(-1) / (norm * own.norm(dim=-1).clamp_min(1e-30))
                             - (rows * rolled).sum(-1) / (norm * rolled.norm(dim=-1).clamp_min(1e-30)))
        d = torch.nan_to_num(d, nan=0.0)
        leans.append(Lean(float(d.mean()), float(d.std()) / tokens ** 0.5))
    return leans


def check_pairing(views: Sequence[SampleView], embedding) -> PairingRun:
    """Measure every sample's lean toward its own tokens and judge it against the dataset's typical lean."""
    embedding = (embedding - embedding.mean(dim=0, keepdim=True)).float()
    leans: dict[int, list[Lean]] = {}
    out: list[Pairing | None] = [None] * len(views)
    for k, view in enumerate(views):
        if view.layers[0].shape[-1] != embedding.shape[1]:
            continue  # a hidden size that is not the model's is the hidden_size rule's finding
        try:
            with open_sample(view) as st:
                leans[k] = _lean(st, embedding, len(view.layers))
        except Exception as exc:  # noqa: BLE001 - a sample that cannot be measured is a finding, the rest go on
            out[k] = Pairing(view, "error", message=str(exc) or type(exc).__name__, error_type=type(exc).__name__,
                             traceback=traceback.format_exc(limit=-8))
    slot, typical, strength = _calibrate(leans)
    summary: dict[str, object] = {"samples": len(views), "checked": 0, "layer": None, "typical_lean": typical,
               "strength": strength}
    if slot is None or typical is None:  # a slot is chosen only with its typical lean
        summary["note"] = (f"not decided: no stored layer leans toward its tokens' embeddings by {USABLE:g} standard "
                           "errors in the typical sample")
        return PairingRun([p for p in out if p is not None], summary)
    for k, layers in leans.items():
        view, lean = views[k], layers[slot]
        name = view.layers[slot].name
        short = typical / 2 - lean.mean
        if short > MARGIN * lean.se:
            verdict = "mismatch"
        elif lean.mean < typical / 2:
            verdict = "undecided"
        else:
            verdict = "ok"
        out[k] = Pairing(view, verdict, name, lean, typical)
    summary.update(checked=len(leans), layer=views[next(iter(leans))].layers[slot].name)
    return PairingRun([p for p in out if p is not None], summary)


def _calibrate(leans: dict[int, list[Lean]]) -> tuple[int | None, float | None, float | None]:
    """The stored slot whose typical lean is furthest from zero in standard errors, if far enough."""
    if not leans:
        return None, None, None
    slots = min(len(v) for v in leans.values())
    best: tuple[int | None, float | None, float | None] = (None, None, None)
    for slot in range(slots):
        means = [v[slot].mean for v in leans.values()]
        ses = [v[slot].se for v in leans.values() if v[slot].se < float("inf")]
        if not ses:
            continue
        typical, se = statistics.median(means), statistics.median(ses)
        strength = typical / se if se > 0 else float("inf") if typical > 0 else 0.0
        if best[2] is None or strength > best[2]:
            best = (slot, typical, strength)
    if best[2] is None or best[2] < USABLE:
        return None, best[1], best[2]
    return best
