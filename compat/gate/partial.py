"""``--reference``, every sample: its shallowest stored layer against a recompute of the model up to it.

The full reference (``compat.gate.recompute``) runs the whole model on a few samples; a sample it does not pick
is not compared with anything, so one sample among twelve from another checkpoint, or whose last rows belong to
other tokens, passes. This check runs on every sound sample with known layer ids: it loads the embeddings and
the decoder layers up to the sample's shallowest stored state ``s_j`` (``j`` layers of the model's ``n``; a
truncated copy of the model's config, the rest of the checkpoint left unread) and compares that stored layer row
by row (relative L2 error, smallest per-token cosine) within the dtype's bound, measured as the full reference
measures it. Its cost per token is about ``j / n`` of the full reference's.

Samples without layer ids (nothing says which state a layer is) and layers that are EAGLE's final states are not
checked here: the report says how many samples the check saw and why the others were not.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat.gate.expect import Expectations
from compat.gate.options import GateOptions
from compat.gate.read.tensor_data import open_sample
from compat.gate.read.views import SampleView
from compat.gate.recompute import (
    LOW_PRECISION,
    ComparisonError,
    HFReference,
    Tolerance,
    compare,
    expected_states,
    reference_device,
    resolve_numbering,
    tolerance,
)


@dataclass(frozen=True)
class Partial:
    """One sample's shallowest stored layer against the model recomputed up to it."""

    view: SampleView
    slot: int
    state: int
    """The state the layer should be, ``s_j``: ``j`` decoder layers were run."""
    n_layers: int
    rel: float
    min_cos: float
    bound: Tolerance
    bad_rows: tuple[int, ...]
    """Rows whose cosine with their recomputed row is below the bound (the first few), where some are."""
    rows: int

    @property
    def passed(self) -> bool:
        return self.rel <= self.bound.max_rel and self.min_cos >= self.bound.min_cos  # a NaN fails both


@dataclass(frozen=True)
class PartialRun:
    checks: list[Partial | ComparisonError]
    summary: dict[str, Any]
    """The report's ``reference.partial``: samples checked, of how many, how deep, and why others were not."""


def _shallowest(view: SampleView, exp: Expectations, numbering: str) -> tuple[int, int] | None:
    """(slot, state) of the stored layer with the smallest known state; None where no layer's state is known."""
    known = [(state, slot) for slot, state in enumerate(expected_states(view, exp, numbering))
             if isinstance(state, int)]
    return (min(known)[1], min(known)[0]) if known else None


def check_every_sample(options: GateOptions, model_dir: Path, expected: Callable[[SampleView], Expectations],
                       candidates: list[SampleView]) -> PartialRun:
    """Each candidate's shallowest stored layer against the model recomputed up to it (one truncated model per
    depth and dtype, loaded once); ``expected`` gives each sample's expectations (its dataset's)."""
    device = reference_device(options.reference_device)
    plans = []
    unnamed = 0
    for view in candidates:
        numbering = resolve_numbering(options.layer_numbering, view.layout)
        exp = expected(view)
        found = _shallowest(view, exp, numbering) if exp.stored_layer_ids(view) is not None else None
        if found is None:
            unnamed += 1
        else:
            plans.append((view, *found))
    models: dict[tuple[int, str], HFReference] = {}
    checks: list[Partial | ComparisonError] = []
    depth = 0
    unlike = 0
    for view, slot, state in plans:
        try:
            checked = _check(view, slot, state, options, model_dir, device, models)
        except Exception as exc:  # noqa: BLE001 - one sample failing to run is a finding, the others still run
            checks.append(ComparisonError(view, str(exc), type(exc).__name__, traceback.format_exc()))
            continue
        if checked is None:
            unlike += 1
        else:
            checks.append(checked)
            depth = max(depth, state)
    n_layers = next((m.total_layers for m in models.values()), 0)
    summary: dict[str, Any] = {"samples": len(checks), "of": len(candidates), "failed": sum(
        1 for c in checks if not (isinstance(c, Partial) and c.passed)), "deepest_state": depth,
        "layers": n_layers}
    why = [f"{unnamed} without layer ids to say which state a stored layer is"] if unnamed else []
    why += [f"{unlike} whose layer is not the shape of the model's state (the header rules judge it)"] if unlike else []
    if why:
        summary["note"] = "not checked: " + "; ".join(why)
    return PartialRun(checks, summary)


def _check(view: SampleView, slot: int, state: int, options: GateOptions, model_dir: Path, device: str,
           models: dict[tuple[int, str], HFReference]) -> Partial | None:
    with open_sample(view) as st:
        ids = st.token_ids()
        stored = st.layer(slot)
    dtype = view.layers[slot].dtype

    def model(precision: str) -> HFReference:
        key = (state, precision)
        if key not in models:
            models[key] = HFReference(model_dir, device, precision, layers=max(state, 1))
        return models[key]

    reference = model("float32").states(ids)[state]
    if tuple(stored.shape) != tuple(reference.shape):
        return None  # not the model's width or token count: the header rules say so, nothing to compare here
    baseline = None
    if dtype in LOW_PRECISION and options.max_rel is None:
        baseline = compare(model(dtype).states(ids)[state], reference)  # the dtype's own error at this depth
    bound = tolerance(dtype, options.max_rel, options.min_cos, baseline)
    rel, min_cos = compare(stored, reference)
    bad: tuple[int, ...] = ()
    if min_cos < bound.min_cos or min_cos != min_cos:
        bad = _bad_rows(stored, reference, bound.min_cos)
    return Partial(view, slot, state, model("float32").total_layers, rel, min_cos, bound, bad, int(ids.numel()))


def _bad_rows(stored: Any, reference: Any, min_cos: float, keep: int = 8) -> tuple[int, ...]:
    import torch

    x, r = stored.float(), reference.float()
    cos = (x * r).sum(-1) / (x.norm(dim=-1) * r.norm(dim=-1)).clamp_min(1e-30)
    cos = torch.nan_to_num(cos, nan=-1.0)
    return tuple(int(i) for i in torch.nonzero(cos < min_cos).flatten()[:keep])
