"""Start-up steps: what the engine core does between creating the executor and the first step, which a
hand-built pipeline does not.

The steps performed (``STEPS``, each with why): the KV cache layout, which the workers read, and the warm-up,
which builds up to 0.20 ran inside ``Executor.initialize_from_config`` and later ones leave to the engine core
(what it writes on the workers is read on the consumer's path). No step is accepted on a list: the startup probe
judges each skipped step by the state it writes, and the fix's re-audit (with the shim's settings) says which
are left, listed with the fix's exit code. The code of a performed step follows the build's engine core and
detects whether the running build has the step (``hasattr`` on vLLM's own modules and classes, which the audit
reads too)."""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, replace

import compat.probes.startup as startup_probe
from packaging.version import Version

from compat.facts import replay
from compat.findings import Status
from compat.fix.context import AuditedBuild, FixContext, span
from compat.fix.edits import InsertAfter
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece
from compat.fix.source import function_of, segment, statement_at
from compat.vllm.surface import Found, FoundKind


@dataclass(frozen=True)
class Step:
    """A start-up step the fixer performs: the engine core's statements from ``first`` to ``last``, inserted
    after the consumer's statement ``after`` names (``created``: ``x = Executor(...)``; ``initialized``: its
    ``x.initialize_from_config(...)``)."""

    first: str
    last: str
    names: tuple[str, ...]
    """The start-up steps (as the startup probe names them) these statements are."""
    function: str
    why: str
    after: str = "created"


LAYOUT = Step("resolve_kv_cache_layout", "set_kv_cache_layout",
              ("resolve_kv_cache_layout", "set_kv_cache_layout", "get_supported_kv_cache_layouts"),
              "resolve_kv_cache_layout",
              "the workers and get_kv_cache_config_from_groups read the KV cache layout the engine core resolves "
              "(without it: \"ValueError: KV cache layout has not been resolved yet\")")
WARM_UP = Step("compile_or_warm_up_model", "compile_or_warm_up_model", ("compile_or_warm_up_model",),
               "compile_or_warm_up_model",
               "the engine core warms the model up once the KV cache is made, and builds where it does not leave "
               "it to Executor.initialize_from_config, which warms up itself (vLLM 0.11.0 among them); what warm-up "
               "writes on the workers (CUDA graph buffers among it) is read on the consumer's path", "initialized")
STEPS = (LAYOUT, WARM_UP)
CLASSES = {"executor": ("vllm.v1.executor.abstract.Executor", "_Executor"),
           "vllm_config": ("vllm.config.VllmConfig", "_VllmConfig")}


def _alias(module: str) -> str:
    return "_vllm_" + module.removeprefix("vllm.").replace(".", "_")


def _import(module: str) -> str:
    parent, _, last = module.rpartition(".")
    return f"from {parent} import {last} as {_alias(module)}" if parent else f"import {module} as {_alias(module)}"


def _step_code(step: Step, groups: list[tuple[replay.Replay, list[AuditedBuild]]],
               everywhere: set[str], modules: set[str]) -> tuple[str, list[str]]:
    """The shim function performing ``step`` as each group of builds' engine core does (newest first), each
    branch run where the running build has what it uses; and the imports it needs. ``modules``: the imported
    names that are modules (``envs``), found and imported as modules rather than looked up in their parent (where
    ``vllm.envs`` need not be an attribute of ``vllm`` until something imports it)."""
    imports = [f"from {CLASSES[k][0].rpartition('.')[0]} import {CLASSES[k][0].rpartition('.')[2]} as {CLASSES[k][1]}"
               for k in CLASSES]
    lines = [f"def {step.function}(executor: _Executor, vllm_config: _VllmConfig):",
             f'    """The engine core\'s start-up step, as the running build\'s engine core performs it: '
             f'{step.why}."""']
    for rep, builds in groups:
        tests, binds = [], []
        for local, path in rep.imports:
            module, _, name = path.rpartition(".")
            if path in modules:  # a module (``import vllm.envs as envs``): found as a module, not as an attribute
                imports.append("import importlib.util")
                tests.append(f"importlib.util.find_spec({path!r}) is not None")
                binds.append(f"{local} = importlib.import_module({path!r})")
            elif module in everywhere:
                imports.append(_import(module))
                tests.append(f"hasattr({_alias(module)}, {name!r})")
                binds.append(f"{local} = {_alias(module)}.{name}")
            else:
                tests.append(f"_lookup({path!r}) is not None")
                binds.append(f"{local} = _lookup({path!r})")
        tests += [f"hasattr(_Executor, {m!r})" for m in rep.executor_methods]
        tests += [f"hasattr(_VllmConfig, {m!r})" for m in rep.config_methods]
        lines.append(f"    # {span(builds)}: {rep.at}")
        lines.append("    if " + (" and ".join(tests) or "True") + ":")
        lines += [textwrap.indent(text, " " * 8) for text in (*binds, *rep.statements, "return")]
    return "\n".join(lines), sorted(set(imports))


