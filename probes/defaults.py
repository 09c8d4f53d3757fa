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
from compat.facts import defaults, reach
from compat.facts.defaults import ConfigDefaults, FieldDefault, Read, short
from compat.facts.resolution import UNKNOWN
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext
from compat.probes import consequence
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
                   and (o := old.get(n.name)) is not None and o.effective != n.effective
                   and not self._same_everywhere(ctx, before.path, found.path, n.name)]
        yield from self._new_fields(ctx, tp, found, old, new, passed)
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

    @staticmethod
    def _same_everywhere(ctx: ProbeContext, before: str, after: str, name: str) -> bool:
        """Whether the field ends up the same on every platform in both builds, as their code builds the
        consumer's configs (``VllmConfig.kv_transfer_config``: declared None in both; the rewrite to
        ``KVTransferConfig()`` sits after an early return unless ``kv_offloading_size`` is set), each known."""
        old = consequence.values(ctx, before, name, ctx.written_for)
        new = consequence.values(ctx, after, name)
        if not old or len(old) != len(new):
            return False
        return all(o is not UNKNOWN and n is not UNKNOWN and repr(o) == repr(n)
                   for (_, o, _), (_, n, _) in zip(old, new))

    def _new_fields(self, ctx: ProbeContext, tp: TouchPoint, found: Found, old: ConfigDefaults, new: ConfigDefaults,
                    passed: set[str]) -> Iterator[Finding]:
        """Switches the build the consumer was written for does not have (``bool`` fields), left to the build where
        the build decides them: declared ``None`` ("auto") and set by its own code, on some platform, to True
        (``CacheConfig.enable_extensible_kv_cache``: True on CUDA, False on CPU), or left ``None`` for code on the
        consumer's path to decide at run time (``ParallelConfig.numa_bind``: ``configure_subprocess``, when the
        executor starts a worker). Changed where the consumer's path reads them; the others are not findings."""
        assert ctx.written_for is not None and tp.call is not None
        if tp.call.star_kwargs or tp.call.star_args:
            return
        static = consequence.static_surface(ctx)
        if static is None:
            return
        platforms = consequence.platforms(ctx)
        held = reach.config_classes(static)
        sig = ctx.surface.signature(found)
        switches = {p.name for p in (sig.parameters if isinstance(sig, Signature) else ())
                    if re.search(r"\bbool\b", p.annotation or "")}
        name = tp.symbol.rsplit(".", 1)[-1]
        version = ctx.written_for.build.version
        for field in new.fields:
            if field.name in passed or old.get(field.name) is not None or field.default != "None" \
                    or field.name.startswith("_") or field.name in held or field.name not in switches:
                continue
            values = consequence.values(ctx, found.path, field.name)
            if not values:
                continue
            reads = {p.name: consequence.reads_on_path(ctx, p, found.path, field.name) for p in platforms}
            later = {p.name: [w for w in p.path.writes if w.kind == reach.CONFIG and w.config == found.path
                              and w.field == field.name
                              and w.value not in ("None", "")] for p in platforms}
            on = [(p, v, at) for p, v, at in values if v is True]
            auto = [(p, v, at) for p, v, at in values if v is None and later.get(p) and reads.get(p)]
            if not any(reads.values()) or not (on or auto):
                continue
            said = "; ".join(f"on {p}: {consequence.shown(v)} ({at})" for p, v, at in values)
            parts = []
            if on:
                parts.append(f"the build turns it on where it decides it ({', '.join(p for p, _, _ in on)})")
            for p, _, _ in auto:
                write = later[p][0]
                parts.append(f"on {p} it stays None once the configs are built and {short(write.function)} decides "
                             f"it at run time ({write.at}), on the consumer's path")
            readers = [f"on {p}: {r[0].render()}" for p, r in reads.items() if r]
            message = (f"{name}.{field.name} is new since vLLM {version} ({self._which(ctx)}), declared None "
                       f"({field.declared_at}) and left to the build by the consumer's {name}(...): "
                       + "; ".join(parts) + f" ({said}); read on the consumer's path ("
                       + "; ".join(readers[:2]) + ")")
            evidence = Evidence(written_for="absent (the switch does not exist: off)", audited=said,
                                written_for_build=version,
                                extra=tuple((f"platform_{p.lower()}", f"{consequence.shown(v)} ({at})")
                                            for p, v, at in values))
            fix = (f"pass {field.name}=False to {name}(...) where the build has it: the behaviour the consumer was "
                   f"written against (vLLM {version} has no such switch)")
            finding = self.finding(tp, Status.CHANGED, message, field.declared_at, evidence, fix,
                                   symbol=f"{tp.symbol}.{field.name}")
            yield replace(finding, touchpoint=finding.symbol)

    @staticmethod
    def _which(ctx: ProbeContext) -> str:
        """What the compared build is to the consumer: the build it was written for, or the baseline of an
        upgrade audit (a build it was not pinned to)."""
        assert ctx.written_for is not None
        pinned = ctx.scan.written_for
        if pinned is None or pinned == ctx.written_for.build.version:
            return "the build the consumer was written for"
        return f"the baseline; the consumer was written for vLLM {pinned}"

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
                f"{self._which(ctx)}){later}; the consumer's {name}(...) does not pass it; ")
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
        on = tuple((f"platform_{p.lower()}", f"{consequence.shown(v)} ({at})")
                   for p, v, at in consequence.values(ctx, config.config, new.name))
        evidence = Evidence(written_for=old.describe(), audited=new.describe(), written_for_build=version,
                            extra=tuple((k, v) for k, v in extra if v) + on)
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
