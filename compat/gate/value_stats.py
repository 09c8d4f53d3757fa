"""``--values``: read each sound sample's layers in bounded chunks into the statistics the value rules judge
(NaN/Inf counts, all-zero layers, identical layers, per-layer median RMS, token id range, mask values).

Only each part's bytes are read (``tensor_data``), so a sample of any size costs one chunk of memory and address
space (a file is memory-mapped only where torch.load must read it: views into a shared storage, legacy files);
chunks are converted to float32 only for the statistics. Nothing is judged here: ``compat.gate.rules`` judges
what this measures.
"""

from __future__ import annotations

import hashlib
import traceback
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from compat.gate.read.files import STORAGE_FIX
from compat.gate.read.pickling import by_fields
from compat.gate.read.source import StorageError
from compat.gate.read.tensor_data import SampleTensors, open_file
from compat.gate.read.views import FailureKind, FileView, ReadFailure, SampleView
from compat.gate.read.zip_archive import INFLATION_BASE, INFLATION_RATIO, inflation_limit

if TYPE_CHECKING:  # numpy is imported where values are measured: header mode runs without it
    import numpy as np

CHUNK_BYTES = 32 << 20
"""The most tensor data read at once, whatever the sample's shape: rows of all layers, fewer layers, or a
slice of one row's columns when a single row is wider."""


@by_fields
@dataclass
class LayerStats:
    nan: int = 0
    inf: int = 0
    first_bad: int | None = None
    """The first token with a NaN or Inf."""
    rows: int = 0
    zero_rows: int = 0
    """Tokens whose state is all zeros in this layer."""
    first_zero: int | None = None
    tiny_rows: int = 0
    """Tokens whose state is not all zeros but whose every value is so small its square underflows float32 (below
    about 4e-23: subnormals, as memory never written reads); never a model's state."""
    first_tiny: int | None = None
    median_rms: float = 0.0
    """Median over tokens of the per-token RMS (NaN ignored)."""
    by_position: tuple[tuple[int, int, float], ...] = ()
    """``(bucket, tokens, mean log RMS)`` over the positions ``2**bucket .. 2**(bucket + 1) - 1`` (the first
    token, the attention sink, left out): a state's size depends on its position (early tokens attend to few),
    so the dataset comparison (``compat.gate.consistency``) compares samples position band by position band."""
    spread: float = 0.0
    """How much the tokens' log RMS vary within their position bands: 1.2533 x the mean absolute deviation.
    With the token count, how far this sample's medians may stray by chance alone."""
    repeated_rows: int = 0
    """Tokens whose row is identical to the previous token's although their token ids differ (never, in a
    model's states: two different tokens enter as two different embeddings)."""
    first_repeated: int | None = None

    @property
    def nonzero(self) -> bool:
        return self.zero_rows < self.rows


@by_fields
@dataclass(frozen=True)
class SampleValues:
    """What ``--values`` measured of one sound sample (every layer [T, hidden], one shape)."""

    view: SampleView
    layers: tuple[LayerStats, ...]
    identical: tuple[tuple[int, ...], ...]
    """Groups of layer slots holding byte-identical values (each sorted, groups in order of their first slot)."""
    token_range: tuple[int, int] | None
    """Smallest and largest token id (measured only when a vocabulary is known to check them against)."""
    mask_values: tuple = ()
    """Loss-mask values other than 0 and 1, sorted."""
    mask_all_zero: bool | None = None
    """Every loss-mask entry is 0 (None: no mask, or an empty one)."""
    bytes_read: int = 0
    prefix: Prefix | None = None
    """The first rows, for the comparison with the other samples that start with the same tokens."""


PREFIX_ROWS = 4
"""Rows kept per sample for the dataset comparison: datasets made with a chat template share their first tokens."""
PROJECTED = 64
"""Wider rows are kept as this many random projections (lengths and distances kept to about 1/sqrt(64) by the
Johnson-Lindenstrauss lemma), so a sample costs ``PREFIX_ROWS * layers * 64`` floats whatever its hidden size."""


