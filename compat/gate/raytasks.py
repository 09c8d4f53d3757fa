"""``--ray [ADDRESS]``: the per-file step (``compat.gate.filestep``) as Ray tasks on a cluster, batch by batch.

The batches are ``mapstep``'s, cut for the cluster's CPUs (eight at least per CPU, as for workers); each is one
task (one CPU) that checks its files and answers with their results pickled whole, as a worker does
(``compat.gate.workers``). A task is given the run's ``ReadHints`` and storage options (``read.source``) as
arguments, so it reads URLs as the gate's own process does; its results go to the same ``done`` as a worker's,
so the files' order, ``--state`` and the progress bar are those of any other run. At most two tasks a CPU are
out at once: the gate's process holds the results of a bounded number of batches, not of the run.

A task whose worker dies (killed, out of memory, its node lost) loses no file and counts none twice: Ray runs it
again (``RETRIES``: its ``max_retries``); a batch that dies again is given once more one file at a time, each its
own task with the same retry, and a file whose task still ends its worker is that file's finding (``CRASHED``,
as with workers); the run goes on. ``--jobs`` does not apply: the cluster's CPUs decide how many tasks run.

The cluster (``cluster``): the one this process is already connected to (a program that called ``ray.init``),
else ``ray.init(address)`` for the run, disconnected after it (a local cluster it started stops): ``""`` (``--ray``
alone) is Ray's default, ``RAY_ADDRESS`` or else a new local cluster of this machine's cores; ``auto`` a cluster
started on this machine (``ray start``); ``host:port`` a cluster's head; ``ray://host:port`` Ray Client. Ray
itself waits minutes for a head that does not answer: an address is tried first with a plain connection
(``CONNECT_SECONDS``), and one that refuses is a one-line error. The tasks import this module on the cluster's
workers: every node needs the gate installed (the same version) with what the run reads (torch for ``.pt`` files
and ``--values``, s3fs for ``s3://``), and the files at the same paths (a shared filesystem, or URLs).

The test hook of ``compat.gate.workers`` (``COMPAT_GATE_TEST_EXIT``, ``COMPAT_GATE_TEST_EXIT_MARKER``) reaches
the tasks too: where this process has them set, they are given to the tasks' ``runtime_env``.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import re
import socket
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from compat.errors import CompatError
from compat.gate.filestep import FileResult, ReadHints, check_file
from compat.gate.read.source import configure as configure_storage
from compat.gate.read.source import configured as configured_storage
from compat.gate.workers import TEST_EXIT, TEST_EXIT_MARKER, Batch, Done, crashed, exit_if_asked

RETRIES = 1
"""Ray's ``max_retries`` of each task: a task's worker may die this many times and its task still run to the end."""
IN_FLIGHT = 2
"""Tasks out at once, per CPU of the cluster."""
CONNECT_SECONDS = 5.0
EXTRA = "pip install 'vllm-compat[ray]'"
_ADDRESS = re.compile(r"(auto|local|(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):\d{1,5})")


def address(text: str) -> str:
    """``--ray ADDRESS`` checked: ``auto``, ``local``, ``host:port``, ``ray://host:port`` or ``""`` (Ray's default);
    a path given right after ``--ray`` (taken for its address) is refused, saying how to write it."""
    if not text or _ADDRESS.fullmatch(text):
        return text
    raise CompatError(f"{text!r} is not a Ray address (auto, local, host:port, ray://host:port); to give --ray no "
                      "address, write it after the paths")


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise CompatError(f"--ray needs Ray, which is not installed ({exc}): {EXTRA}") from None
    return ray


@contextmanager
def cluster(given: str) -> Iterator[int]:
    """Connected to the cluster ``given`` (``""``: Ray's default) for the block, which is given its CPUs."""
    ray = _ray()
    if ray.is_initialized():
        yield _cpus(ray)
        return
    where = given or os.environ.get("RAY_ADDRESS", "")
    named = f"--ray {given}" if given else f"--ray (RAY_ADDRESS={where})" if where else "--ray"
    _answers(where, named)
    try:
        ray.init(address=given or None, logging_level=logging.WARNING)
    except Exception as exc:  # noqa: BLE001 - whatever stops Ray from connecting is said in one line
        raise CompatError(f"{named}: could not connect to a Ray cluster: {type(exc).__name__}: "
                          f"{_first_line(exc)}") from None
    try:
        yield _cpus(ray)
    finally:
        ray.shutdown()


def _answers(where: str, named: str) -> None:
    """A ``host:port`` (``ray://`` or not) that nothing answers at is an error now, not after Ray's minutes."""
    match = _ADDRESS.fullmatch(where) if where else None
    if match is None or match.group(3) is None:
        return
    host = match.group(3).strip("[]")
    port = int(where.rsplit(":", 1)[1])
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise CompatError(f"{named}: no Ray cluster answers at {host}:{port} ({type(exc).__name__}: "
                          f"{exc.strerror or exc})") from None


def _cpus(ray: Any) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def run_tasks(batches: list[Batch], hints: ReadHints, cpus: int, done: Done) -> None:
    """Check every batch as a Ray task on the connected cluster; ``done(batch, results)`` once per batch, as each
    finishes (a batch whose task died twice comes back as single files)."""
    ray = _ray()
    died = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError,
            ray.exceptions.ObjectLostError)
    hook = {name: os.environ[name] for name in (TEST_EXIT, TEST_EXIT_MARKER) if os.environ.get(name)}
    task = ray.remote(num_cpus=1, max_retries=RETRIES)(_check)
    if hook:
        task = task.options(runtime_env={"env_vars": hook})
    storage = configured_storage()
    queue: deque[tuple[Batch, bool]] = deque((b, len(b) == 1) for b in batches)
    pending: dict[Any, tuple[Batch, bool]] = {}
    try:
        while queue or pending:
            while queue and len(pending) < IN_FLIGHT * cpus:
                batch, alone = queue.popleft()
                pending[task.remote(batch, hints, storage)] = (batch, alone)
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            batch, alone = pending.pop(ref)
            try:
                results: list[FileResult] = pickle.loads(ray.get(ref))
            except died as exc:
                if alone:
                    done(batch, [crashed(path, f"Ray: {type(exc).__name__}") for _, path, _ in batch])
                else:  # once more, one file at a time: only the file that ends a worker is its finding
                    queue.extendleft(([item], True) for item in reversed(batch))
                continue
            done(batch, results)
    finally:
        for ref in pending:  # stopped part way (Ctrl-C, a result that raised): what is out is not waited for
            ray.cancel(ref)


def _check(batch: Batch, hints: ReadHints, storage: dict[str, Any]) -> bytes:
    """A task: the batch's results, pickled as a worker sends them."""
    configure_storage(storage)
    exit_on = os.environ.get(TEST_EXIT)
    enabled = gc.isenabled()
    gc.disable()  # as in the gate's own process: the per-file step makes no reference cycles
    try:
        results = []
        for _, path, regular in batch:
            exit_if_asked(path, exit_on)
            results.append(check_file(path, regular, hints))
        return pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        if enabled:
            gc.enable()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else "no message")[:300]
