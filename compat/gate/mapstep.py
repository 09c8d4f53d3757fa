"""The map of the gate's map and reduce: the per-file step (``compat.gate.filestep``) over every file of a run,
in batches, in this process (``--jobs 1``), in worker processes (``compat.gate.workers``) or as tasks on a Ray
cluster (``--ray``, ``compat.gate.raytasks``), with the files a state file (``--state``, ``compat.gate.state``)
recorded as unchanged taken from it instead of read. The results come back in the run's file order whatever
order the batches finished in, so the dataset step (``compat.gate.runner``) sees the same list however the files
were read.

Batches amortise what a worker costs per task (a tiny file is read in 20 to 90 µs): a batch closes at
``MAX_BATCH_FILES`` files or, where file sizes are known (``--values``, ``--state``), ``MAX_BATCH_BYTES``, and a
run is cut into at least eight batches per worker so the workers finish together. Workers are started only as far
as the work repays their start (``WORKER_START_SECONDS`` each) against the reading ``_estimate`` expects: a small run
reads in this process whatever ``--jobs`` says. ``--ray`` sends every run to its cluster, cut for the cluster's
CPUs (the user chose the cluster; its workers are started already).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from compat.gate.filestep import FileResult, ReadHints, check_file
from compat.gate.state import Stamp, StateFile
from compat.gate.state import stamps as file_stamps
from compat.gate.workers import CRASHED, Batch, run_batches

Progress = Callable[[int, int], None]

MAX_BATCH_FILES = 128
MAX_BATCH_BYTES = 64 << 20
WORKER_START_SECONDS = 0.5
"""About what starting a worker costs (a new interpreter importing the gate and numpy; ``--values`` imports torch
only for a file torch.load must read)."""
_SAFETENSORS_SECONDS = 25e-6
_TORCH_SECONDS = 60e-6
"""What reading a tiny file's header costs in one process: a safetensors header (12 µs where headers repeat, as a
dataset's do one token count at a time, 45 µs where none does), a torch.save zip directory and pickle (47 µs where
pickles repeat, the same way, 90 µs where none does)."""
_RESULT_SECONDS = 10e-6
"""What taking a worker's result costs this process per file (unpickling its views: 8 µs a .safetensors file, 5 µs
a .pt one whose views it shares with the batch's other files of its token count, ``compat.gate.read.pickling``,
``compat.gate.read.files``) and running the workers beside it: workers save only the difference, so on a few
cores tiny safetensors files stay in-process (50,000 of them: 2.1 s in one process, 2.3 s with two workers on 2
cores) and tiny .pt files go to workers (50,000: 2.5-2.7 s in one process, 2.0-2.6 s with two)."""
_VALUES_SECONDS = 200e-6
"""What ``--values`` adds per tiny file in one process (its statistics in numpy: 200-240 µs, 2026-12-07)."""
_VALUES_BYTES_PER_SECOND = 300e6


@dataclass
class Mapped:
    results: list[FileResult]
    """One per file, in the run's file order."""
    reused: int = 0
    """Files whose result came from the state file, not read."""
    workers: int = 1
    notes: list[str] = field(default_factory=list)


def map_files(files: list[str], regular: frozenset[str], hints: ReadHints, jobs: int = 1,
              state_path: Path | None = None, progress: Progress | None = None, ray: str | None = None,
              listed: Mapping[str, Stamp] | None = None) -> Mapped:
    """Every file's ``FileResult``; ``progress(done, total)`` after each batch. ``ray``: read as tasks on that
    Ray cluster (``""``: Ray's default; ``compat.gate.raytasks``), ``jobs`` aside. ``listed``: the stamps of files
    named by URL, from their listing (``Discovered.stamps``)."""
    with _cluster(ray) as cpus:
        state = StateFile.open(state_path, hints) if state_path is not None else None
        try:
            return _map(files, regular, hints, jobs, state, progress, cpus, listed)
        finally:
            if state is not None:
                state.close()


