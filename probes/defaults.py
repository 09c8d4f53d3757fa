"""Changed defaults: config fields the consumer leaves out whose default is not the one it was written against.

speculators 0.3.0 builds ``SchedulerConfig(max_num_seqs=..., max_model_len=..., max_num_batched_tokens=...)`` and
never passes ``enable_chunked_prefill``: ``None`` (off) in vLLM 0.11.0, the build it was written for, ``True`` from
0.11.1, so ``Scheduler.schedule`` splits its prompts across steps and the consumer, which finishes every request
after one step, loses rows without an error. Nothing in the call's signature changed; only the value the build
fills in did. For each call that builds a config class (``vllm.config``, ``EngineArgs``), every field the call
does not pass is compared between the build the consumer was written for and the audited build
(``compat.facts.defaults``: the declared default, and what the build's own construction always sets it to). A
difference is ``changed`` when code the consumer runs reads the field (a method or constructor it calls, the
config's own construction, ``VllmConfig``'s), else ``ok``: visible, naming who reads it, but not failing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import replace

from compat.probes.consequence import config_class, consumer_runs

from compat.consumer.result import Kind, TouchPoint
from compat.facts import defaults
from compat.facts.defaults import ConfigDefaults, FieldDefault, Read, short
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext
from compat.signature import Signature
from compat.vllm.surface import Found

_SHOWN = 3


def _reader(read: Read, runs: dict[str, str]) -> str:
    via = f" (as {read.through})" if read.through else ""
    called = f", which the consumer calls at {runs[read.function]}" if read.function in runs else ""
    return f"{short(read.function)}{via} ({read.at}){called}"


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _relied_on(old: FieldDefault, new: FieldDefault) -> str:
    """The value to pass to keep what the consumer was written against: the old default, except that a ``None``
    that is now a bool was the falsy ``False`` (vLLM 0.11.0's ``enable_chunked_prefill=None`` meant off)."""
    try:
        before, after = ast.literal_eval(old.effective or ""), ast.literal_eval(new.effective or "")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return str(old.effective)
    return "False" if before is None and isinstance(after, bool) else str(old.effective)


class DefaultsProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        if ctx.written_for is None:
            return []
        built = [(tp, found) for tp in ctx.touchpoints((Kind.CALL,))
                 if tp.call is not None and (found := config_class(ctx, tp)) is not None]
        if not built:
            return []
        runs = consumer_runs(ctx)
        return [finding for tp, found in built for finding in self._judge(ctx, tp, found, runs)]

    def _judge(self, ctx: ProbeContext, tp: TouchPoint, found: Found, runs: dict[str, str]) -> Iterator[Finding]:
        assert ctx.written_for is not None and tp.call is not None
        before = config_class(ctx, tp, ctx.written_for)
        if before is None:
            return  # the class is new in this build: it has no default to have changed
        old = ctx.fact(defaults.FACT, before.path, "", surface=ctx.written_for)
        new = ctx.fact(defaults.FACT, found.path, "")
        sig = ctx.surface.signature(found)
        passed = set(tp.call.keywords) | set(sig.positional_targets(tp.call) if isinstance(sig, Signature) else ())
        changed = [(o, n) for n in new.fields if n.name not in passed
                   and (o := old.get(n.name)) is not None and o.effective != n.effective]
        if not changed:
            return
        name = tp.symbol.rsplit(".", 1)[-1]
        if tp.call.star_kwargs or tp.call.star_args:
            fields = ", ".join(f"{n.name} ({o.effective} -> {n.effective})" for o, n in changed)
            yield self.finding(
                tp, Status.OK, f"{name}(...) passes arguments through an opaque *args/**kwargs, so which fields it "
                f"leaves to their defaults is not known; these defaults differ from vLLM "
                f"{ctx.written_for.build.version}: {fields}", new.at, symbol=tp.symbol)
            return
        read = ctx.fact(defaults.FACT, found.path, ",".join(sorted(n.name for _, n in changed)))
        for o, n in changed:
            yield self._finding(ctx, tp, name, o, read.get(n.name) or n, runs, new)

    def _finding(self, ctx: ProbeContext, tp: TouchPoint, name: str, old: FieldDefault, new: FieldDefault,
                 runs: dict[str, str], config: ConfigDefaults) -> Finding:
        assert ctx.written_for is not None
        version = ctx.written_for.build.version
        order = list(runs)
        linked = sorted((r for r in new.reads if r.function in runs), key=lambda r: order.index(r.function))
        others = [r for r in new.reads if r.function not in runs]
        may = new.may_become()
        later = f", and vLLM's construction may still set it to {may}" if may else ""
        head = (f"{name}.{new.name} defaults to {new.describe()} in this build ({old.describe()} in vLLM {version}, "
                f"the build the consumer was written for){later}; the consumer's {name}(...) does not pass it; ")
        if linked:
            status, tail = Status.CHANGED, "read by " + _listed([_reader(r, runs) for r in linked])
        elif others:
            status = Status.OK
            tail = "no code the consumer calls reads it directly (read by " + \
                _listed([_reader(r, runs) for r in others]) + ")"
        else:
            status, tail = Status.OK, f"nothing in this build reads it through {config.attribute}"
        if old.effective == "None" and re.fullmatch(r"[A-Z]\w*\(\)", new.effective or ""):
            tail += (f" (None became a default {new.effective}: whether that turns anything on is up to that class's "
                     "own defaults)")
        if status is Status.CHANGED and tp.guards:
            status = Status.UNKNOWN
            tail += " (but this call is guarded: " + "; ".join(f"`{g.text}` at {g.location}" for g in tp.guards) + \
                ", which this probe does not evaluate)"
        extra = (("declared", f"{new.default} ({new.declared_at})"),
                 ("declared_written_for", f"{old.default} ({old.declared_at})"),
                 ("rewrites", "; ".join(r.render() for r in new.rewrites)),
                 ("rewrites_written_for", "; ".join(r.render() for r in old.rewrites)),
                 ("readers_consumer_calls", "; ".join(_reader(r, runs) for r in linked)),
                 ("readers", _listed([_reader(r, runs) for r in others]) if others else ""))
        evidence = Evidence(written_for=old.describe(), audited=new.describe(), written_for_build=version,
                            extra=tuple((k, v) for k, v in extra if v))
        fix = (f"pass {new.name}={_relied_on(old, new)} to {name}(...) explicitly: the value vLLM {version} gave it, "
               f"which the consumer was written against")
        setters = [r for r in new.rewrites if r.applies is True and r.replaces]
        if setters:
            when = f"if {setters[-1].condition}" if setters[-1].condition else "whatever is passed"
            fix += f" (but {short(setters[-1].by)} sets it {when}, so the value passed may not be kept)"
        found = self.finding(tp, status, head + tail, new.declared_at, evidence, fix, symbol=f"{tp.symbol}.{new.name}")
        # One identity per field (the matrix's rows, bisection): several fields of one call change at different builds.
        return replace(found, touchpoint=found.symbol)


PROBE = DefaultsProbe(
    name="defaults",
    description="Config fields the consumer leaves to their defaults (SchedulerConfig.enable_chunked_prefill, "
                "CacheConfig.enable_prefix_caching) whose default differs from the build it was written for; "
                "changed when code the consumer runs reads them.",
    order=62,
)
