"""``--jobs N``: the per-file step (``compat.gate.filestep``) in worker processes, batch by batch.

Workers are started with ``spawn`` (a fresh interpreter: never a ``fork`` of a process that may hold torch's
threads), each with the run's ``ReadHints``; each gets its batches through its own pipe (``AHEAD`` at a time: the
next waits there while it checks one) and answers each with the batch's results, pickled whole (``pickle.dumps``:
a tensor travels inline, not as a shared-memory handle). A worker keeps nothing between batches but its bounded
memos (``read.safetensors_header``: at most 4,096 small headers; ``read.torch_header`` and ``read.files``: 256
small pickles and their views), so its memory is bounded by the largest files of its batches, not by the run.

A worker that dies (killed, out of memory, a crash in a library) loses no file and counts none twice: the parent
knows which batches each worker holds; they are given again, one file at a time and each file alone in a worker,
and a file that ends a worker a second time is that file's finding (``CRASHED``), the run goes on.

Test hook, read only by workers: ``COMPAT_GATE_TEST_EXIT=NAME`` makes a worker exit at once (``os._exit``) when it
is about to check a file named ``NAME``; with ``COMPAT_GATE_TEST_EXIT_MARKER=PATH`` only the first time (the
worker that creates ``PATH`` exits).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
from collections import deque
from collections.abc import Callable
from multiprocessing import connection, get_context

from compat.gate.filestep import FileResult, ReadHints, check_file
from compat.gate.read.files import file_size
from compat.gate.read.source import configure as configure_storage
from compat.gate.read.source import configured as configured_storage
from compat.gate.read.views import FailureKind, FileView, ReadFailure

Batch = list[tuple[int, str, bool]]
"""Files of a batch: (position in the run's file list, path, listed as a regular file)."""
Done = Callable[[Batch, list[FileResult]], None]

CRASHED = "WorkerCrashed"
"""The error type of a file that ended a worker process twice."""
TEST_EXIT = "COMPAT_GATE_TEST_EXIT"
TEST_EXIT_MARKER = "COMPAT_GATE_TEST_EXIT_MARKER"
_TEST_EXIT_STATUS = 86


def _serve(conn, hints: ReadHints, threads: int, storage: dict) -> None:
    """A worker: check each batch it is sent, send back the results, until told to stop (None). ``storage``: the
    parent's storage options (a spawned process starts without them; they are not in ``hints``, which a state file
    records, as they may hold secrets)."""
    configure_storage(storage)
    # Its share of the cores for torch's own threads (read when torch is first imported, by --values): N workers
    # each running as many threads as there are cores would make every one of them wait for the others.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(threads))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers
    gc.disable()  # as in the gate's own process: the per-file step makes no reference cycles
    exit_on = os.environ.get(TEST_EXIT)
    conn.send_bytes(b"")  # started
    while True:
        try:
            batch = conn.recv()
        except EOFError:  # the parent is gone
            return
        if batch is None:
            return
        results = []
        for _, path, regular in batch:
            exit_if_asked(path, exit_on)
            results.append(check_file(path, regular, hints))
        conn.send_bytes(pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL))


def exit_if_asked(path: str, exit_on: str | None) -> None:
    """The test hook: end this process at once when about to check a file named ``exit_on``
    (``COMPAT_GATE_TEST_EXIT``, read once by the caller)."""
    if exit_on and os.path.basename(path) == exit_on and _first_exit():
        os._exit(_TEST_EXIT_STATUS)


