"""The ``replies`` shim's transport of a one-rank reply: device tensors go by IPC handle and are opened where the
reply arrives; a handle that does not open makes the shim ask again for the reply as vLLM pickles it, and stop
using handles. Run on an in-process stand-in for ``collective_rpc`` that pickles each reply as vLLM's message
queue does (the real transport is measured on the H200: benchmarks/gpu_extract.py)."""

from __future__ import annotations

import functools
import os
import pickle
import sys
import types
import warnings

import pytest

from compat.fixers import replies

torch = pytest.importorskip("torch")


class DeviceLike:
    """Stands for a CUDA tensor: ``is_cuda`` and the payload its handle carries."""

    is_cuda = True

    def __init__(self, payload: list[float]) -> None:
        self.payload = payload


def open_payload(payload):
    return torch.tensor(payload)


def open_fails(payload):
    raise RuntimeError("cudaIpcOpenMemHandle failed: invalid device context")


class Worker:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.calls = 0

    def captured(self, scale):
        self.calls += 1
        return [DeviceLike([1.0 * scale, 2.0]), torch.ones(2)] if self.rank == 0 else None


class Executor:
    """``collective_rpc(method, args=(), kwargs=None)`` on each worker, replies pickled and unpickled."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = [Worker(r) for r in range(workers)]

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        out = []
        for worker in self.workers:
            run = getattr(worker, method) if isinstance(method, str) else functools.partial(method, worker)
            out.append(pickle.loads(pickle.dumps(run(*args, **(kwargs or {})))))
        return out


@pytest.fixture
def shim(monkeypatch):
    """The shim piece as a module of its own (its functions pickle by reference, as the generated shim's do)."""
    module = types.ModuleType("compat_replies_shim_under_test")
    module.__dict__.update(os=os, functools=functools, warnings=warnings)
    exec(compile(replies.CODE, "replies-shim", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__dict__


def reduced_by(monkeypatch, rebuild):
    import torch.multiprocessing.reductions as reductions

    monkeypatch.setattr(reductions, "reduce_tensor", lambda t: (rebuild, (t.payload,)))


def test_device_tensors_arrive_opened_and_the_rest_as_they_are(shim, monkeypatch):
    reduced_by(monkeypatch, open_payload)
    executor = Executor()
    (reply,) = shim["collective_rpc"](executor, "captured", unique_reply_rank=0, args=(3,))
    assert isinstance(reply[0], torch.Tensor) and reply[0].tolist() == [3.0, 2.0]
    assert reply[1].tolist() == [1.0, 1.0] and shim["_SHARE_CUDA"]
    assert [w.calls for w in executor.workers] == [1, 1]
    # Without a rank, the plain per-worker reply.
    assert [type(r) for r in shim["collective_rpc"](executor, "captured", args=(1,))] == [list, type(None)]


def test_a_handle_that_does_not_open_brings_the_reply_pickled_and_no_more_handles(shim, monkeypatch):
    reduced_by(monkeypatch, open_fails)
    executor = Executor()
    with pytest.warns(RuntimeWarning, match="cudaIpcOpenMemHandle failed"):
        (reply,) = shim["collective_rpc"](executor, "captured", unique_reply_rank=0, args=(2,))
    assert isinstance(reply[0], DeviceLike) and reply[0].payload == [2.0, 2.0]  # the worker's own reply, pickled
    assert executor.workers[0].calls == 1  # asked again from what the worker kept, not run twice
    assert shim["_SHARE_CUDA"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (again,) = shim["collective_rpc"](executor, "captured", unique_reply_rank=0, args=(5,))
    assert isinstance(again[0], DeviceLike) and again[0].payload == [5.0, 2.0]


def test_memory_that_cannot_be_shared_goes_pickled(shim, monkeypatch):
    import torch.multiprocessing.reductions as reductions

    def refuse(tensor):
        raise RuntimeError("expandable segments cannot be shared")

    monkeypatch.setattr(reductions, "reduce_tensor", refuse)
    (reply,) = shim["collective_rpc"](Executor(), "captured", unique_reply_rank=0, args=(1,))
    assert isinstance(reply[0], DeviceLike) and shim["_SHARE_CUDA"]


def test_the_switch_turns_handles_off(shim, monkeypatch):
    reduced_by(monkeypatch, open_fails)
    monkeypatch.setitem(shim, "_SHARE_CUDA", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (reply,) = shim["collective_rpc"](Executor(), "captured", unique_reply_rank=0, args=(1,))
    assert isinstance(reply[0], DeviceLike)