@dataclass(frozen=True)
class Prefix:
    """A sample's first rows: their token ids and every layer's rows, a float32 array ``[rows, layers, PROJECTED]``
    (the rows themselves when the hidden size is at most ``PROJECTED``)."""

    ids: tuple[int, ...]
    rows: np.ndarray

    def __reduce__(self):
        """Pickled as the rows' float32 bytes (a worker's results cross a pipe; an array's own pickling costs more)."""
        return _prefix, (self.ids, self.rows.astype("<f4").tobytes(), self.rows.shape)


def _prefix(ids: tuple[int, ...], data: bytes, shape: tuple[int, ...]) -> Prefix:
    import numpy as np

    return Prefix(ids, np.frombuffer(bytearray(data), dtype=np.float32).reshape(shape))


@cache
def _projection(hidden: int) -> np.ndarray | None:
    """The same random projection for every sample of one hidden size (seeded by it)."""
    import numpy as np

    if hidden <= PROJECTED:
        return None
    return np.random.default_rng(hidden).standard_normal((hidden, PROJECTED), dtype=np.float32) / PROJECTED ** 0.5


@by_fields
@dataclass(frozen=True)
class FileValues:
    samples: tuple[SampleValues, ...]
    """The sound samples read before any failure."""
    failure: ReadFailure | None
    bytes_read: int


def scan_file(view: FileView, token_range: bool) -> FileValues:
    """Measure every sound sample of ``view``; a file whose values cannot be read gives a failure, not a crash."""
    import numpy as np

    measured: list[SampleValues] = []
    try:
        # NaN, Inf, overflow and underflow are what the statistics count, not errors (one context for the file:
        # it costs microseconds, and a tiny sample's scan is a hundred or two)
        with np.errstate(all="ignore"), open_file(view) as tensors:
            for st in tensors:
                if st.view.sound:  # otherwise the header rules report why; values of a malformed sample mean nothing
                    _bounded(st.view, view.size)
                    measured.append(scan_sample(st, token_range))
    except Exception as exc:  # noqa: BLE001 - a file whose values cannot be read is a finding, the gate goes on
        failure = ReadFailure(FailureKind.UNREADABLE, str(exc), type(exc).__name__, traceback.format_exc(),
                              STORAGE_FIX if isinstance(exc, StorageError) else None)
        return FileValues(tuple(measured), failure, sum(m.bytes_read for m in measured))
    return FileValues(tuple(measured), None, sum(m.bytes_read for m in measured))


