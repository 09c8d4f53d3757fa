"""Calls that no longer bind: keywords a build stopped accepting, parameters a build started requiring.

The shim wraps the callable under its own name. A keyword the running build does not accept is dropped; a
parameter it requires and the call does not pass gets the value vLLM's own code passes (``compat.facts.
arguments``), computed from the call's other arguments or from the objects beside it (``model_config`` next to
``scheduler_config`` in a ``VllmConfig(...)`` call), never a constant. Which recipe applies is decided at run
time by feature detection (the build's functions it calls exist, the attributes it reads are there).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import compat.probes.calls as calls_probe
import compat.probes.imports as imports_probe
from packaging.version import Version

from compat.consumer.result import Kind, TouchPoint
from compat.errors import CompatError
from compat.facts import arguments
from compat.findings import Finding
from compat.fix.context import AuditedBuild, FixContext, span
from compat.fix.edits import AddKeyword, RouteImport
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from compat.fix.shim import adjustment_name, raw_import
from compat.fix.source import call_of, imported_as
from compat.signature import BindCode, ParamKind, Signature
from compat.vllm.surface import Found, relocated

HANDLED = {"unexpected-keyword", "missing-required"}
FIXER_NAME = "calls"


@dataclass(frozen=True)
class Recipe:
    source: arguments.Source
    builds: tuple[AuditedBuild, ...]


def _signature(build: AuditedBuild, symbol: str) -> Signature | None:
    found = build.surface.lookup(symbol)
    if not isinstance(found, Found):
        moved = relocated(build.surface, symbol)
        found = build.surface.lookup(moved[0]) if moved else found
    sig = build.surface.signature(found) if isinstance(found, Found) else None
    return sig if isinstance(sig, Signature) else None


def _passed_names(tp: TouchPoint, sig: Signature) -> set[str]:
    positional = [p.name for p in sig.parameters if p.kind in (ParamKind.POSITIONAL_ONLY,
                                                                ParamKind.POSITIONAL_OR_KEYWORD)]
    shape = tp.call
    return set(shape.keywords) | set(positional[: shape.positional]) if shape else set()


def _recipes(ctx: FixContext, symbol: str, param: str, builds: list[AuditedBuild],
             available: set[str]) -> list[Recipe]:
    """Per build that requires ``param``, the first expression of vLLM's own that the call site can bind,
    grouped by expression, newest builds first."""
    chosen: dict[tuple[str, tuple[tuple[str, str], ...]], list[AuditedBuild]] = {}
    sources: dict[tuple[str, tuple[tuple[str, str], ...]], arguments.Source] = {}
    for build in builds:
        found = build.surface.lookup(symbol)
        path = found.path if isinstance(found, Found) else symbol
        facts = build.fact(arguments.FACT, path, param)
        usable = sorted((s for s in facts.sources if set(s.names) <= available), key=lambda s: s.steps)
        if not usable:
            raise CompatError(f"vLLM {build.version} passes {param} to {path.rsplit('.', 1)[-1]} only as "
                              + (", ".join(f"`{s.expression}`" for s in facts.sources) or "nothing it calls")
                              + f", which the consumer's call cannot bind (it has {', '.join(sorted(available))})")
        key = (usable[0].expression, usable[0].imports)
        sources.setdefault(key, usable[0])
        chosen.setdefault(key, []).append(build)
    recipes = [Recipe(sources[k], tuple(b)) for k, b in chosen.items()]
    # Recipes that call the build's functions are told apart by those functions existing; attribute-only
    # recipes are tried last, each guarded by AttributeError.
    newest_first = sorted(recipes, key=lambda r: max(Version(b.version) for b in r.builds), reverse=True)
    return sorted(newest_first, key=lambda r: not r.source.imports)


def _value_function(name: str, recipes: list[Recipe]) -> str:
    params = sorted({n for r in recipes for n in r.source.names})
    lines = [f"def {name}({', '.join(params)}):"]
    for index, recipe in enumerate(recipes):
        src = recipe.source
        lines.append(f"    # {span(recipe.builds)}: {src.at} passes `{src.expression}`")
        last = index == len(recipes) - 1
        if src.imports:
            for local, path in src.imports:
                lines.append(f"    {local} = _lookup({path!r})")
            present = " and ".join(f"{local} is not None" for local, _ in src.imports)
            lines += [f"    if {present}:", f"        return {src.expression}"]
        elif last:
            lines.append(f"    return {src.expression}")
        else:
            lines += ["    try:", f"        return {src.expression}", "    except AttributeError:", "        pass"]
    if recipes[-1].source.imports:
        lines.append("    raise RuntimeError(\"the running vLLM has none of the functions its audited builds use "
                     f"here: {', '.join(sorted({p for r in recipes for _, p in r.source.imports}))}\")")
    return "\n".join(lines)


def _adjustment(name: str, symbol: str, dropped: list[tuple[str, str]],
                required: list[tuple[str, str, list[str]]], context: list[str]) -> str:
    """Drops, then passes, what the running build wants."""
    doc = [f"{symbol}: the keywords and parameters the running build takes."]
    doc += [f"Drops {kw}= where the build does not accept it ({where})." for kw, where in dropped]
    doc += [f"Passes {p} where the build requires it ({where}), as vLLM's own code computes it."
            for p, where, _ in required]
    lines = [f"def {adjustment_name(name, FIXER_NAME)}(target, params, args, kwargs, context):",
             '    """' + "\n    ".join(doc) + '\n    """']
    if dropped:
        lines += [f"    for keyword in {tuple(kw for kw, _ in dropped)!r}:",
                  "        if keyword in kwargs and keyword not in params:", "            del kwargs[keyword]"]
    if required:
        lines.append("    passed = {**context, **_passed(target, args, kwargs)}")
        for param, _, names in required:
            values = ", ".join(f"{n}=passed[{n!r}]" for n in names)
            lines += [f"    if _required(target, {param!r}) and {param!r} not in passed:",
                      f"        kwargs[{param!r}] = _value_{name}_{param}({values})"]
    lines.append("    return args, kwargs")
    return "\n".join(lines)


class CallAdapter(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        for location, pairs in ctx.by_location(ctx.failing(calls_probe.PROBE)).items():
            for symbol in sorted({f.symbol for _, f in pairs}):
                finding = next(f for _, f in pairs if f.symbol == symbol)
                tp = ctx.touchpoint(location, Kind.CALL, symbol)
                try:
                    self._adapt(ctx, plan, tp, symbol, [b for b, f in pairs if f.symbol == symbol])
                except CompatError as exc:
                    plan.unhandled.append(Unhandled(finding, str(exc)))
        for tp, finding, failing in _behind_moves(ctx):
            try:
                self._adapt(ctx, plan, tp, tp.symbol, failing)
            except CompatError as exc:
                plan.unhandled.append(Unhandled(finding, f"{tp.location}: {exc}"))
        return plan

    def _adapt(self, ctx: FixContext, plan: FixerPlan, tp: TouchPoint | None, symbol: str,
               failing: list[AuditedBuild]) -> None:
        if tp is None or tp.call is None:
            raise CompatError("the scan has no call shape for this call")
        module, _, name = symbol.rpartition(".")
        file, line = tp.location.file, tp.location.line
        imports = _imports_in(ctx, file, symbol, name)
        if not imports:
            raise CompatError(f"{name} is not imported as `from {module} import {name}` in {file}")
        dropped: dict[str, list[AuditedBuild]] = {}
        required: dict[str, list[AuditedBuild]] = {}
        for build in failing:
            sig = _signature(build, symbol)
            if sig is None:
                continue  # the name is missing there: the imports fixer's cause
            for problem in sig.bind(tp.call, name):
                if problem.code not in HANDLED or problem.parameter is None:
                    raise CompatError(f"vLLM {build.version}: {problem.message} (no fixer for {problem.code})")
                target = dropped if problem.code == BindCode.UNEXPECTED_KEYWORD else required
                target.setdefault(problem.parameter, []).append(build)
        if not dropped and not required:
            return
        site = call_of(ctx.root, file, line, name)
        enclosing = site[1] if site else None
        siblings = {k.arg for k in enclosing.keywords if k.arg} if enclosing is not None else set()
        recipes = {}
        for param, builds in required.items():
            sig = _signature(builds[-1], symbol)
            assert sig is not None  # required holds the builds whose signature was read
            available = _passed_names(tp, sig) | siblings
            recipes[param] = _recipes(ctx, symbol, param, builds, available)
        context = sorted({n for rs in recipes.values() for r in rs for n in r.source.names} - {
            n for b in failing if (s := _signature(b, symbol)) for n in _passed_names(tp, s)})
        for param, rs in recipes.items():
            plan.pieces.append(ShimPiece(f"value:{name}.{param}", _value_function(f"_value_{name}_{param}", rs),
                                         f"{param} for {name}, as vLLM's own code computes it"))
        plan.pieces.append(raw_import(ctx, symbol))
        plan.pieces.append(ShimPiece(
            f"adjust:{name}:{FIXER_NAME}",
            _adjustment(name, symbol, [(k, span(b)) for k, b in dropped.items()],
                        [(p, span(b), sorted({n for r in recipes[p] for n in r.source.names})) for p, b in
                         required.items()], context),
            f"{name}: keywords dropped or passed as the running build takes them", wraps=name,
            context=tuple(context)))
        plan.edits += [RouteImport(file, at, f"from {module} import {name}", module=module, names=(name,),
                                   shim=ctx.shim.module) for at in imports]
        for c in context:
            plan.edits.append(AddKeyword(file, line, f"{name}(...)", callee=name, keyword=c, value=c))
        plan.claims.append(Claim(calls_probe.PROBE.name, symbol))
        for keyword, builds in dropped.items():
            plan.notes.append(f"{name}: drops {keyword}= where the build does not take it ({span(builds)})")
        for param, builds in required.items():
            how = "; ".join(f"`{r.source.expression}` ({span(r.builds)})" for r in recipes[param])
            plan.notes.append(f"{name}: passes {param} where the build requires it ({span(builds)}): {how}")
        if context:
            plan.notes.append(f"{name}: its call site also hands the shim {', '.join(context)}, which vLLM's own "
                              f"code uses to compute what the build requires ({_unparse(site)})")


def _behind_moves(ctx: FixContext) -> list[tuple[TouchPoint, Finding, list[AuditedBuild]]]:
    """Calls of a moved name that do not bind where it moved to: the audit reports them only as uses of the
    missing name (folded into the import's finding, which the imports fixer fixes), so without this the
    routed call would still fail on those builds. Each with the import's finding and the builds it fails on."""
    moved = {f.symbol: f for _, f in ctx.failing(imports_probe.PROBE)}
    reported = {(f.consumer_location, f.symbol) for _, f in ctx.failing(calls_probe.PROBE)}
    found = []
    for tp in ctx.scan.touchpoints:
        if tp.kind != Kind.CALL or tp.call is None or tp.symbol not in moved or (str(tp.location),
                                                                               tp.symbol) in reported:
            continue
        name = tp.symbol.rpartition(".")[2]
        failing = [b for b in ctx.builds if (sig := _signature(b, tp.symbol)) is not None and sig.bind(tp.call, name)]
        if failing:
            found.append((tp, moved[tp.symbol], failing))
    return found


def _imports_in(ctx: FixContext, file: str, symbol: str, name: str) -> list[int]:
    """The lines of ``file`` that import ``symbol`` as ``from module import name``: every one is routed to the
    shim, so that the name the adjusted call uses is the shim's whichever import bound it (one at the top, one
    inside a function)."""
    lines = sorted({t.location.line for t in ctx.scan.touchpoints if t.kind == Kind.IMPORT and t.symbol == symbol
                    and t.location.file == file})
    return [line for line in lines if imported_as(ctx.root, file, line, name) == name]


def _unparse(site: tuple[ast.Call, ast.Call | None] | None) -> str:
    return ast.unparse(site[0].func) if site else "?"


FIXER = CallAdapter(
    name=FIXER_NAME,
    description="A call that no longer binds: keywords the build does not accept are dropped, parameters it "
                "requires are passed as vLLM's own code computes them (from the call's other arguments or the "
                "objects beside it), chosen at run time by feature detection.",
    handles=(calls_probe.PROBE,),
    order=20,
)
