"""Changed defaults of config objects the consumer builds itself (``probes/defaults.py``).

Each changed default is handled by what the build's code shows about it, never by a list of fields:

- a switch the consumer was written against as off (``None`` or ``False``) that this build turns on (``True``, or
  ``None`` that vLLM's construction may turn on: ``SchedulerConfig.async_scheduling``) is kept off: the shim's
  wrapper of the config passes the old value where the caller passes none. Chunked prefill is the exception when
  the consumer runs its own step loop: the ``steps`` fixer makes that loop right whether or not prompts are split,
  and the build's scheduling is kept. A ``disable_*`` switch turned on turns a feature off
  (``ModelConfig.disable_cascade_attn``): accepted, the consumer runs as vLLM's own engine does;
- ``None`` that became a config object made with its own defaults (``VllmConfig.observability_config``: ``None``
  -> ``ObservabilityConfig()``) is accepted: vLLM's own engine runs with that object when nothing is configured;
- a ``*_cls`` field naming the class vLLM's engine builds (``SchedulerConfig.scheduler_cls``) is accepted where the
  consumer builds that object itself, so the field is never used;
- anything else is left unhandled, with the finding's own words.
"""

from __future__ import annotations

import re

import compat.probes.defaults as defaults_probe

from compat.consumer.result import Kind
from compat.findings import Finding
from compat.fix.context import FixContext
from compat.fix.edits import RouteImport
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from compat.fix.shim import PINNED_PREFIX, adjustment_name, raw_import
from compat.fix.source import imported_as

NAME = defaults_probe.PROBE.name
CHUNKED = "enable_chunked_prefill"


def _effective(described: str | None) -> str:
    """The effective default out of the probe's description (``0 (declared None; ... sets it)`` -> ``0``)."""
    return (described or "").split(" (declared ", 1)[0].strip()


def _turned_on(finding: Finding) -> bool:
    old, new = _effective(finding.evidence.written_for), _effective(finding.evidence.audited)
    if old.startswith("absent"):
        # A switch the build it was written for does not have (off there) that this build decides: turned on
        # on some platform, or left for code on the consumer's path to decide at run time.
        return re.search(r": True\b", new) is not None or "decides it at run time" in finding.message
    later = finding.message.partition("may still set it to ")[2].partition("; the consumer")[0]
    may = re.search(r"\bTrue\b", later) is not None
    return old in ("None", "False") and (new == "True" or (new == "None" and may))


def _made_with_defaults(finding: Finding) -> str | None:
    new = _effective(finding.evidence.audited)
    return new if _effective(finding.evidence.written_for) == "None" and re.fullmatch(r"[A-Z]\w*\(\)", new) else None


def _built_itself(ctx: FixContext, field: str) -> str | None:
    """For ``<kind>_cls``: where the consumer builds an object of that kind itself (``Scheduler(...)``)."""
    if not field.endswith("_cls"):
        return None
    kind = field.removesuffix("_cls").replace("_", "").lower()
    for tp in ctx.scan.touchpoints:
        if tp.kind == Kind.CALL and tp.symbol.rpartition(".")[2].lower().endswith(kind):
            return str(tp.location)
    return None


def _adjustment(config: str, pinned: dict[str, tuple[str, list[str]]]) -> str:
    lines = [f"{PINNED_PREFIX}{config} = {{"]
    for field, (value, versions) in pinned.items():
        lines.append(f"    # {field}: {value} in the build written for; turned on in vLLM {', '.join(versions)}")
        lines.append(f"    {field!r}: {value},")
    lines.append("}")
    return "\n".join(lines) + f'''


def {adjustment_name(config, NAME)}(target, params, args, kwargs, context):
    """Switches this build turns on by default kept as the consumer was written against them, unless the caller
    sets them."""
    for name, value in {PINNED_PREFIX}{config}.items():
        if name in params and name not in _passed(target, args, kwargs):
            kwargs[name] = value
    return args, kwargs
'''


class ChangedDefaults(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(defaults_probe.PROBE)
        pinned: dict[str, dict[str, tuple[str, list[str]]]] = {}
        routes: dict[str, tuple[str, int]] = {}
        for build, finding in failing:
            config, _, field = finding.symbol.rpartition(".")
            name = config.rpartition(".")[2]
            if field == CHUNKED and ctx.scan.step_loops:
                continue  # the steps fixer's
            made = _made_with_defaults(finding)
            built = _built_itself(ctx, field)
            if _turned_on(finding) and field.startswith("disable_"):
                plan.accepted.append((Claim(NAME, finding.symbol), f"this build turns a feature off by default "
                                      f"({field}=True): the consumer runs without it, as vLLM's own engine does"))
            elif _turned_on(finding):
                route = self._route(ctx, finding, config, name)
                if isinstance(route, str):
                    plan.unhandled.append(Unhandled(finding, route))
                    continue
                routes[name] = route
                value = "False"
                pinned.setdefault(name, {}).setdefault(field, (value, []))[1].append(build.version)
                plan.claims.append(Claim(NAME, finding.symbol))
            elif made:
                plan.accepted.append((Claim(NAME, finding.symbol), f"None became {made}, made with its own defaults: "
                                      "the object vLLM's own engine runs with when nothing is configured"))
            elif built:
                plan.accepted.append((Claim(NAME, finding.symbol), f"the consumer builds that object itself "
                                      f"({built}), so the class the config names is never used"))
            else:
                plan.unhandled.append(Unhandled(finding, "no rule of the defaults fixer covers this change: "
                                                + finding.message))
        for name, fields in pinned.items():
            file, line = routes[name]
            symbol = f"vllm.config.{name}"
            plan.pieces += [raw_import(ctx, symbol),
                            ShimPiece(f"adjust:{name}:{NAME}", _adjustment(name, fields),
                                      f"{name}: switches kept off as the consumer was written against them",
                                      wraps=name)]
            plan.edits.append(RouteImport(file, line, f"from vllm.config import {name}", module="vllm.config",
                                          names=(name,), shim=ctx.shim.module))
            plan.notes.append(f"{name} keeps {', '.join(f'{f}={v}' for f, (v, _) in fields.items())} unless the "
                              f"consumer passes them (turned on by default in {_versions(fields)})")
        return plan

    @staticmethod
    def _route(ctx: FixContext, finding: Finding, config: str, name: str) -> tuple[str, int] | str:
        """Where the consumer imports the config class by its own name, so the shim's wrapper can take its place."""
        files = {(finding.consumer_location or "").rpartition(":")[0]}
        for tp in ctx.scan.touchpoints:
            if tp.kind == Kind.IMPORT and tp.symbol.rpartition(".")[2] == name and tp.location.file in files \
                    and imported_as(ctx.root, tp.location.file, tp.location.line, name) == name:
                return tp.location.file, tp.location.line
        return f"the consumer does not build {name} from `from vllm.config import {name}`"


def _versions(fields: dict[str, tuple[str, list[str]]]) -> str:
    versions = sorted({v for _, builds in fields.values() for v in builds},
                      key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3]))
    return f"vLLM {versions[0]}-{versions[-1]}" if len(versions) > 1 else f"vLLM {versions[0]}"


FIXER = ChangedDefaults(
    name=NAME,
    description="Changed defaults of configs the consumer builds: switches turned on since the build it was "
                "written for kept off, defaults that change nothing for it accepted with why, the rest listed.",
    handles=(defaults_probe.PROBE,),
    order=52,
)
