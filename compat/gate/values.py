"""``--values``: read each layer in bounded chunks and check finiteness, zero layers, duplicates, order.

Files are memory-mapped (safetensors slices, ``torch.load(mmap=True)``), so a 268 MB sample never sits in
memory whole; chunks are converted to float32 only for the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compat.findings import Status
from compat.gate.expect import Expectations
from compat.gate.read import Layout, SampleView
from compat.gate.read.tensor_data import SampleTensors
from compat.gate.rules import Verdict

CHUNK_BYTES = 32 << 20
NONFINITE_POLICIES = ("fail", "warn", "skip")
ORDER_RATIO = 0.5
"""layer_order fires when a later layer's median RMS is below this fraction of an earlier layer's."""


@dataclass
class _Layer:
    nan: int = 0
    inf: int = 0
    first_bad: int | None = None
    nonzero: bool = False
    rms: list = field(default_factory=list)


def _slot_names(view: SampleView, exp: Expectations) -> list[str]:
    ids = exp.layer_ids.value if exp.layer_ids and len(exp.layer_ids.value) == len(view.layers) else None
    if ids is not None and view.layout is Layout.VLLM_SAFETENSORS:
        ids = tuple(sorted(ids))  # vLLM stores aux layers in ascending id order, whatever order was asked
    return [f"{t.name}" + (f" (layer {ids[i]})" if ids else "") for i, t in enumerate(view.layers)]


@dataclass(frozen=True)
class ValueOutcome:
    verdicts: list[Verdict]
    bytes_read: int
    skipped: bool


def check_values(st: SampleTensors, exp: Expectations, nonfinite: str = "fail") -> ValueOutcome:
    """Value rules over one structurally sound sample (every layer [T, hidden], same shape)."""
    import torch

    view = st.view
    n, (tokens, hidden) = len(view.layers), view.layers[0].shape
    names = _slot_names(view, exp)
    stats = [_Layer() for _ in range(n)]
    same = {(i, j) for i in range(n) for j in range(i + 1, n)}
    itemsize = max(1, view.layers[0].nbytes // max(1, tokens * hidden))
    step = max(1, CHUNK_BYTES // max(1, n * hidden * itemsize))
    read = 0
    # Every statistic comes from one per-token, per-layer norm over the whole chunk: a few tensor operations
    # per chunk (not per layer, not per statistic) keep small files cheap and large ones near memory speed.
    # NaN and Inf propagate into the norm, and an all-zero layer has norm 0, so the exact (slower) scans run
    # only on chunks where the norm points at them.
    scale = hidden ** -0.5
    for start in range(0, tokens, step):
        x = st.block(start, min(tokens, start + step))
        read += x.numel() * x.element_size()
        xf = x.float()
        rms = torch.linalg.vector_norm(xf, dim=2) * scale  # [rows, layers]
        if not bool(torch.isfinite(rms).all()):
            finite = torch.isfinite(xf)
            nan = torch.isnan(xf)
            nans, infs = nan.sum(dim=(0, 2)).tolist(), (~finite & ~nan).sum(dim=(0, 2)).tolist()
            bad_rows = (~finite).any(dim=2)
            for i in range(n):
                s = stats[i]
                s.nan, s.inf = s.nan + nans[i], s.inf + infs[i]
                if s.first_bad is None and (nans[i] or infs[i]):
                    s.first_bad = start + int(bad_rows[:, i].nonzero()[0, 0])
        peak = rms.amax(dim=0).tolist()
        for i in range(n):
            if not stats[i].nonzero:
                # A norm of 0 can also be an underflow of tiny values: confirm with the values themselves.
                stats[i].nonzero = peak[i] > 0 or bool(xf[:, i].ne(0).any())
            stats[i].rms.append(rms[:, i])
        for i, j in list(same):
            # Equal layers have equal per-token RMS: compare whole rows only when those agree.
            if not torch.equal(rms[:, i], rms[:, j]) or not torch.equal(x[:, i], x[:, j]):
                same.discard((i, j))
    out: list[Verdict] = []
    skipped = False
    bad = [(names[i], s) for i, s in enumerate(stats) if s.nan or s.inf]
    if bad:
        parts = "; ".join(f"{name}: {s.nan} NaN, {s.inf} Inf, first at token {s.first_bad}" for name, s in bad)
        allowed = None
        if nonfinite == "warn":
            allowed = "--nonfinite warn: reported, sample kept"
        elif nonfinite == "skip":
            allowed, skipped = "--nonfinite skip: sample excluded from the dataset", True
        out.append(Verdict("finite", f"non-finite values in {len(bad)} of {n} layers: {parts}",
                           "find the overflowing layer (fp16 overflow, a bad weight shard) or drop the sample",
                           found=parts, allowed=allowed))
    for i, s in enumerate(stats):
        if not s.nonzero:
            out.append(Verdict("nonzero_layer", f"{names[i]} is all zeros: the capture never wrote this layer "
                               "(a hook on the wrong module, or a buffer returned before it was filled)",
                               "check that the capture hook runs for this layer id"))
    for i, j in sorted(same):
        out.append(Verdict("distinct_layers", f"{names[i]} and {names[j]} are identical: one layer was stored "
                           "twice (duplicate layer ids, or a reused capture buffer)",
                           "capture each layer into its own tensor"))
    out += _order(view, exp, names, stats)
    out += _ids_and_mask(st, exp)
    return ValueOutcome(out, read, skipped)


def _order(view: SampleView, exp: Expectations, names: list[str], stats: list[_Layer]) -> list[Verdict]:
    import torch

    # Order slots by layer id when known (speculators keeps the order asked for, vLLM sorts), else as stored;
    # EAGLE-3's `target` is after the final norm, outside the residual stream's growth, so it is left out.
    slots = [i for i, t in enumerate(view.layers) if t.key != "target"]
    ids = exp.layer_ids.value if exp.layer_ids and len(exp.layer_ids.value) == len(view.layers) else None
    if ids is not None and view.layout is not Layout.VLLM_SAFETENSORS:
        slots.sort(key=lambda i: ids[i])
    medians = {i: float(torch.nanmedian(torch.cat(stats[i].rms))) for i in slots}
    for a, i in enumerate(slots):
        for j in slots[a + 1:]:
            if medians[j] < ORDER_RATIO * medians[i]:
                return [Verdict("layer_order", f"{names[j]} has median RMS {medians[j]:.4g}, less than half of "
                                f"{names[i]} before it ({medians[i]:.4g}): the residual stream grows with depth, so "
                                "the layers look reversed or shuffled (or the layer ids are wrong)",
                                "store layers in the order of their ids; check the ids the extraction used",
                                found=", ".join(f"{medians[k]:.4g}" for k in slots))]
    return []


def _ids_and_mask(st: SampleTensors, exp: Expectations) -> list[Verdict]:
    out = []
    ids = st.token_ids()
    if exp.vocab_size is not None and ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= exp.vocab_size.value:
            out.append(Verdict("token_ids", f"token ids range over [{lo}, {hi}], outside the vocabulary of "
                               f"{exp.vocab_size.value} ({exp.vocab_size.source})",
                               "extract with the tokenizer of the model you pass", status=Status.BROKEN))
    mask = st.loss_mask()
    if mask is not None and mask.numel():
        values = sorted(set(mask.unique().tolist()) - {0, 1})  # bools compare equal to 0 and 1
        if values:
            out.append(Verdict("loss_mask", f"loss_mask holds values other than 0 and 1: {values[:5]}",
                               "store a 0/1 mask"))
    return out