@dataclass(frozen=True)
class _Plan:
    """How a sample is cut into reads of at most ``CHUNK_BYTES``: rows at a time, layers at a time, columns at
    a time (the last two below all only when one row of every layer is wider than a chunk)."""

    rows: int
    layers: int
    columns: int

    @classmethod
    def of(cls, n: int, hidden: int, itemsize: int) -> _Plan:
        columns = max(1, min(hidden, CHUNK_BYTES // itemsize))
        layers = max(1, min(n, CHUNK_BYTES // (columns * itemsize)))
        rows = max(1, CHUNK_BYTES // (layers * columns * itemsize))
        return cls(rows, layers, columns)


class OverClaimed(ValueError):
    """A sample's layers claim far more bytes than its file holds: one stored tensor referenced over and over."""


def _bounded(sample: SampleView, file_size: int) -> None:
    """Refuse to read more than a file's bytes can hold, by the same bound as a zip archive's inflation: layers
    sharing one tensor would otherwise be read once per reference (5,000 references cost 5,000 reads)."""
    claimed = sum(t.nbytes for t in sample.layers)
    if claimed > inflation_limit(file_size):
        raise OverClaimed(f"its {len(sample.layers)} layers claim {claimed} bytes from a {file_size}-byte file, over "
                          f"{INFLATION_BASE >> 20} MiB + {INFLATION_RATIO}x its size: the same stored data referenced "
                          "many times")


def scan_sample(st: SampleTensors, token_range: bool) -> SampleValues:
    """One sound sample's statistics, read in parts of at most ``CHUNK_BYTES``; linear in its size whatever
    its shape: identical layers are found by a digest of each layer's per-token sums of squares (equal layers
    have equal sums), and only layers whose digests agree are compared byte for byte (``_identical``)."""
    import numpy as np

    from compat.gate.read.arrays import floats

    view = st.view
    n, (tokens, hidden), dtype = len(view.layers), view.layers[0].shape, view.layers[0].dtype
    stats = [LayerStats(rows=tokens) for _ in range(n)]
    rms_parts = []  # [rows, n] per row range
    digests = [hashlib.blake2b(digest_size=16) for _ in range(n)]  # of the per-token sums of squares
    itemsize = max(1, view.layers[0].nbytes // max(1, tokens * hidden))
    plan = _Plan.of(n, hidden, itemsize)
    ids = st.token_ids_array()
    # Token t's row may equal token t-1's only where the tokens are the same (their embeddings are).
    new_token = np.zeros(tokens, dtype=bool)
    if ids.size == tokens:  # otherwise seq_len's finding: rows and ids cannot be paired
        new_token[1:] = ids[1:] != ids[:-1]
    last_rows: dict[int, Any] = {}  # per first layer of a part: the part's last row, for the next part's first
    read = 0
    prefix = _Prefix(ids, n, hidden)
    folded = plan.rows >= prefix.count  # the first part holds the first rows: no second read for them
    # Per part, a few array operations over all its layers (not per layer, not per statistic) keep small files
    # cheap and large ones near memory speed; NaN and Inf propagate into the sum of squares, so the exact scans
    # run only on parts where it points at them.
    for start in range(0, tokens, plan.rows):
        stop = min(tokens, start + plan.rows)
        squares = np.zeros((stop - start, n), dtype=np.float32)
        zero = np.ones((stop - start, n), dtype=bool)
        for lo in range(0, n, plan.layers):
            hi = min(n, lo + plan.layers)
            for c0 in range(0, hidden, plan.columns):
                x = st.part_array(start, stop, lo, hi, c0, min(hidden, c0 + plan.columns))
                read += x.nbytes
                xf = floats(x, dtype)
                if folded and start == 0:
                    prefix.add(xf[:prefix.count], 0, lo, c0)
                sums, is_zero = _measure(xf, start, lo, stats, squares, zero)
                if plan.columns == hidden:  # whole rows: compare each with the one before (bfloat16 and float8
                    # as their float32 values, which are exact)
                    _repeated(x if x.dtype.kind == "f" else xf, sums, start, lo, stats,
                              new_token[start:stop] & ~is_zero.T, last_rows)
                del x, xf  # before the next part is read: a part's arrays are the scan's memory
        by_layer = np.ascontiguousarray(squares.T)
        for i in range(n):
            digests[i].update(by_layer[i])
        rms_parts.append(np.sqrt(squares / hidden))
        if not (squares == 0).any():  # no row of zeros, nor of values whose squares underflow
            continue
        counts = zero.sum(axis=0).tolist()
        tiny = (squares == 0) & ~zero
        tiny_counts = tiny.sum(axis=0).tolist()
        for i in range(n):
            s = stats[i]
            if counts[i]:
                if s.first_zero is None:
                    s.first_zero = start + int(np.flatnonzero(zero[:, i])[0])
                s.zero_rows += counts[i]
            if tiny_counts[i]:
                if s.first_tiny is None:
                    s.first_tiny = start + int(np.flatnonzero(tiny[:, i])[0])
                s.tiny_rows += tiny_counts[i]
    medians = np.concatenate(rms_parts) if len(rms_parts) > 1 else rms_parts[0]
    for s, median in zip(stats, _lower_nanmedian(medians)):
        s.median_rms = median
    if tokens > 1:
        _by_position(np.log(np.maximum(medians[1:], np.float32(1e-30))), stats)
    groups: dict[bytes, list[int]] = {}
    for i, digest in enumerate(digests):
        groups.setdefault(digest.digest(), []).append(i)
    identical = tuple(g for candidates in groups.values() if len(candidates) > 1
                      for g in _identical(st, candidates, tokens, hidden, itemsize))
    id_range = (int(ids.min()), int(ids.max())) if token_range and ids.size else None
    mask = st.loss_mask_array()
    odd: tuple = ()
    all_zero = None
    if mask is not None and mask.size:
        all_zero = not bool(mask.any())
        if bool(((mask != 0) & (mask != 1)).any()):
            odd = tuple(sorted(set(np.unique(mask).tolist()) - {0, 1}))  # bools compare equal to 0 and 1
    if not folded:
        prefix.read(st, plan, dtype)
    return SampleValues(view, tuple(stats), identical, id_range, odd, all_zero, read, prefix.made())


def _lower_nanmedian(a: np.ndarray) -> list[float]:
    """Per column, the lower median of the values that are not NaN (NaN where none is): torch's ``nanmedian``."""
    import numpy as np

    ordered = np.sort(a, axis=0)  # NaN last
    if not np.isnan(ordered[-1]).any():  # no NaN (the sort put any last)
        return ordered[(a.shape[0] - 1) // 2].tolist()
    counts = (~np.isnan(a)).sum(axis=0)
    picked = ordered[np.maximum(counts - 1, 0) // 2, np.arange(a.shape[1])]
    return np.where(counts > 0, picked, np.nan).tolist()


def _by_position(logs: np.ndarray, stats: list[LayerStats]) -> None:
    """Each layer's mean log RMS per band of positions (1, 2-3, 4-7, ...; ``logs`` starts at position 1), and
    the spread of the tokens around their band's mean (1.2533 x the mean absolute deviation: the standard
    deviation, for a normal spread). The bands are contiguous runs of rows, so one ``reduceat`` sums them all
    (a median per band would cost a call per band); a non-finite row is the finite rule's finding, left out."""
    import numpy as np

    x = logs
    rows = x.shape[0]
    starts = [0]
    while 2 * starts[-1] + 1 < rows:
        starts.append(2 * starts[-1] + 1)  # band b starts at position 2**b, row 2**b - 1
    sizes = np.diff(starts + [rows])
    if np.isfinite(x).all():  # as a sample's are: the same as below, in fewer calls
        means = np.add.reduceat(x, starts, axis=0) / sizes[:, None]
        deviation = np.abs(x - np.repeat(means, sizes, axis=0))
        spreads = (1.2533 * deviation.sum(axis=0) / rows).tolist()
    else:
        finite = np.isfinite(x)
        counts = np.add.reduceat(finite, starts, axis=0)
        means = np.add.reduceat(np.where(finite, x, 0.0), starts, axis=0) / counts  # NaN: a band of none finite
        deviation = np.where(finite, np.abs(x - np.repeat(means, sizes, axis=0)), 0.0)
        spreads = (1.2533 * deviation.sum(axis=0) / np.maximum(finite.sum(axis=0), 1)).tolist()
    by_layer = means.T.tolist()
    sizes = sizes.tolist()
    for i, s in enumerate(stats):
        s.by_position = tuple(zip(range(len(starts)), sizes, by_layer[i]))
        s.spread = spreads[i]


def _repeated(x: np.ndarray, sums: np.ndarray, start: int, lo: int, stats: list[LayerStats], judged: np.ndarray,
              last_rows: dict) -> None:
    """Count the rows of part ``x`` (whole rows of layers ``lo..``, their sums of squares ``sums``) equal to the
    row before them although their token differs from the one before (``judged``: ``[layers, rows]``, the rows to
    judge; rows of zeros are zero_rows'). Equal rows have equal sums: only rows whose sum repeats are compared. The
    previous part's last row (``last_rows``) is the first row's previous one."""
    import numpy as np

    before = last_rows.get(lo)
    last_rows[lo] = (x[-1].copy(), sums[-1].copy())
    same = np.zeros(x.shape[:2], dtype=bool)
    same[1:] = sums[1:] == sums[:-1]
    row_before = x[0]  # compared with nothing: the first part's first row is no repeat
    if before is not None:
        row_before, same[0] = before[0], sums[0] == before[1]
    same &= judged.T
    if not same.any():  # as in every sound sample
        return
    for r, k in np.argwhere(same).tolist():
        same[r, k] = np.array_equal(x[r, k], x[r - 1, k] if r else row_before[k])
    counts = same.sum(axis=0).tolist()
    for k, count in enumerate(counts):
        if count:
            s = stats[lo + k]
            if s.first_repeated is None:
                s.first_repeated = start + int(np.flatnonzero(same[:, k])[0])
            s.repeated_rows += count


class _Prefix:
    """A sample's first rows as they are read (projected part by part: a projection is a sum over columns)."""

    def __init__(self, ids: np.ndarray, n: int, hidden: int) -> None:
        import numpy as np

        self.ids = ids
        self.count = min(PREFIX_ROWS, int(ids.size))
        self.projection = _projection(hidden)
        width = PROJECTED if self.projection is not None else hidden
        self.rows = np.zeros((self.count, n, width), dtype=np.float32)

    def add(self, xf: np.ndarray, r0: int, lo: int, c0: int) -> None:
        """Part ``xf``: rows ``r0..``, layers ``lo..``, columns ``c0..`` (float32)."""
        r1, hi, c1 = r0 + xf.shape[0], lo + xf.shape[1], c0 + xf.shape[2]
        if self.projection is None:
            self.rows[r0:r1, lo:hi, c0:c1] = xf
        else:
            self.rows[r0:r1, lo:hi] += xf @ self.projection[c0:c1]

    def read(self, st: SampleTensors, plan: _Plan, dtype: str) -> None:
        """The first rows read on their own, in the parts of ``plan``: for rows so wide that the scan's first
        part holds fewer than ``PREFIX_ROWS`` of them."""
        from compat.gate.read.arrays import floats

        n, hidden = self.rows.shape[1], st.view.layers[0].shape[1]
        for r0 in range(0, self.count, plan.rows):
            r1 = min(self.count, r0 + plan.rows)
            for lo in range(0, n, plan.layers):
                hi = min(n, lo + plan.layers)
                for c0 in range(0, hidden, plan.columns):
                    x = st.part_array(r0, r1, lo, hi, c0, min(hidden, c0 + plan.columns))
                    self.add(floats(x, dtype), r0, lo, c0)

    def made(self) -> Prefix:
        return Prefix(tuple(self.ids[:self.count].tolist()), self.rows)


def _identical(st: SampleTensors, candidates: list[int], tokens: int, hidden: int, itemsize: int) -> list[tuple]:
    """The groups of byte-identical layers among ``candidates`` (layers whose sums of squares agree), by a digest
    of their bytes: a second read, of these layers only (none, in a sound dataset)."""
    digests = {i: hashlib.blake2b(digest_size=16) for i in candidates}
    one = _Plan.of(1, hidden, itemsize)  # one layer at a time
    for i in candidates:
        for start in range(0, tokens, one.rows):
            for c0 in range(0, hidden, one.columns):
                part = st.part_array(start, min(tokens, start + one.rows), i, i + 1, c0, min(hidden, c0 + one.columns))
                digests[i].update(part.tobytes())
    groups: dict[bytes, list[int]] = {}
    for i in candidates:
        groups.setdefault(digests[i].digest(), []).append(i)
    return [tuple(g) for g in groups.values() if len(g) > 1]


def _measure(xf: np.ndarray, start: int, lo: int, stats: list[LayerStats], squares: np.ndarray,
             zero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fold one part ``xf`` (``[rows, layers lo.., columns]``, float32) into the sample's statistics; which of
    its rows' sums of squares and which of them are all zeros (each ``[rows, layers]``)."""
    import numpy as np

    part = np.einsum("rlc,rlc->rl", xf, xf)  # sums of squares, no [rows, layers, columns] temporary
    hi = lo + xf.shape[1]
    squares[:, lo:hi] += part
    is_zero = part == 0
    if is_zero.any():
        is_zero &= ~(xf != 0).any(axis=2)  # a sum of 0 can also be tiny values underflowing: ask the values
    zero[:, lo:hi] &= is_zero
    if not np.isfinite(part).all():
        nan = np.isnan(xf)
        nonfinite = ~np.isfinite(xf)
        nans, infs = nan.sum(axis=(0, 2)).tolist(), (nonfinite & ~nan).sum(axis=(0, 2)).tolist()
        bad_rows = nonfinite.any(axis=2)
        for k in range(xf.shape[1]):
            s = stats[lo + k]
            s.nan, s.inf = s.nan + nans[k], s.inf + infs[k]
            if s.first_bad is None and (nans[k] or infs[k]):
                s.first_bad = start + int(np.flatnonzero(bad_rows[:, k])[0])
    return part, is_zero
