"""Worker RPC: methods the consumer asks workers to run by name exist on vLLM's worker or its extension."""

from __future__ import annotations

from compat.consumer.result import ConsumerClass, Kind, TouchPoint
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext
from compat.vllm.surface import Found, Unresolved

RPC_WRAPPERS = ("vllm.v1.worker.worker_base.WorkerWrapperBase", "vllm.worker.worker_base.WorkerWrapperBase",
                "vllm.v1.executor.ray_utils.RayWorkerWrapper", "vllm.executor.ray_utils.RayWorkerWrapper")
"""What receives an RPC before the worker (``execute_method`` on the wrapper): a method defined there runs
there, not on the worker."""


def _extension_classes(ctx: ProbeContext) -> list[ConsumerClass]:
    wanted = {name for name, _ in ctx.scan.worker_extensions}
    return [c for c in ctx.scan.classes if c.qualname in wanted]


def _consumer_methods(ctx: ProbeContext, cls: ConsumerClass) -> dict[str, ConsumerClass]:
    by_name = {c.qualname: c for c in ctx.scan.classes}
    found: dict[str, ConsumerClass] = {}
    stack, seen = [cls], set()
    while stack:
        current = stack.pop(0)
        if current.qualname in seen:
            continue
        seen.add(current.qualname)
        for method in current.methods:
            found.setdefault(method, current)
        stack.extend(by_name[b] for b in current.bases if b in by_name)
    return found


class RpcProbe(Probe):
    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        name = tp.rpc_method or "?"
        if tp.note:
            return self.finding(tp, Status.UNKNOWN, tp.note)
        for cls in _extension_classes(ctx):
            owner = _consumer_methods(ctx, cls).get(name)
            if owner is not None:
                return self.finding(tp, Status.OK,
                                    f"worker method '{name}' is provided by the consumer's worker extension "
                                    f"{cls.qualname}", None,
                                    Evidence(extra=(("provided_by", f"{owner.qualname} ({owner.location})"),)),
                                    symbol=f"{cls.qualname}.{name}")
        worker = ctx.lookup(ctx.worker_class)
        if not isinstance(worker, Found):
            return self.finding(tp, Status.UNKNOWN, f"vLLM's worker class {ctx.worker_class} cannot be read: "
                                f"{worker.reason}", symbol=f"{ctx.worker_class}.{name}")
        member = ctx.surface.member(worker, name)
        label = f"{worker.path}.{name}"
        if isinstance(member, Found):
            return self.finding(tp, Status.OK, f"worker method '{name}' exists on {worker.path}", ctx.where(member),
                                Evidence(audited=ctx.where(member)), symbol=label)
        for path in RPC_WRAPPERS:  # what receives an RPC before the worker may define the method itself
            wrapper = ctx.lookup(path)
            if isinstance(wrapper, Found) and isinstance(ctx.surface.member(wrapper, name), Found):
                return self.finding(tp, Status.OK, f"'{name}' is run by {wrapper.path}, which receives RPCs before "
                                    "the worker", ctx.where(wrapper), symbol=f"{wrapper.path}.{name}")
        extensions = ", ".join(c for c, _ in ctx.scan.worker_extensions) or "none declared"
        if isinstance(member, Unresolved):
            return self.finding(tp, Status.UNKNOWN, f"cannot tell whether workers have '{name}': {member.reason}",
                                ctx.where(worker), symbol=label)
        unseen = [c for c, _ in ctx.scan.worker_extensions if c not in {k.qualname for k in ctx.scan.classes}]
        defining = [c.qualname for c in ctx.scan.classes if name in c.methods]
        if unseen or defining:
            # The extension that provides it is not known: named outside the consumer's code, or installed in a
            # way the scan does not follow (a command-line flag); a consumer class defining it suggests the latter.
            why = (f"the worker extension {', '.join(unseen)} is not in the consumer's code" if unseen else
                   f"{', '.join(defining[:3])} defines it, but the scan did not see it installed as a worker extension")
            return self.finding(tp, Status.UNKNOWN, f"workers have no method '{name}' on {worker.path}; {why}",
                                ctx.where(worker), symbol=label)
        return self.finding(tp, Status.BROKEN,
                            f"workers have no method '{name}': not on {worker.path} (or its bases) and not on the "
                            f"consumer's worker extension ({extensions})", ctx.where(worker),
                            fix=f"define '{name}' on the worker extension or call the method vLLM provides now",
                            symbol=label)


PROBE = RpcProbe(
    name="rpc",
    description="Methods the consumer asks workers to run by name (collective_rpc(\"...\")) exist on vLLM's worker "
                "class or on the consumer's worker extension (ParallelConfig(worker_extension_cls=...)).",
    kinds=(Kind.RPC,),
    order=40,
)
