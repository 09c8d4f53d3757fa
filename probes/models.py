"""Model conventions: the consumer's replacement forward and worker extension against each architecture."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from compat.consumer.result import Kind, ModelPatch, Ref, RefKind
from compat.facts import architectures, streams
from compat.facts.architectures import ModelFacts
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.location import Location
from compat.probe import Probe, ProbeContext
from compat.signature import CallShape, Parameter, ParamKind, Signature

MODEL_ROOT = ("model_runner", "model")


def consumer_path(ref: Ref | None) -> list[str] | None:
    """Attribute names from vLLM's top-level model to the object the consumer patches."""
    names: list[str] = []
    while ref is not None and ref.kind == RefKind.ATTRIBUTE:
        names.insert(0, ref.name or "?")
        ref = ref.base
    if ref is None or ref.kind != RefKind.WORKER or tuple(names[: len(MODEL_ROOT)]) != MODEL_ROOT:
        return None
    return names[len(MODEL_ROOT):]


def _signature(patch: ModelPatch) -> Signature:
    params = [Parameter(name, ParamKind.POSITIONAL_OR_KEYWORD, i >= len(patch.parameters) - patch.defaults)
              for i, name in enumerate(patch.parameters)]
    if patch.accepts_var_args:
        params.append(Parameter("args", ParamKind.VAR_POSITIONAL))
    if patch.accepts_var_kwargs:
        params.append(Parameter("kwargs", ParamKind.VAR_KEYWORD))
    return Signature(tuple(params))


class ModelConventionProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        for patch in ctx.scan.model_patches:
            if consumer_path(patch.target) is None:
                # Not traced to vLLM's model (a parameter, a Hugging Face model, an engine's attribute): nothing
                # in the build decides what this forward replaces, so it is not judged against its architectures.
                yield self._finding(patch, "*", "path", Status.UNKNOWN,
                                    f"cannot tell which object the consumer patches: `{patch.code}` replaces the "
                                    f"forward of an object the scan does not trace to vLLM's model (the worker's "
                                    f"{'.'.join(MODEL_ROOT)}), so it is judged against none of this build's "
                                    "architectures", None)
                continue
            for arch in ctx.architectures:
                facts = ctx.fact(architectures.FACT, arch)
                yield from self.judge(ctx, patch, arch, facts)

    def _finding(self, patch: ModelPatch, arch: str, aspect: str, status: Status, message: str,
                 where: str | None, at: Location | None = None, evidence: Evidence | None = None,
                 fix: str | None = None) -> Finding:
        at = at or patch.location
        return Finding(self.name, status, f"{arch}:{aspect}", str(at), where, message,
                       evidence or Evidence(), fix, kind=FindingKind.MODEL, code=patch.code,
                       touchpoint=f"{patch.function}@{arch}:{aspect}", place=Place.at(at))

    def judge(self, ctx: ProbeContext, patch: ModelPatch, arch: str, facts: ModelFacts) -> Iterable[Finding]:
        if not facts.registered:
            yield self._finding(patch, arch, "registry", Status.UNKNOWN,
                                f"{arch} is not in this build's model registry; the consumer cannot run it here", None)
            return
        if facts.error or facts.path is None:
            yield self._finding(patch, arch, "stack", Status.UNKNOWN, str(facts.error), facts.class_at)
            return
        yield self._path(patch, arch, facts)
        yield from self._members(ctx, patch, arch, facts)
        yield from self._layer_call(patch, arch, facts)
        yield from self._forward_signature(patch, arch, facts)
        yield from self._eagle3(ctx, patch, arch, facts)
        yield from self._capture(ctx, patch, arch, facts)

    def _path(self, patch: ModelPatch, arch: str, facts: architectures.ModelFacts) -> Finding:
        mine, theirs = consumer_path(patch.target) or [], list(facts.path or ())  # run() judges only traced ones
        build_path = ".".join(["model", *theirs])
        evidence = Evidence(audited=f"{facts.cls} -> {build_path} ({facts.base})")
        consumer = ".".join(["model", *mine])
        if mine == theirs:
            return self._finding(patch, arch, "path", Status.OK,
                                 f"the consumer patches {consumer}, the decoder stack of {arch}", facts.base_at,
                                 evidence=evidence)
        return self._finding(patch, arch, "path", Status.BROKEN,
                             f"the consumer patches {consumer}, but the decoder stack of {arch} is {build_path} "
                             f"({facts.base})", facts.class_at, evidence=evidence,
                             fix=f"reach the decoder stack as {build_path} for {arch}")

    def _members(self, ctx: ProbeContext, patch: ModelPatch, arch: str, facts: ModelFacts) -> Iterable[Finding]:
        assigned = {tp.attribute for tp in ctx.scan.touchpoints if tp.kind == Kind.ATTRIBUTE and tp.store
                    and tp.receiver == patch.target}
        members = set(facts.base_members)
        seen = set()
        for use in patch.self_uses:
            if use.name in seen or use.name in assigned:
                continue
            seen.add(use.name)
            if use.name in members:
                yield self._finding(patch, arch, f"member:{use.name}", Status.OK,
                                    f"{facts.base}.{use.name} exists", facts.base_at, use.location)
                continue
            close = difflib.get_close_matches(use.name, list(members), n=1, cutoff=0.5)
            if use.name in architectures.EMBEDDING_METHODS:
                close = list(facts.embedding) or close
            yield self._finding(
                patch, arch, f"member:{use.name}", Status.BROKEN,
                f"the replacement forward {'calls' if use.call else 'reads'} self.{use.name}, which {facts.base} "
                f"({arch}) does not have" + (f"; it has {close[0]}" if close else ""), facts.base_at, use.location,
                Evidence(audited=", ".join(f"{k} ({v})" for k, v in facts.embedding.items()) or None),
                fix=f"use self.{close[0]}" if close else None)

    def _layer_call(self, patch: ModelPatch, arch: str, facts: ModelFacts) -> Iterable[Finding]:
        layer, build_call = facts.layer, facts.layer_call
        if not patch.layer_calls:
            return
        call = patch.layer_calls[0]
        if layer is None or build_call is None:
            yield self._finding(patch, arch, "layer-call", Status.UNKNOWN,
                                f"cannot tell how {facts.base} calls its decoder layers", facts.base_at,
                                call.location)
            return
        params = layer.parameters
        sig = layer.signature
        evidence = Evidence(written_for=None, audited=f"{layer.cls}.forward{layer.forward}; the build calls "
                                                      f"{build_call.code} ({build_call.at})")
        shape = call.call or CallShape()
        problems = sig.bind(shape, "the decoder layer")
        if problems:
            yield self._finding(patch, arch, "layer-call", Status.BROKEN, "; ".join(p.message for p in problems),
                                layer.at, call.location, evidence)
            return
        positional_names = [p.name for p in params
                            if p.kind in (ParamKind.POSITIONAL_ONLY, ParamKind.POSITIONAL_OR_KEYWORD)]
        passed_by_build = set(positional_names[: len(build_call.positional)]) | set(build_call.keywords)
        passed_by_consumer = set(positional_names[: shape.positional]) | set(shape.keywords)
        dropped = sorted(passed_by_build - passed_by_consumer)
        drops_kwargs = bool(build_call.star_kwargs) and not shape.star_kwargs
        if dropped or drops_kwargs:
            what = ", ".join(dropped + [f"**{k}" for k in build_call.star_kwargs] if drops_kwargs else dropped)
            yield self._finding(
                patch, arch, "layer-call", Status.CHANGED,
                f"the replacement forward calls each layer without {what}, which {facts.base}.forward passes "
                f"({build_call.code}): the layers run with their defaults, a silent change of values",
                build_call.at, call.location, evidence,
                fix=f"call the layer as the build does: {build_call.code}")
            return
        yield self._finding(patch, arch, "layer-call", Status.OK, f"the layer call binds to {layer.cls}.forward"
                            f"{layer.forward} and passes what the build passes", layer.at, call.location,
                            evidence)

    def _forward_signature(self, patch: ModelPatch, arch: str, facts: ModelFacts) -> Iterable[Finding]:
        mine = _signature(patch)
        top_call, base_forward = facts.top_calls_base, facts.base_forward
        if top_call is not None:
            shape = CallShape(top_call.positional, top_call.keywords, False, top_call.star_kwargs)
            problems = mine.bind(shape, "the replacement forward")
            if problems:
                yield self._finding(patch, arch, "forward", Status.BROKEN, "; ".join(p.message for p in problems)
                                    + f" ({facts.cls} calls {top_call.code})", top_call.at,
                                    patch.definition, Evidence(audited=top_call.code))
                return
        if base_forward and base_forward.var_kwargs and not patch.accepts_var_kwargs:
            yield self._finding(
                patch, arch, "forward", Status.CHANGED,
                f"{facts.base}.forward takes **{base_forward.parameters[-1]} and passes them on to its layers; "
                f"the replacement forward ({', '.join(patch.parameters)}) neither accepts nor forwards them",
                base_forward.at, patch.definition,
                Evidence(audited=f"forward({', '.join(base_forward.parameters)})"),
                fix=f"accept **{base_forward.parameters[-1]} and pass them to each layer")
            return
        yield self._finding(patch, arch, "forward", Status.OK, "the replacement forward accepts what the build "
                            "passes to the base model", base_forward.at if base_forward else None, patch.definition)

    def _eagle3(self, ctx: ProbeContext, patch: ModelPatch, arch: str, facts: ModelFacts) -> Iterable[Finding]:
        checks = [tp for tp in ctx.scan.touchpoints if tp.kind == Kind.CALL and tp.symbol.endswith("supports_eagle3")]
        if not checks:
            return
        if facts.eagle3 is None:
            yield self._finding(patch, arch, "eagle3", Status.UNKNOWN, "cannot read the SupportsEagle3 protocol of "
                                "this build", facts.class_at, checks[0].location)
        elif facts.eagle3:
            yield self._finding(patch, arch, "eagle3", Status.OK, f"{facts.cls} is marked SupportsEagle3, so the "
                                "consumer's supports_eagle3() check accepts it", facts.class_at, checks[0].location)
        else:
            then = ctx.fact(architectures.FACT, arch, surface=ctx.written_for) if ctx.written_for is not None else (
                facts if ctx.scan.written_for == ctx.surface.build.version else None)  # this is that build
            message = (f"{facts.cls} does not implement SupportsEagle3 in this build (missing "
                       f"{', '.join(facts.eagle3_missing)}): the consumer's supports_eagle3() check rejects the model")
            if then is not None and then.eagle3 is False:
                # The consumer refuses it with its own error, as it did where it was written for: the release does
                # not support this architecture there either, which is not a breakage of its code.
                yield self._finding(patch, arch, "eagle3", Status.UNKNOWN, message + ", as in the build it was "
                                    f"written for ({ctx.scan.written_for}): this release does not support "
                                    "the architecture; its own check says so at run time", facts.class_at,
                                    checks[0].location)
            else:
                yield self._finding(patch, arch, "eagle3", Status.BROKEN, message, facts.class_at,
                                    checks[0].location)

    def _capture(self, ctx: ProbeContext, patch: ModelPatch, arch: str, facts: ModelFacts) -> Iterable[Finding]:
        """What the replacement forward keeps of each layer against the residual stream after that layer, as the
        layer's own code returns it (``compat.facts.streams``)."""
        if not patch.captures:
            return
        kept = patch.captures[0]
        stream = ctx.fact(streams.FACT, arch)
        said = stream.description or stream.reason
        evidence = Evidence(audited=f"{stream.layer}.forward ({stream.forward_at}): {said}")
        if stream.outputs is None:
            yield self._finding(patch, arch, "capture", Status.UNKNOWN, f"cannot read how {stream.layer or arch}'s "
                                f"decoder layer returns the residual stream: {stream.reason}", stream.forward_at,
                                kept.location, evidence)
            return
        if kept.summed is None:
            yield self._finding(patch, arch, "capture", Status.UNKNOWN, "the replacement forward keeps "
                                f"`{kept.expression}`, which is not a sum of the layer's outputs "
                                f"({', '.join(kept.outputs)}): cannot tell whether it is the residual stream",
                                stream.forward_at, kept.location, evidence)
            return
        layer = (stream.layer or "").rpartition(".")[2]
        if kept.summed == stream.outputs:
            yield self._finding(patch, arch, "capture", Status.OK, "the replacement forward keeps "
                                f"`{kept.expression}`, the residual stream after {layer}, which "
                                f"{stream.description}", stream.forward_at, kept.location, evidence)
            return
        twice = set(kept.summed) > set(stream.outputs)
        message = (f"the replacement forward keeps `{kept.expression}` ({_outputs(kept.summed)}), but {layer} "
                   f"{stream.description}: the stored state is not the residual stream after the layer"
                   + (", it counts the residual twice" if twice else ""))
        fix = f"keep {_outputs(stream.outputs)} of {layer}'s outputs"
        if _refused_first(ctx, facts):
            yield self._finding(patch, arch, "capture", Status.UNKNOWN, message + f" (not reached: the consumer's "
                                f"supports_eagle3 check refuses {arch} in this build first)", stream.forward_at,
                                kept.location, evidence, fix)
            return
        yield self._finding(patch, arch, "capture", Status.BROKEN, message, stream.forward_at, kept.location, evidence,
                            fix)


def _outputs(indices: tuple[int, ...]) -> str:
    return " + ".join(f"output[{i}]" for i in indices) if indices else "the output itself"


def _refused_first(ctx: ProbeContext, facts: ModelFacts) -> bool:
    """The consumer's ``supports_eagle3`` check refuses the architecture in this build before anything is captured."""
    return facts.eagle3 is False and any(tp.kind == Kind.CALL and tp.symbol.endswith("supports_eagle3")
                                         for tp in ctx.scan.touchpoints)


PROBE = ModelConventionProbe(
    name="model",
    description="For each architecture (--architectures): registry entry, the attribute path to the decoder stack, "
                "the base model's embedding method, how the build calls its decoder layers (order, extra arguments, "
                "pass-through keywords), the EAGLE-3 marker and which of the layer's outputs are the residual stream "
                "after it (read from the layer's code), checked against the consumer's replacement forward and what "
                "it keeps of each layer.",
    order=70,
)
