"""Start-up steps: what the engine core does between creating the executor and the first step, which a
hand-built pipeline does not.

Only the steps the pipeline's correctness depends on are performed (``REPLAYS``, each with why); the others
are accepted with the reason they do not matter for it (``compat.facts.startup.NOT_NEEDED``, which the
startup probe reports them ``ok`` with); a step this fixer does not know is
left as it is, listed. The code of a performed step follows the build's engine core and detects whether the
running build has the step (``hasattr`` on vLLM's own modules and classes, which the audit reads too).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

import compat.probes.startup as startup_probe
from packaging.version import Version

from compat.facts import replay
from compat.facts.startup import NOT_NEEDED
from compat.fix.context import AuditedBuild, FixContext, span
from compat.fix.edits import InsertAfter
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece
from compat.fix.source import function_of, segment, statement_at
from compat.vllm.surface import Found


@dataclass(frozen=True)
class Step:
    """A start-up step the fixer performs: the engine core's statements from ``first`` to ``last``."""

    first: str
    last: str
    names: tuple[str, ...]
    """The start-up steps (as the startup probe names them) these statements are."""
    function: str
    why: str


LAYOUT = Step("resolve_kv_cache_layout", "set_kv_cache_layout",
              ("resolve_kv_cache_layout", "set_kv_cache_layout", "get_supported_kv_cache_layouts"),
              "resolve_kv_cache_layout",
              "the workers and get_kv_cache_config_from_groups read the KV cache layout the engine core resolves "
              "(without it: \"ValueError: KV cache layout has not been resolved yet\")")
CLASSES = {"executor": ("vllm.v1.executor.abstract.Executor", "_Executor"),
           "vllm_config": ("vllm.config.VllmConfig", "_VllmConfig")}


def _alias(module: str) -> str:
    return "_vllm_" + module.removeprefix("vllm.").replace(".", "_")


def _step_code(step: Step, groups: list[tuple[replay.Replay, list[AuditedBuild]]],
               everywhere: set[str]) -> tuple[str, list[str]]:
    """The shim function performing ``step`` as each group of builds' engine core does (newest first), each
    branch run where the running build has what it uses; and the imports it needs."""
    imports = [f"from {CLASSES[k][0].rpartition('.')[0]} import {CLASSES[k][0].rpartition('.')[2]} as {CLASSES[k][1]}"
               for k in CLASSES]
    lines = [f"def {step.function}(executor: _Executor, vllm_config: _VllmConfig):",
             f'    """The engine core\'s start-up step, as the running build\'s engine core performs it: '
             f'{step.why}."""']
    for rep, builds in groups:
        tests, binds = [], []
        for local, path in rep.imports:
            module, _, name = path.rpartition(".")
            if module in everywhere:
                imports.append(f"from {module.rpartition('.')[0]} import {module.rpartition('.')[2]} as "
                               f"{_alias(module)}")
                tests.append(f"hasattr({_alias(module)}, {name!r})")
                binds.append(f"{local} = {_alias(module)}.{name}")
            else:
                tests.append(f"_lookup({path!r}) is not None")
                binds.append(f"{local} = _lookup({path!r})")
        tests += [f"hasattr(_Executor, {m!r})" for m in rep.executor_methods]
        tests += [f"hasattr(_VllmConfig, {m!r})" for m in rep.config_methods]
        lines.append(f"    # {span(builds)}: {rep.at}")
        lines.append("    if " + " and ".join(tests) + ":")
        lines += [f"        {b}" for b in binds] + [f"        {st}" for st in rep.statements] + ["        return"]
    return "\n".join(lines), sorted(set(imports))


def _step_name(symbol: str) -> str:
    return symbol.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


class StartupSteps(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(startup_probe.PROBE)
        names = {_step_name(f.symbol) for _, f in failing}
        if not failing:
            return plan
        if names & set(LAYOUT.names):
            self._layout(ctx, plan, failing)
        for name in sorted(names - set(LAYOUT.names)):
            if name in NOT_NEEDED:
                plan.accepted.append((Claim(startup_probe.PROBE.name, f"*{name}"), NOT_NEEDED[name].text()))
        return plan

    def _layout(self, ctx: FixContext, plan: FixerPlan, failing) -> None:
        groups: dict[replay.Replay, list[AuditedBuild]] = {}
        for build in ctx.builds:
            rep = build.fact(replay.FACT, LAYOUT.first, LAYOUT.last)
            if rep.statements:
                same = next((r for r in groups if replace(r, at=None) == replace(rep, at=None)), rep)
                groups.setdefault(same, []).append(build)
            elif rep.at is not None and rep.unsupported:
                plan.notes.append(f"vLLM {build.version}: the KV cache layout is not resolved: {rep.unsupported}")
        if not groups:
            return
        ordered = sorted(groups.items(), key=lambda g: max(Version(b.version) for b in g[1]), reverse=True)
        modules = {path.rpartition(".")[0] for rep in groups for _, path in rep.imports}
        everywhere = {m for m in modules if all(isinstance(b.surface.lookup(m), Found) for b in ctx.builds)}
        code, imports = _step_code(LAYOUT, ordered, everywhere)
        location = failing[0][1].consumer_location or ""
        file, _, line = location.rpartition(":")
        function = function_of(ctx.root, file, int(line))
        index = statement_at(function.body, int(line)) if function else None
        stmt = function.body[index] if function and index is not None else None
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and len(stmt.targets) == 1):
            plan.notes.append(f"the executor is not created as `x = Executor(...)` at {location}; the KV cache "
                              "layout is not resolved")
            return
        config = next((ast.unparse(k.value) for k in stmt.value.keywords if k.arg == "vllm_config"),
                      ast.unparse(stmt.value.args[0]) if stmt.value.args else None)
        executor = ast.unparse(stmt.targets[0])
        plan.pieces.append(ShimPiece("startup:layout", code, f"start-up: {LAYOUT.why}", imports=tuple(imports)))
        plan.edits.append(InsertAfter(file, stmt.lineno, "x = Executor(...)", expected=segment(ctx.root, file, stmt),
                                      code=f"{ctx.shim.alias}.{LAYOUT.function}({executor}, {config})"))
        plan.claims += [Claim(startup_probe.PROBE.name, f"*{name}") for name in LAYOUT.names]
        builds = [b for _, bs in ordered for b in bs]
        plan.notes.append(f"after creating the executor, the KV cache layout is resolved with the engine core's own "
                          f"statements ({', '.join(f'{span(bs)}: {r.at}' for r, bs in ordered)}; "
                          f"{span(sorted(builds, key=lambda b: Version(b.version)))}): {LAYOUT.why}")


FIXER = StartupSteps(
    name="startup",
    description="Start-up steps of the engine core that the hand-built pipeline skips: performs those its "
                "correctness depends on (the KV cache layout), and says why the others do not matter for it.",
    handles=(startup_probe.PROBE,),
    order=70,
)