def _first_exit() -> bool:
    marker = os.environ.get(TEST_EXIT_MARKER)
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class _Worker:
    def __init__(self, ctx, hints: ReadHints, threads: int) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, hints, threads, configured_storage()), daemon=True,
                                   name="compat-gate-worker")
        self.process.start()
        child.close()
        self.started = False
        """It said it is ready (a worker that dies before is one that cannot start: no file's fault)."""
        self.held: deque[tuple[Batch, int]] = deque()
        """The batches it was given and has not answered, oldest (the one it is checking) first, each with how
        many workers that batch has ended before."""

    def takes(self, batch: tuple[Batch, int]) -> bool:
        """It can take ``batch`` now: it holds none, or holds fewer than ``AHEAD`` and neither they nor ``batch``
        were given again after a worker died on them (such a batch is held alone, so that a second death is that
        batch's alone)."""
        return not self.held or (len(self.held) < AHEAD and self.held[-1][1] == 0 and batch[1] == 0)

    def give(self, held: tuple[Batch, int]) -> None:
        self.held.append(held)
        try:
            self.conn.send(held[0])
        except OSError:  # it died since its last answer (on the batch it held ahead): its sentinel says so, and
            pass  # what it holds, this batch included, is given again

    def answer(self) -> tuple[list[FileResult] | None, bool]:
        """The oldest held batch's results (None: not yet), and whether the worker died instead."""
        alive = self.process.is_alive()  # first: what a dead worker sent is all in the pipe by then
        try:
            while self.conn.poll():
                data = self.conn.recv_bytes()
                if data:
                    return pickle.loads(data), False
                self.started = True
        except (EOFError, OSError):
            return None, True
        return None, not alive

    def stop(self) -> None:
        if self.process.is_alive():
            if not self.held:
                try:
                    self.conn.send(None)
                except OSError:
                    pass
                self.process.join(5)
            if self.process.is_alive():
                self.process.terminate()
        self.process.join()
        self.conn.close()


AHEAD = 2
"""Batches a worker holds at once: the next one waits in its pipe while it checks one, so it never waits for the
gate's process to take a result and send more (on 2 cores, where the workers keep both busy, that wait made two
workers no faster than one)."""


class _CannotStart(Exception):
    pass


def run_batches(batches: list[Batch], hints: ReadHints, jobs: int, done: Done) -> str | None:
    """Check every batch in up to ``jobs`` worker processes; ``done(batch, results)`` once per batch (a batch a
    worker died on comes back as single files). Where workers cannot start at all (say, a script that starts
    the gate on import, without ``if __name__ == "__main__"``), the rest is checked in this process, and the
    note returned says why."""
    queue: deque[tuple[Batch, int]] = deque((b, 0) for b in batches)
    try:
        _run(queue, hints, max(1, min(jobs, len(batches))), done)
    except _CannotStart as exc:
        for batch, _ in queue:
            done(batch, [check_file(path, listed, hints) for _, path, listed in batch])
        return f"worker processes could not start ({exc}): the files were read in this process"
    return None


def _run(queue: deque[tuple[Batch, int]], hints: ReadHints, most: int, done: Done) -> None:
    ctx = get_context("spawn")
    threads = max(1, (os.cpu_count() or 1) // most)
    workers: list[_Worker] = []
    try:
        while queue or workers:
            while queue and len(workers) < most:
                workers.append(_Worker(ctx, hints, threads))
            for w in list(workers):
                while queue and w.takes(queue[0]):
                    w.give(queue.popleft())
                if not w.held:  # nothing left for it
                    w.stop()
                    workers.remove(w)
            if not workers:
                break
            ready = set(connection.wait([w.conn for w in workers] + [w.process.sentinel for w in workers]))
            for w in list(workers):
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                assert w.held
                results, dead = w.answer()
                if results is not None:
                    done(w.held.popleft()[0], results)
                    continue
                if not dead:
                    continue  # it said it started
                held = list(w.held)
                w.held.clear()
                w.stop()
                workers.remove(w)  # another is started while work is left
                reason = _ended(w.process.exitcode)
                if not w.started:
                    queue.extendleft(reversed(held + [h for x in workers for h in x.held]))
                    raise _CannotStart(reason)
                for batch, ended in reversed(held):
                    if ended == 0:  # once more, one file at a time: only the file that ends a worker is its finding
                        queue.extendleft(([item], 1) for item in reversed(batch))
                    else:  # held alone (``takes``): this batch ended the worker
                        done(batch, [crashed(path, reason) for _, path, _ in batch])
    finally:
        for w in workers:
            w.stop()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def crashed(path: str, reason: str) -> FileResult:
    """The result of a file that ended a worker twice, checked alone (``reason``: how the second one ended)."""
    return FileResult(FileView(path, file_size(path), failure=ReadFailure(
        FailureKind.UNREADABLE, f"checking this file ended the gate's worker process twice ({reason}): not "
        "checked", CRASHED, fix="run the gate on this file alone with --jobs 1 to see how reading it fails")))
