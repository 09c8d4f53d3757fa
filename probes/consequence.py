"""What a start-up step or a default does to the consumer on each platform, read from the build's code.

For each platform vLLM resolves its configs on (``compat.facts.resolution.PLATFORMS``): the configs as the
consumer's calls build them and ``VllmConfig``'s construction resolves them there, the worker class the platform
names, and what the consumer's path reaches (``compat.facts.reach``: from the build's code the consumer calls
itself, across the executor's RPCs into that worker). A field is read on the consumer's path when one of its
readers (``compat.facts.defaults``) is among the defs reached.
"""

from __future__ import annotations

from dataclasses import dataclass

from compat.consumer.result import Kind, PatchKind, TouchPoint
from compat.facts import defaults, reach, resolution
from compat.probe import ProbeContext
from compat.vllm.static import StaticSurface, static_reading
from compat.vllm.surface import Found, FoundKind, Surface

CONFIG_PACKAGE = "vllm.config"
OPAQUE = "<passed>"
ENGINE_ARGS = ("EngineArgs", "AsyncEngineArgs")
CALLABLE_KINDS = ("method", "function", "classmethod", "staticmethod", "property")
PLATFORM = "vllm.platforms.interface.Platform"


def config_class(ctx: ProbeContext, tp: TouchPoint, surface: Surface | None = None) -> Found | None:
    """The config class a call builds (one of ``vllm.config``'s, or ``EngineArgs``), else None."""
    found = ctx.lookup(tp.symbol, surface)
    if not isinstance(found, Found) or found.kind != FoundKind.CLASS:
        return None
    inside = found.path.startswith(CONFIG_PACKAGE + ".") or found.path.rsplit(".", 1)[-1] in ENGINE_ARGS
    return found if inside else None


def consumer_runs(ctx: ProbeContext) -> dict[str, str]:
    """The build's code the consumer runs directly, by dotted path, with where it does: functions and methods it
    calls (``Scheduler(...).schedule()``) and constructors of what it builds (``Scheduler.__init__``) first, then
    the construction of the configs it builds (``SchedulerConfig.__post_init__``, ``VllmConfig.__post_init__``)."""
    runs: dict[str, str] = {}
    configs: list[tuple[str, str]] = []
    for tp in ctx.scan.touchpoints:
        where = str(tp.location)
        if tp.kind is Kind.CALL:
            found = ctx.lookup(tp.symbol)
            if not isinstance(found, Found):
                continue
            if found.kind != FoundKind.CLASS:
                runs.setdefault(found.path, where)
            elif config_class(ctx, tp) is not None:
                configs.append((found.path, where))
            else:
                for name in ("__new__", "__init__", "__post_init__"):
                    member = ctx.member(found, name)
                    if isinstance(member, Found) and member.kind in CALLABLE_KINDS:
                        runs.setdefault(member.path, where)
        elif tp.kind is Kind.ATTRIBUTE and tp.receiver is not None and tp.attribute and not tp.store:
            callee = ctx.callee(tp.receiver.attr(tp.attribute))
            if isinstance(callee, Found) and (callee.kind == FoundKind.PROPERTY or
                                              tp.call is not None and callee.kind in CALLABLE_KINDS):
                runs.setdefault(callee.path, where)
    for path, where in configs:
        for step in ctx.fact(defaults.FACT, path, "").constructor:
            runs.setdefault(step, where)
    return runs




def passed(ctx: ProbeContext, surface: Surface | None = None) -> str:
    """What the consumer's calls of config classes pass, as ``compat.facts.resolution.parse_passed`` reads it
    (``CacheConfig.block_size=16;...``; a keyword whose value the scan does not read as ``<passed>``), and what
    its configs are given besides (``Scan.settings``: the shim's pinned defaults, where the build has the field)."""
    items: dict[str, str] = {}
    for config, name, value in ctx.scan.settings:
        items[f"{config}.{name}"] = value
    for tp in ctx.scan.touchpoints:
        if tp.kind is Kind.CALL and tp.call is not None and (found := config_class(ctx, tp, surface)) is not None:
            short = found.path.rsplit(".", 1)[-1]
            for name, value in tp.literals:
                items[f"{short}.{name}"] = value
            for name in tp.call.keywords:
                items.setdefault(f"{short}.{name}", OPAQUE)  # passed, as a value the scan does not read
    return ";".join(f"{k}={v}" for k, v in sorted(items.items()))


