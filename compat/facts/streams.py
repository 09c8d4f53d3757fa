"""Which outputs of an architecture's decoder layer, summed, are the residual stream after the layer: the state Hugging
Face's ``output_hidden_states`` gives for that layer (before the final norm), read from the build's code.

vLLM's decoder layers return that state in different ways, and a capture written for one is silently wrong on
another: Llama's returns ``(h, residual)`` with the residual not yet added (the next layer's fused add-norm adds
it), so the stream is ``h + residual``; StableLM's, EXAONE-4's and Cohere's return ``(output, residual)`` with the
residual already added, so it is ``output`` (``h + residual`` counts the residual twice); Granite's returns the
stream alone. The layer's ``forward`` is run by ``compat.facts.evaluator`` with its stream inputs (the
parameters the decoder stack passes the names it assigns the layer's result to: ``hidden_states, residual =
layer(positions, hidden_states, residual)``) as symbols, once with the residual absent (the first layer) and once
present. On each path, the stream is the one sum of outputs that holds each input once and everything the layer
computed that reaches an output; a path where no single sum does (the stream lost in an unreadable call, scaled
by a factor, or split) is a condition under which the convention does not hold, kept as the conditions the path
assumed, which the shim evaluates on the real layers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any

from compat.facts import Fact, architectures
from compat.facts.algebra import Assumption, CodeRead, Const, Formula, Obj, Other, Stream, Tup, Unknown, Value, render
from compat.facts.evaluator import Evaluator, Unreadable
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

MAX_OUTPUTS = 4


@dataclass(frozen=True)
class StreamFacts:
    """How to read the residual stream after one architecture's decoder layer (``outputs`` None: it cannot be)."""

    arch: str
    layer: str | None = None
    """The decoder layer class."""
    forward_at: str | None = None
    inputs: tuple[str, ...] = ()
    """The layer's parameters that receive the stream (what the stack carries from one layer to the next)."""
    outputs: tuple[int, ...] | None = None
    """The outputs whose sum is the stream: ``(0, 1)``, ``(0,)``; ``()`` for a layer returning one tensor."""
    description: str = ""
    reason: str | None = None
    """Why the convention cannot be read (``outputs`` is None)."""
    unless: tuple[str, ...] = ()
    """Conditions (each the JSON of a path's assumptions) under which ``outputs`` is not the stream."""
    unless_text: tuple[str, ...] = ()
    read: tuple[CodeRead, ...] = ()
    """The defs the reading followed, with the fingerprints the shim checks the running build's code against."""


def encode_formula(f: Formula) -> list[Any]:
    if f[0] == "atom":
        atom = f[1]
        return ["atom", str(atom.kind), atom.text, atom.module]
    return [f[0], *(encode_formula(part) for part in f[1:])]


def encode_assumptions(assumed: frozenset[Assumption]) -> str:
    return json.dumps(sorted([encode_formula(f), truth] for f, truth in assumed), sort_keys=True)


def render_assumptions(assumed: frozenset[Assumption]) -> str:
    parts = [render(f) if truth else render(("not", f)) for f, truth in
             sorted(assumed, key=lambda a: json.dumps(encode_formula(a[0])))]
    return " and ".join(parts) or "always"


def stream_inputs(facts: architectures.ModelFacts) -> tuple[str, ...] | str:
    """The layer's parameters bound to what the stack carries between layers, or why they cannot be told."""
    call, layer = facts.layer_call, facts.layer
    if call is None or layer is None:
        return f"cannot tell how {facts.base or facts.arch}'s forward calls its decoder layers"
    if not call.targets:
        return f"{facts.base}.forward does not assign the layer's result to names it passes on ({call.code})"
    names = [p.name for p in layer.parameters if p.name != "self"]
    bound: dict[str, str] = dict(zip(names, call.positional))
    bound.update(dict(zip(call.keywords, call.keyword_values)))
    stream = call.stream or call.targets
    inputs = tuple(name for name, expr in bound.items() if expr in stream)
    return inputs or f"{facts.base}.forward passes none of {', '.join(stream)} to the layer ({call.code})"


def stream_outputs(facts: architectures.ModelFacts) -> tuple[int, ...] | None:
    """The positions of the layer's outputs the stack carries as the stream (None: every output may be)."""
    call = facts.layer_call
    if call is None or len(call.targets) < 2:
        return None
    stream = call.stream or call.targets
    return tuple(i for i, t in enumerate(call.targets) if t in stream)


def choose(value: Value, allowed: tuple[int, ...] | None = None) -> tuple[int, ...] | str:
    """Of the outputs the stack carries as the stream (``allowed``), the sum that holds each input once and every
    term computed into them, or why there is no such one sum."""
    if isinstance(value, Unknown):
        return f"what it returns cannot be read: {value.reason}"
    items = list(value.items) if isinstance(value, Tup) else [value]
    bad = next((v for v in items if isinstance(v, Unknown)), None)
    if bad is not None:
        return f"an output cannot be read: {bad.reason}"
    tensors = [i for i, v in enumerate(items) if isinstance(v, Stream) and (allowed is None or i in allowed)]
    if not tensors or len(tensors) > MAX_OUTPUTS:
        return f"it returns {len(tensors)} tensors"
    streams: dict[int, Stream] = {i: v for i, v in enumerate(items) if i in tensors and isinstance(v, Stream)}
    inputs = {name for i in tensors for name, _ in streams[i].inputs}
    if not inputs:
        return "no output holds the layer's input: no residual connection is read in its code"
    terms: frozenset[str] = frozenset().union(*(streams[i].terms for i in tensors))
    fits = []
    for size in range(1, len(tensors) + 1):
        for subset in combinations(tensors, size):
            factors: dict[str, Fraction | None] = {}
            held: set[str] = set()
            for i in subset:
                s = streams[i]
                held |= s.terms
                for name, f in s.inputs:
                    previous = factors.get(name, Fraction(0))
                    factors[name] = None if f is None or previous is None else previous + f
            if all(factors.get(n) == 1 for n in inputs) and held == terms:
                fits.append(subset)
    if len(fits) != 1:
        scaled = [(n, f) for i in tensors for n, f in streams[i].inputs if f != 1]
        if scaled and not fits:
            name, factor = scaled[0]
            return f"its input {name} reaches its outputs scaled " + (
                "by a factor the code does not fix" if factor is None else f"by {factor}")
        return "no one sum of its outputs holds its input once and all it computes" if not fits else \
            f"several sums of its outputs could be the stream ({fits})"
    chosen = fits[0]
    return () if not isinstance(value, Tup) else tuple(chosen)


