"""``--values``: read each sound sample's layers in bounded chunks into the statistics the value rules judge
(NaN/Inf counts, all-zero layers, identical layers, per-layer median RMS, token id range, mask values).

Files are memory-mapped, so a 268 MB sample never sits in memory whole; chunks are converted to float32 only
for the statistics. Nothing is judged here: ``compat.gate.rules`` judges what this measures.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from compat.gate.read.tensor_data import SampleTensors, open_file
from compat.gate.read.views import FailureKind, FileView, ReadFailure, SampleView

CHUNK_BYTES = 32 << 20


@dataclass
class LayerStats:
    nan: int = 0
    inf: int = 0
    first_bad: int | None = None
    """The first token with a NaN or Inf."""
    nonzero: bool = False
    median_rms: float = 0.0
    """Median over tokens of the per-token RMS (NaN ignored)."""


@dataclass(frozen=True)
class SampleValues:
    """What ``--values`` measured of one sound sample (every layer [T, hidden], one shape)."""

    view: SampleView
    layers: tuple[LayerStats, ...]
    identical: tuple[tuple[int, int], ...]
    """Pairs of layer slots holding identical values, sorted."""
    token_range: tuple[int, int] | None
    """Smallest and largest token id (measured only when a vocabulary is known to check them against)."""
    mask_values: tuple = ()
    """Loss-mask values other than 0 and 1, sorted."""
    bytes_read: int = 0


@dataclass(frozen=True)
class FileValues:
    samples: tuple[SampleValues, ...]
    """The sound samples read before any failure."""
    failure: ReadFailure | None
    bytes_read: int


def scan_file(view: FileView, token_range: bool) -> FileValues:
    """Measure every sound sample of ``view``; a file whose values cannot be read gives a failure, not a crash."""
    measured: list[SampleValues] = []
    try:
        with open_file(view) as tensors:
            for st in tensors:
                if st.view.sound:  # otherwise the header rules report why; values of a malformed sample mean nothing
                    measured.append(scan_sample(st, token_range))
    except Exception as exc:  # noqa: BLE001 - a file whose values cannot be read is a finding, the gate goes on
        failure = ReadFailure(FailureKind.UNREADABLE, str(exc), type(exc).__name__, traceback.format_exc())
        return FileValues(tuple(measured), failure, sum(m.bytes_read for m in measured))
    return FileValues(tuple(measured), None, sum(m.bytes_read for m in measured))


def scan_sample(st: SampleTensors, token_range: bool) -> SampleValues:
    """One sound sample's statistics, in chunks of about ``CHUNK_BYTES``."""
    import torch

    view = st.view
    n, (tokens, hidden) = len(view.layers), view.layers[0].shape
    stats = [LayerStats() for _ in range(n)]
    rms_chunks: list[list] = [[] for _ in range(n)]
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
            rms_chunks[i].append(rms[:, i])
        for i, j in list(same):
            # Equal layers have equal per-token RMS: compare whole rows only when those agree.
            if not torch.equal(rms[:, i], rms[:, j]) or not torch.equal(x[:, i], x[:, j]):
                same.discard((i, j))
    for s, chunks in zip(stats, rms_chunks):
        s.median_rms = float(torch.nanmedian(torch.cat(chunks)))
    ids = st.token_ids()
    id_range = (int(ids.min()), int(ids.max())) if token_range and ids.numel() else None
    mask = st.loss_mask()
    odd: tuple = ()
    if mask is not None and mask.numel():
        odd = tuple(sorted(set(mask.unique().tolist()) - {0, 1}))  # bools compare equal to 0 and 1
    return SampleValues(view, tuple(stats), tuple(sorted(same)), id_range, odd, read)