@dataclass(frozen=True)
class Platform:
    """One platform as the consumer meets it."""

    name: str
    resolved: resolution.Resolved
    worker: str | None
    path: reach.Reach
    """What the consumer's path reaches there."""
    passed: dict[str, dict[str, object]]

    def value(self, ctx: ProbeContext, config: str, name: str) -> tuple[object, str]:
        static = static_surface(ctx)
        if static is None:
            return resolution.UNKNOWN, ""
        return resolution.field_value(static, self.resolved, config, name, self.passed)


def static_surface(ctx: ProbeContext, surface: Surface | None = None) -> StaticSurface | None:
    """The static reading of the audited build, or of ``surface`` (an installed build read by importing it keeps
    one too)."""
    return static_reading(surface or ctx.surface)


def platforms(ctx: ProbeContext) -> list[Platform]:
    """Every platform as the consumer meets it after start-up: the path is what its calls reach once the configs
    are built (the configs' own construction, which runs before any start-up step, is not on it)."""
    static = static_surface(ctx)
    if static is None:
        return []
    given = passed(ctx)
    runs = consumer_runs(ctx)
    building = {step for tp in ctx.scan.touchpoints if tp.kind is Kind.CALL and (found := config_class(ctx, tp))
                for step in ctx.fact(defaults.FACT, found.path, "").constructor}
    entries = ",".join(sorted(p for p in runs if p not in building and not p.startswith(CONFIG_PACKAGE + ".")))
    out = []
    for name in resolution.PLATFORMS:
        resolved = ctx.fact(resolution.FACT, name, given)
        worker = resolution.worker_class(static, name)
        path = ctx.fact(reach.FACT, entries, worker or "")
        out.append(Platform(name, resolved, worker, path, resolution.parse_passed(given)))
    return out


@dataclass(frozen=True)
class PathRead:
    function: str
    at: str

    def render(self) -> str:
        return f"{defaults.short(self.function)} ({self.at})"


def reads_on_path(ctx: ProbeContext, platform: Platform, config: str, name: str) -> list[PathRead]:
    """Where the defs the consumer's path reaches on ``platform`` read ``config.name``: ``<...>.<attr>.<name>``
    where ``attr`` is the name vLLM holds that config under, or ``self.<name>`` in the config's own methods."""
    return [PathRead(r.function, r.at) for r in platform.path.reads
            if r.kind == reach.CONFIG and r.config == config and r.field == name]


def same_state(ctx: ProbeContext, a: reach.Write | reach.FieldRead, b: reach.Write | reach.FieldRead) -> bool:
    """Whether ``a`` and ``b`` are about one piece of state: a config field, a module global, or the attribute of
    objects of one class (or classes one of which is a base of the other)."""
    if a.kind != b.kind or a.field != b.field:
        return False
    if a.kind != reach.INSTANCE or a.config == b.config:
        return a.config == b.config
    static = static_surface(ctx)
    return static is not None and reach.related(static, a.config, b.config)


def state_written_on_path(platform: Platform, write: reach.Write) -> reach.Write | None:
    """The consumer's path running the statement ``write`` is itself (``KVCacheSpecRegistry.get_manager_class``
    registers the specs when none are): another statement writing the same state is not enough, as what runs
    first and what it assigns are not read here."""
    return next((w for w in platform.path.writes if w.at == write.at and w.field == write.field), None)


def state_reads_on_path(ctx: ProbeContext, platform: Platform, write: reach.Write) -> list[PathRead]:
    """Where the defs the consumer's path reaches on ``platform`` read the state ``write`` changes: the config
    field, the module global, or the attribute of the same object (``self`` of the class or one related to it by
    inheritance)."""
    if write.kind == reach.CONFIG:
        return reads_on_path(ctx, platform, write.config, write.field)
    return [PathRead(r.function, r.at) for r in platform.path.reads if same_state(ctx, r, write) and not r.tested]


def tested_on_path(ctx: ProbeContext, platform: Platform, write: reach.Write) -> list[PathRead]:
    """The reads of ``write``'s state (a module global, an object's attribute) whose def tests it before use."""
    if write.kind == reach.CONFIG:
        return []
    return [PathRead(r.function, r.at) for r in platform.path.reads if same_state(ctx, r, write) and r.tested]


