"""``collective_rpc`` replies: the shape ``unique_reply_rank`` gives changed (a one-entry list, then the value)."""

from __future__ import annotations

import compat.probes.reply_shape as reply_shape_probe

from compat.consumer.result import Kind
from compat.facts import replies
from compat.fix.context import FixContext
from compat.fix.edits import RouteCall
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled

CODE = '''
_SHARE_CUDA = os.environ.get("COMPAT_CUDA_IPC", "1").lower() not in ("0", "false", "no")
"""Send the device tensors of a one-rank reply by CUDA IPC handle (``COMPAT_CUDA_IPC=0``: pickled, as vLLM does)."""
_HELD = {}
"""In a worker process, by worker: the last reply sent by handle, kept so that a caller that cannot open the handles
asks again."""


def collective_rpc(executor, method, *args, unique_reply_rank=None, **kwargs):
    """``executor.collective_rpc(...)`` with the reply always a list, one entry per worker that answered:
    with ``unique_reply_rank`` a one-entry list holding that worker's value, in every build (asking every
    worker and keeping the chosen rank's reply, since without a rank every audited build answers per worker).
    The chosen rank's device tensors come by CUDA IPC handle, opened here on the same device (vLLM pickles a
    device tensor through the CPU: a copy to the host, the bytes through its message queue, a copy back); where a
    handle cannot be opened the reply is asked for again, pickled, and later replies are pickled too."""
    global _SHARE_CUDA
    if unique_reply_rank is None or args or not _SHARE_CUDA or not set(kwargs) <= {"args", "kwargs", "timeout"}:
        replies = executor.collective_rpc(method, *args, **kwargs)
        return replies if unique_reply_rank is None else [replies[unique_reply_rank]]
    call = (method, tuple(kwargs.pop("args", ()) or ()), dict(kwargs.pop("kwargs", None) or {}))
    reply = executor.collective_rpc(_reply_by_handle, args=call, **kwargs)[unique_reply_rank]
    failed = []
    reply = _opened(reply, failed)
    if failed:
        _SHARE_CUDA = False
        warnings.warn(f"a CUDA IPC handle could not be opened ({failed[0]}); replies are pickled from now on",
                      RuntimeWarning, stacklevel=2)
        reply = executor.collective_rpc(_held_reply, **kwargs)[unique_reply_rank]
    return [reply]


def _reply_by_handle(worker, method, args, kwargs):
    """Run in a worker: ``method``'s reply with its device tensors as IPC handles."""
    run = getattr(worker, method) if isinstance(method, str) else functools.partial(method, worker)
    reply = run(*args, **kwargs)
    _HELD[id(worker)] = reply
    return _by_handle(reply)


def _held_reply(worker=None):
    """Run in a worker: the last reply sent by handle, as it is (pickled by vLLM)."""
    return _HELD.get(id(worker))


def _by_handle(value):
    if type(value) in (list, tuple):
        return type(value)(_by_handle(v) for v in value)
    if type(value) is dict:
        return {k: _by_handle(v) for k, v in value.items()}
    if getattr(value, "is_cuda", False):
        from torch.multiprocessing.reductions import reduce_tensor

        try:
            return _DeviceTensor(*reduce_tensor(value))
        except Exception:  # noqa: BLE001 - memory that cannot be shared (expandable segments...) goes pickled
            return value
    return value


class _DeviceTensor:
    """A device tensor's CUDA IPC handle (``torch.multiprocessing``'s own reduction), opened where it arrives."""

    def __init__(self, rebuild, args):
        self.rebuild, self.args = rebuild, args

    def __reduce__(self):
        return _open_handle, (self.rebuild, self.args)


class _Unopened:
    def __init__(self, error):
        self.error = error


def _open_handle(rebuild, args):
    """Unpickled where the reply arrives: the tensor, or why its handle did not open (never an exception inside
    vLLM's message queue)."""
    try:
        return rebuild(*args)
    except Exception as exc:  # noqa: BLE001 - the caller asks for the reply again, pickled
        return _Unopened(f"{type(exc).__name__}: {exc}")


def _opened(value, failed):
    if isinstance(value, _Unopened):
        failed.append(value.error)
        return None
    if type(value) in (list, tuple):
        return type(value)(_opened(v, failed) for v in value)
    if type(value) is dict:
        return {k: _opened(v, failed) for k, v in value.items()}
    return value
'''


class RankReplies(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(reply_shape_probe.PROBE)
        if not failing:
            return plan
        executor = failing[0][1].symbol.rpartition(".")[0]
        shapes = {b.version: b.fact(replies.FACT, executor).multiproc.without_rank for b in ctx.builds}
        not_lists = sorted(v for v, shape in shapes.items() if shape != replies.ReplyShape.LIST)
        for location, pairs in ctx.by_location(failing).items():
            finding = pairs[0][1]
            tp = ctx.touchpoint(location, Kind.RPC)
            if not_lists:
                plan.unhandled.append(Unhandled(finding, "collective_rpc without a rank does not answer a list in "
                                                         f"vLLM {', '.join(not_lists)}"))
                continue
            if tp is None:
                plan.unhandled.append(Unhandled(finding, "not a collective_rpc call the scan knows"))
                continue
            plan.edits.append(RouteCall(tp.location.file, tp.location.line, tp.code, callee="collective_rpc",
                                        function=f"{ctx.shim.alias}.collective_rpc", receiver=True))
            plan.claims.append(Claim(reply_shape_probe.PROBE.name, finding.symbol))
        if plan.edits:
            plan.pieces.append(ShimPiece("replies:collective_rpc", CODE,
                                         f"{executor}.collective_rpc answers one entry per worker without a rank "
                                         "in every audited build; the shim keeps the chosen rank's as a list"))
            plan.notes.append("collective_rpc(..., unique_reply_rank=r) answers [reply of rank r] in every build")
        return plan


FIXER = RankReplies(
    name="replies",
    description="collective_rpc(..., unique_reply_rank=...) whose reply the consumer indexes: the shim answers "
                "a one-entry list in every build.",
    handles=(reply_shape_probe.PROBE,),
    order=40,
)