def describe(outputs: tuple[int, ...], returned: Value) -> str:
    """The convention in words: what the layer returns and which sum is the stream."""
    if not outputs:
        return "returns the residual stream itself"
    count = len(returned.items) if isinstance(returned, Tup) else 1
    shape = f"({', '.join(f'output[{i}]' for i in range(count))})"
    summed = " + ".join(f"output[{i}]" for i in outputs)
    if len(outputs) == 1:
        return f"returns {shape} with the residual already added to output[{outputs[0]}]: the stream after it is " \
               f"output[{outputs[0]}] alone"
    return f"returns {shape} with the residual not yet added: the stream after it is {summed}"


def read(surface: StaticSurface, arch: str) -> StreamFacts:
    facts = surface.fact(architectures.FACT, arch)
    if facts.layer is None:
        why = facts.error or ("not in this build's model registry" if not facts.registered else
                              f"cannot find the decoder layer class of {facts.base or facts.cls}")
        return StreamFacts(arch, reason=why)
    layer = surface.lookup(facts.layer.cls)
    base = StreamFacts(arch, facts.layer.cls, facts.layer.at)
    inputs = stream_inputs(facts)
    if isinstance(inputs, str):
        return _refused(base, inputs)
    if not isinstance(layer, Found) or layer.kind != FoundKind.CLASS:
        return _refused(base, f"cannot read class {facts.layer.cls}")
    evaluator = Evaluator(surface)
    params = [p for p in facts.layer.parameters if p.name != "self"]
    passed = _passed(facts)
    outcomes: list[tuple[Value, frozenset[Assumption]]] = []
    try:
        for absent in ((), tuple(inputs[1:])):
            arguments: list[tuple[str, Value]] = []
            for p in params:
                if p.name in inputs:
                    value: Value = Const(None) if p.name in absent else Stream(((p.name, Fraction(1)),),
                                                                                oid=f"in:{p.name}")
                elif p.name in passed:
                    value = Other(p.name)
                else:
                    continue
                arguments.append((p.name, value))
            for value, state in evaluator.call_method(Obj(layer, "self"), "forward", arguments):
                outcomes.append((value, state.assumptions))
    except (Unreadable, RecursionError) as exc:
        return _refused(base, f"{facts.layer.cls}.forward: {exc}", inputs)
    read_codes = tuple(sorted(evaluator.read.values(), key=lambda c: (c.module, c.qualname)))
    chosen: dict[tuple[int, ...], Value] = {}
    failed: list[tuple[str, frozenset[Assumption]]] = []
    for value, assumed in outcomes:
        outcome = choose(value, stream_outputs(facts))
        if isinstance(outcome, str):
            failed.append((outcome, assumed))
        else:
            chosen.setdefault(outcome, value)
    if len(chosen) != 1:
        reason = failed[0][0] if not chosen else \
            f"the stream is a different sum of outputs on different paths ({', '.join(map(str, chosen))})"
        return StreamFacts(arch, facts.layer.cls, facts.layer.at, inputs, None, "", reason, read=read_codes)
    outputs, returned = next(iter(chosen.items()))
    unless = tuple(dict.fromkeys(encode_assumptions(a) for _, a in failed))
    unless_text = tuple(dict.fromkeys(f"{render_assumptions(a)}: {why}" for why, a in failed))
    return StreamFacts(arch, facts.layer.cls, facts.layer.at, inputs, outputs, describe(outputs, returned),
                       None, unless, unless_text, read_codes)


def _passed(facts: architectures.ModelFacts) -> set[str]:
    """The layer's parameters the stack passes (the rest take their defaults)."""
    call, layer = facts.layer_call, facts.layer
    if call is None or layer is None:
        return set()
    names = [p.name for p in layer.parameters if p.name != "self"]
    return set(names[:len(call.positional)]) | set(call.keywords)


def _refused(base: StreamFacts, reason: str, inputs: tuple[str, ...] = ()) -> StreamFacts:
    return StreamFacts(base.arch, base.layer, base.forward_at, inputs, None, "", reason)


FACT = Fact("stream", read)


@dataclass(frozen=True)
class ArchCapture:
    """What a capture by forward hooks needs of one architecture: where its decoder stack is, whether vLLM marks
    it as supporting EAGLE-3, and how its layers return the stream."""

    arch: str
    stack: tuple[str, ...] | None
    eagle3: bool | None
    stream: StreamFacts


@dataclass(frozen=True)
class Captures:
    """Every architecture of the build's model registry."""

    archs: tuple[ArchCapture, ...]


def read_all(surface: StaticSurface) -> Captures:
    out = []
    for arch in sorted(architectures.registry(surface)):
        model = surface.fact(architectures.FACT, arch)
        out.append(ArchCapture(arch, model.path, model.eagle3, surface.fact(FACT, arch)))
    return Captures(tuple(out))


ALL = Fact("streams-all", read_all)