def values(ctx: ProbeContext, config: str, name: str, surface: Surface | None = None) -> list[tuple[str, object, str]]:
    """``config.name`` on every platform once the build ``surface`` (the audited one by default) has built the
    consumer's configs: (platform, value, the code that decided it)."""
    inner = static_surface(ctx, surface)
    if inner is None:
        return []
    given = passed(ctx, surface)
    out = []
    for platform in resolution.PLATFORMS:
        resolved = ctx.fact(resolution.FACT, platform, given, surface=surface) if surface is not None else \
            ctx.fact(resolution.FACT, platform, given)
        value, at = resolution.field_value(inner, resolved, config, name, resolution.parse_passed(given))
        out.append((platform, value, at))
    return out


def shown(value: object) -> str:
    return "unknown" if value is resolution.UNKNOWN else repr(value)


def turned_on(ctx: ProbeContext, condition: str) -> list[tuple[str, str]]:
    """The platforms where ``condition`` (a test of vLLM's code on config fields) holds with this build's defaults
    but did not with the build the consumer was written for, each with what decides it there."""
    written = ctx.written_for
    now, then = static_surface(ctx), static_surface(ctx, written) if written is not None else None
    if written is None or now is None or then is None or not condition or not resolution.fields_in(now, condition):
        return []
    given_now, given_then = passed(ctx), passed(ctx, written)
    out = []
    for platform in resolution.PLATFORMS:
        resolved = ctx.fact(resolution.FACT, platform, given_now)
        before = ctx.fact(resolution.FACT, platform, given_then, surface=ctx.written_for)
        holds = resolution.evaluate(now, condition, resolved, resolution.parse_passed(given_now))
        held = resolution.evaluate(then, condition, before, resolution.parse_passed(given_then))
        if holds is True and held is not True:
            said = "; ".join(
                f"{c.rsplit('.', 1)[-1]}.{n} is {shown(resolution.field_value(now, resolved, c, n, {})[0])} "
                f"({resolution.field_value(now, resolved, c, n, {})[1]})"
                for c, n in resolution.fields_in(now, condition))
            out.append((platform, f"{said}; in vLLM {written.build.version} the test was "
                        f"{'false' if held is False else 'not decided by its defaults'}"))
    return out


@dataclass(frozen=True)
class OptIn:
    """A call of the build that runs only under a test of its configs that the consumer's own platform decides."""

    condition: str
    at: str
    """Where the test is (the call's own site, or the engine's call of the def that makes it)."""
    decided: str
    """What decides it: the value on each of vLLM's platforms, and the consumer's platform that decides it."""


def own_platform(ctx: ProbeContext) -> str | None:
    """The consumer's own platform (a platform plugin) made straight on vLLM's ``Platform`` interface, not on one of
    vLLM's platforms: what vLLM decides per platform (``current_platform.is_cuda_alike()``) it decides for itself."""
    for patch in ctx.scan.class_patches:
        if patch.kind == PatchKind.SUBCLASS:
            base = ctx.lookup(patch.target)
            if isinstance(base, Found) and base.path == PLATFORM:
                return patch.patcher
    return None


def platform_decides(ctx: ProbeContext, condition: str, at: str) -> OptIn | None:
    """``condition`` (a test of vLLM's code) when it reads config fields whose defaults vLLM resolves differently by
    platform (true on one, false on another), and the consumer brings its own platform, which vLLM's platforms do
    not describe. A test false on every platform is a feature the user turns on: a call under it still fails
    there, on an optional path."""
    static = static_surface(ctx)
    if static is None or not condition or not resolution.fields_in(static, condition):
        return None
    plugin = own_platform(ctx)
    if plugin is None:
        return None
    given = passed(ctx)
    held = {p: resolution.evaluate(static, condition, ctx.fact(resolution.FACT, p, given),
                                   resolution.parse_passed(given)) for p in resolution.PLATFORMS}
    if not any(v is True for v in held.values()) or not any(v is False for v in held.values()):
        return None
    shown_values = ", ".join(f"{p}: {shown(v)}" for p, v in held.items())
    return OptIn(condition, at, f"by default {shown_values}; {plugin}, the consumer's own platform, decides it")