def _step_name(symbol: str) -> str:
    return symbol.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


class StartupSteps(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        # Not only broken and changed: a step the audit cannot decide is performed too where the fixer can, as
        # the engine core performs it, rather than left to be guessed harmless.
        undecided = [(b, f) for b in ctx.builds for f in b.findings
                     if f.check == startup_probe.PROBE.name and f.status is not Status.OK]
        names = {_step_name(f.symbol) for _, f in undecided}
        for step in STEPS:
            if names & set(step.names):
                self._perform(ctx, plan, step, [(b, f) for b, f in undecided if _step_name(f.symbol) in step.names])
        return plan

    def _perform(self, ctx: FixContext, plan: FixerPlan, step: Step, failing) -> None:
        groups: dict[replay.Replay, list[AuditedBuild]] = {}
        for build in ctx.builds:
            rep = build.fact(replay.FACT, step.first, step.last)
            if rep.statements:
                same = next((r for r in groups if replace(r, at=None) == replace(rep, at=None)), rep)
                groups.setdefault(same, []).append(build)
            elif rep.at is not None and rep.unsupported:
                plan.notes.append(f"vLLM {build.version}: {step.function} is not performed: {rep.unsupported}")
        if not groups:
            return
        ordered = sorted(groups.items(), key=lambda g: max(Version(b.version) for b in g[1]), reverse=True)
        paths = {path for rep in groups for _, path in rep.imports}
        modules = {p for p in paths if any(isinstance(f := b.surface.lookup(p), Found) and f.kind == FoundKind.MODULE
                                           for bs in groups.values() for b in bs)}
        parents = {p.rpartition(".")[0] for p in paths - modules}
        everywhere = {m for m in parents if all(isinstance(b.surface.lookup(m), Found) for b in ctx.builds)}
        code, imports = _step_code(step, ordered, everywhere, modules)
        location = failing[0][1].consumer_location or ""
        file, _, line = location.rpartition(":")
        function = function_of(ctx.root, file, int(line))
        index = statement_at(function.body, int(line)) if function else None
        stmt = function.body[index] if function and index is not None else None
        if function is None or not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                                    and len(stmt.targets) == 1):
            plan.notes.append(f"the executor is not created as `x = Executor(...)` at {location}; {step.function} "
                              "is not performed")
            return
        config = next((ast.unparse(k.value) for k in stmt.value.keywords if k.arg == "vllm_config"),
                      ast.unparse(stmt.value.args[0]) if stmt.value.args else None)
        executor = ast.unparse(stmt.targets[0])
        anchor: ast.stmt = stmt
        if step.after == "initialized":
            found = _initialized(function, executor)
            if found is None:
                plan.notes.append(f"{executor}.initialize_from_config(...) is not called as a statement of the "
                                  f"function that creates the executor at {location}; {step.function} is not "
                                  "performed")
                return
            anchor = found
        plan.pieces.append(ShimPiece(f"startup:{step.function}", code, f"start-up: {step.why}",
                                     imports=tuple(imports)))
        plan.edits.append(InsertAfter(file, anchor.lineno, ast.unparse(anchor)[:60],
                                      expected=segment(ctx.root, file, anchor),
                                      code=f"{ctx.shim.alias}.{step.function}({executor}, {config})"))
        plan.claims += [Claim(startup_probe.PROBE.name, f"*{name}") for name in step.names]
        builds = [b for _, bs in ordered for b in bs]
        plan.notes.append(f"after {'creating' if step.after == 'created' else 'initializing'} the executor, "
                          f"{step.function} is performed with the engine core's own statements "
                          f"({', '.join(f'{span(bs)}: {r.at}' for r, bs in ordered)}; "
                          f"{span(sorted(builds, key=lambda b: Version(b.version)))}): {step.why}")


def _initialized(function: ast.FunctionDef | ast.AsyncFunctionDef, executor: str) -> ast.stmt | None:
    """The statement of ``function``'s own body that is the call ``<executor>.initialize_from_config(...)``."""
    return next((s for s in function.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                 and isinstance(s.value.func, ast.Attribute) and s.value.func.attr == "initialize_from_config"
                 and ast.unparse(s.value.func.value) == executor), None)


FIXER = StartupSteps(
    name="startup",
    description="Start-up steps of the engine core that the hand-built pipeline skips: performs those its "
                "correctness depends on (the KV cache layout, the warm-up); the re-audit judges the others by the "
                "state they write.",
    handles=(startup_probe.PROBE,),
    order=70,
)