def _cluster(ray: str | None):
    """Connected to the Ray cluster ``ray`` for the run (its CPUs), or not (None)."""
    if ray is None:
        return nullcontext(None)
    from compat.gate.raytasks import cluster

    return cluster(ray)


def _map(files: list[str], regular: frozenset[str], hints: ReadHints, jobs: int, state: StateFile | None,
         progress: Progress | None, cpus: int | None, listed: Mapping[str, Stamp] | None = None) -> Mapped:
    stamps = file_stamps(files, listed) if state is not None or hints.values else []
    reused = state.start(files, stamps) if state is not None else {}
    results: list[FileResult | None] = [reused.get(i) for i in range(len(files))]
    todo = [i for i in range(len(files)) if i not in reused]
    sizes = [s[0] if s else 0 for s in stamps] if stamps else None
    workers = cpus if cpus is not None else _workers(jobs, todo, files, sizes, hints)
    finished = len(files) - len(todo)
    if progress is not None and finished:
        progress(finished, len(files))

    def done(batch: Batch, checked: list[FileResult]) -> None:
        nonlocal finished
        for (i, _, _), result in zip(batch, checked, strict=True):
            results[i] = result
        if state is not None:
            state.record([(files[i], stamp, r) for (i, _, _), r in zip(batch, checked)
                          if (stamp := stamps[i]) is not None and not _crashed(r)])
        finished += len(batch)
        if progress is not None:
            progress(finished, len(files))

    batches = _batches(todo, files, regular, sizes, workers)
    notes = list(state.notes) if state is not None else []
    if cpus is not None:
        from compat.gate.raytasks import run_tasks

        run_tasks(batches, hints, cpus, done)
    elif workers > 1:
        note = run_batches(batches, hints, workers, done)
        if note:
            notes.append(note)
    else:
        for batch in batches:
            done(batch, [check_file(path, listed, hints) for _, path, listed in batch])
    assert all(r is not None for r in results)
    return Mapped([r for r in results if r is not None], len(files) - len(todo), workers, notes)


def _crashed(result: FileResult) -> bool:
    """A file that ended two workers is not recorded: the next run tries it again."""
    return result.view.failure is not None and result.view.failure.error_type == CRASHED


def _estimate(todo: list[int], files: list[str], sizes: list[int] | None, hints: ReadHints) -> float:
    """Roughly how many seconds reading ``todo`` takes in one process."""
    safetensors = sum(1 for i in todo if files[i].endswith(".safetensors"))
    seconds = safetensors * _SAFETENSORS_SECONDS + (len(todo) - safetensors) * _TORCH_SECONDS
    seconds -= len(todo) * _RESULT_SECONDS
    if hints.values:
        seconds += len(todo) * _VALUES_SECONDS
        if sizes:
            seconds += sum(sizes[i] for i in todo) / _VALUES_BYTES_PER_SECOND
    return seconds


def _workers(jobs: int, todo: list[int], files: list[str], sizes: list[int] | None, hints: ReadHints) -> int:
    if jobs <= 1 or len(todo) < 2:
        return 1
    start = WORKER_START_SECONDS
    repaid = int(_estimate(todo, files, sizes, hints) / start) if start > 0 else jobs
    return max(1, min(jobs, len(todo), repaid))


def _batches(todo: list[int], files: list[str], regular: frozenset[str], sizes: list[int] | None,
             workers: int) -> list[Batch]:
    """``todo`` in order, cut at ``MAX_BATCH_FILES`` files (fewer: eight batches a worker at least) or
    ``MAX_BATCH_BYTES``."""
    most = max(1, min(MAX_BATCH_FILES, math.ceil(len(todo) / (8 * workers))))
    batches: list[Batch] = []
    batch: Batch = []
    held = 0
    for i in todo:
        batch.append((i, files[i], files[i] in regular))
        held += sizes[i] if sizes else 0
        if len(batch) >= most or held >= MAX_BATCH_BYTES:
            batches.append(batch)
            batch, held = [], 0
    if batch:
        batches.append(batch)
    return batches
