"""The checks of ``compat.extract --check``: each names a condition, shows from the engine's own account that it
happened, and only then judges the samples it produced (``not run`` when the condition did not happen, never
``pass``). The workload that makes each condition happen is ``compat.extract.workload``; what the engine did
is what ``compat.extract.runner.Watch`` read from the scheduler.

Samples are compared with HF transformers recomputing the same prompt on the same weights in float32 (the
``reference``; speculators' layer id ``k`` is the state after decoder layer ``k``), relative L2 error over the
sample within ``TOLERANCE[dtype]``. Those bounds come from the dtype and what was measured on this project's
models: float32 extraction agrees with the reference to 3e-7 .. 2.3e-6, bfloat16 to about 7e-3 (its unit
roundoff is 3.9e-3), while a row of another prompt or another layer is off by 0.2 and more. Where vLLM's own
extraction runs, its copies of one prompt in one batched run measure how much the build's own path varies with
the batch: beyond the dtype's bound, the comparisons that depend on batching are ``varies`` with that size, not
``pass``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compat.extract.runner import FAULT

if TYPE_CHECKING:
    import torch

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}
UNSUPPORTED = r"No module named|NotImplementedError|not supported|is not implemented"
"""What an engine raises for a configuration it cannot run on this platform (vLLM 0.11.0's CPU attention needs
intel_extension_for_pytorch for a prompt split across steps)."""
PASS, FAIL, NOT_RUN, VARIES = "pass", "fail", "not run", "varies"
_SHOWN = 3


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    """``pass``, ``fail``, ``not run`` (its condition did not happen here) or ``varies`` (the build's own path
    varies more than the dtype allows: measured, not passed)."""
    message: str
    evidence: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool | None:
        return {PASS: True, FAIL: False}.get(self.state)

    def as_dict(self) -> dict:
        return {"name": self.name, "state": self.state, "ok": self.ok, "message": self.message,
                "evidence": self.evidence}


def _listed(items: list[str]) -> str:
    return "; ".join(items[:_SHOWN]) + (f" (and {len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


@dataclass
class Run:
    """An extraction run's results, its prompts, and the reference to judge samples by."""

    result: dict
    plan: Any
    dtype: str
    reference: Callable[[torch.Tensor], dict]
    """A prompt's HF states (``compat.gate.recompute.HFReference.states``), by residual-stream index."""
    native: dict | None = None
    """vLLM's own extraction of the realistic prompts (``native_states``), where it ran."""
    varied: list[str] = field(default_factory=list)
    """Samples of the check being judged that are beyond the dtype's bound but within ``band``."""
    worst: float = 0.0
    """The largest relative error against the reference of the samples the check being judged graded."""
    _states: dict = field(default_factory=dict)

    @property
    def tolerance(self) -> float:
        return TOLERANCE.get(self.dtype, TOLERANCE["bfloat16"])

    def engine(self, name: str) -> dict:
        return self.result.get("engines", {}).get(name, {})

    def job(self, engine: str, name: str) -> dict:
        return self.engine(engine).get("jobs", {}).get(name, {})

    def samples(self, engine: str, name: str) -> list[tuple[int, int, dict]]:
        """(prompt index, call, sample) of a job, in the order saved."""
        import torch

        job = self.job(engine, name)
        spec = next((j for e in self.plan.engines if e["name"] == engine for j in e["jobs"] if j["name"] == name),
                    None)
        if spec is None or not job:
            return []
        out = Path(spec["out"])
        return [(f["prompt"], f["call"], torch.load(out / f["file"], weights_only=True)) for f in job["files"]]

    def states(self, prompt: int) -> dict:
        if prompt not in self._states:
            import torch

            self._states[prompt] = self.reference(torch.tensor(self.plan.prompts[prompt]))
        return self._states[prompt]

    @property
    def band(self) -> float | None:
        """Where the build's own path varies with the batch beyond the dtype's bound (vLLM's own extraction of one
        prompt differs batched and alone), how far from the reference a sample may then be: twice what vLLM's own
        path is from it on these prompts (a row of another prompt or layer is off by 0.2 and more). None where the
        build's path does not vary so, or was not measured."""
        if self.native is None or "error" in self.native or not self.native.get("spread", 0.0) > self.tolerance:
            return None
        if "deviation" not in self.native:
            from compat.gate.recompute import compare

            worst = 0.0
            for prompt, layers in self.native["states"].items():
                states = self.states(prompt)
                for k, tensor in layers.items():
                    if states.get(k + 1) is not None and states[k + 1].shape == tensor.shape:
                        worst = max(worst, compare(tensor, states[k + 1])[0])
            self.native["deviation"] = worst
        return max(self.tolerance, 2 * self.native["deviation"])

    def grade(self, prompt: int, sample: dict, layer_ids: list[int]) -> tuple[str, str | None]:
        """How a sample compares with what HF computes for its prompt: ``pass``, ``varies`` (beyond the dtype's
        bound, within what the build's own path does: ``band``) or ``fail``, with why."""
        from compat.gate.recompute import compare

        ids, want = sample["input_ids"].tolist(), self.plan.prompts[prompt]
        if ids != want[:len(ids)] or not ids:
            return FAIL, f"its input_ids are not the prompt's ({len(ids)} of {len(want)} tokens)"
        layers = sample["hidden_states"]
        if len(layers) != len(layer_ids):
            return FAIL, f"{len(layers)} layers for the layer ids {layer_ids}"
        states = self.states(prompt)
        worst, why = 0.0, None
        for slot, (layer, k) in enumerate(zip(layers, layer_ids)):
            ref = states.get(k + 1)
            ref = ref[:len(ids)] if ref is not None else None
            if ref is None or layer.shape != ref.shape:
                return FAIL, f"layer {k} (slot {slot}): {list(layer.shape)} rows against the prompt's {len(ids)}"
            rel, cos = compare(layer, ref)
            if not rel <= worst:
                worst, why = rel, f"layer {k} (slot {slot}): relative error {rel:.3g}, smallest cosine {cos:.3f}"
        self.worst = max(self.worst, worst)
        if worst <= self.tolerance:
            return PASS, None
        band = self.band
        return (VARIES if band is not None and worst <= band else FAIL), why

    def judged(self, items: list[tuple[int, dict]], layer_ids: list[int],
               expected: set[int] | None = None) -> list[str]:
        """The faults of samples (prompt, sample) against the reference, one line each, and of the ``expected``
        prompts that have no sample at all; samples that only vary as the build's own path does are kept in
        ``varied``, for the check to say so."""
        faults = []
        for p, s in items:
            state, why = self.grade(p, s, layer_ids)
            line = f"prompt {p} ({len(self.plan.prompts[p])} tokens): {why}"
            if state == FAIL:
                faults.append(line)
            elif state == VARIES:
                self.varied.append(line)
        missing = sorted((expected or set()) - {p for p, _ in items})
        return faults + [f"prompt {p} ({len(self.plan.prompts[p])} tokens): no sample" for p in missing]

    def layer_ids(self, engine: str) -> list[int]:
        return self.engine(engine).get("facts", {}).get("layer_ids", [])


def _calls(run: Run, engine: str, name: str) -> list[dict]:
    return run.job(engine, name).get("calls", [])


def _errors(calls: list[dict]) -> list[str]:
    return [f"call {i}: {c['error']}" for i, c in enumerate(calls) if c.get("error")]


def _runnable(calls: list[dict]) -> list[dict]:
    """The calls that did not fail for a configuration the engine cannot run here (``UNSUPPORTED``)."""
    return [c for c in calls if not (c.get("error") and re.search(UNSUPPORTED, c["error"]))]


def _split(calls: list[dict]) -> dict[int, list[tuple[int, int, int]]]:
    """Prompts (index in the run) the scheduler computed over more than one step: their chunks (step, start,
    count)."""
    chunks: dict[int, list[tuple[int, int, int]]] = {}
    for call in calls:
        for number, step in enumerate(call.get("steps", [])):
            for index, start, count, length in step["chunks"]:
                if index >= 0 and (start > 0 or count < length):
                    chunks.setdefault(call["prompts"][index], []).append((number, start, count))
    return chunks


def _ahead(calls: list[dict]) -> int:
    """Prompts the scheduler started in an earlier step than a prompt added before them (without chunked prefill,
    vLLM 0.11.0 leaves a prompt that does not fit what is left of a step for later and goes on with the next)."""
    count = 0
    for call in calls:
        first: dict[int, int] = {}
        for number, step in enumerate(call.get("steps", [])):
            for index, *_ in step["chunks"]:
                first.setdefault(index, number)
        order = sorted(i for i in first if i >= 0)
        count += sum(1 for a, b in zip(order, order[1:]) if first[b] < first[a])
    return count


def _verdict(faults: list[str], passed: str, failed: str, evidence: dict, name: str, run: Run | None = None) -> Check:
    if faults:
        return Check(name, FAIL, f"{failed}: {len(faults)} wrong: {_listed(faults)}", evidence)
    if run is not None and run.varied:
        native = run.native or {}
        return Check(name, VARIES, f"{failed}: {len(run.varied)} samples differ from the reference beyond the "
                     f"{run.dtype} bound {run.tolerance:g}, as vLLM's own path does on this build (it differs from "
                     f"the reference by up to {native.get('deviation', 0):.3g} and from itself alone by up to "
                     f"{native.get('spread', 0):.3g}): {_listed(run.varied)}", {**evidence, "varies": len(run.varied)})
    return Check(name, PASS, passed, evidence)


def realistic(run: Run) -> Check:
    """Prompts of realistic lengths over many calls: every sample equals the reference."""
    facts = run.engine("main").get("facts", {})
    calls = _calls(run, "main", "realistic")
    items = [(p, s) for p, _, s in run.samples("main", "realistic")]
    lengths = [len(run.plan.prompts[i]) for call in calls for i in call["prompts"]]
    if not calls:
        return Check("realistic", NOT_RUN, "the realistic job did not run")
    share = facts["budget"] / facts["max_num_seqs"]
    mean = sum(lengths) / len(lengths)
    ahead = _ahead(calls)
    evidence = {"prompts": len(lengths), "calls": len(calls), "mean_length": round(mean, 1),
                "longest": max(lengths), "budget": facts["budget"], "max_num_seqs": facts["max_num_seqs"],
                "steps": sum(len(c.get("steps", [])) for c in calls),
                "largest_step_tokens": max((s["tokens"] for c in calls for s in c.get("steps", [])), default=0),
                "split_prompts": len(_split(calls)), "run_ahead": ahead}
    faults = _errors(calls) + run.judged(items, run.layer_ids("main"), {p for c in calls for p in c["prompts"]})
    what = (f"{len(lengths)} prompts over {len(calls)} calls (mean {mean:.0f} tokens, longest {max(lengths)}; a "
            f"step takes {facts['budget']} tokens and {facts['max_num_seqs']} sequences; the scheduler split "
            f"{evidence['split_prompts']} prompts across steps and ran {ahead} ahead of one added before them)")
    if not faults and mean <= share:
        return Check("realistic", NOT_RUN, f"{what}: the mean length is not above budget / sequences ({share:.0f}), "
                     "so no step filled up by tokens; give the model a longer context", evidence)
    evidence["largest_relative_error"] = run.worst
    return _verdict(faults, f"{what}: every sample equals the reference within {run.tolerance:g} (largest "
                    f"relative error {run.worst:.2g})", what, evidence, "realistic", run)


def split(run: Run) -> Check:
    """A prompt the scheduler split across steps has all its rows, and they are right."""
    facts = run.engine("main").get("facts", {})
    natural = _split(_calls(run, "main", "realistic"))
    pressure = _runnable(_calls(run, "pressure", "pressure"))
    chunks = {**_split(pressure), **natural}
    if not chunks:
        return Check("split", NOT_RUN, f"the scheduler split no prompt across steps (chunked prefill "
                     f"{'on' if facts.get('chunked_prefill') else 'off'}, a step takes {facts.get('budget')} tokens)",
                     {"split_prompts": 0})
    example = next(iter(natural.items())) if natural else next(iter(chunks.items()))
    evidence = {"split_prompts": len(chunks), "split_by_the_budget": len(natural),
                "example": {"prompt": example[0], "chunks": example[1]}}
    items = [(p, s) for engine, job in (("main", "realistic"), ("pressure", "pressure"))
             for p, _, s in run.samples(engine, job) if p in chunks]
    faults = _errors(_calls(run, "main", "realistic")) + _errors(pressure)
    faults += run.judged(items, run.layer_ids("main"), set(chunks))
    what = (f"{len(chunks)} prompts were split across steps, {len(natural)} of them by the token budget (prompt "
            f"{example[0]}: "
            + ", ".join(f"tokens {s}..{s + c - 1} in step {n}" for n, s, c in example[1][:3]) + ")")
    return _verdict(faults, f"{what}: each equals the reference", what, evidence, "split", run)


def seq_limit(run: Run) -> Check:
    """Steps at the sequence limit: their prompts' samples are right."""
    facts = run.engine("main").get("facts", {})
    calls = _calls(run, "main", "realistic")
    full = [(n, step) for call in calls for n, step in enumerate(call.get("steps", []))
            if step["requests"] >= facts.get("max_num_seqs", 10 ** 9)]
    if not full:
        return Check("seq-limit", NOT_RUN, f"no step scheduled {facts.get('max_num_seqs')} sequences")
    prompts = {call["prompts"][i] for call in calls for step in call.get("steps", [])
               if step["requests"] >= facts["max_num_seqs"] for i, *_ in step["chunks"] if i >= 0}
    items = [(p, s) for p, _, s in run.samples("main", "realistic") if p in prompts]
    faults = _errors(calls) + run.judged(items, run.layer_ids("main"), prompts)
    what = f"{len(full)} steps took {facts['max_num_seqs']} sequences ({len(prompts)} prompts)"
    return _verdict(faults, f"{what}: each prompt's sample equals the reference", what,
                    {"steps_at_limit": len(full), "prompts": len(prompts)}, "seq-limit", run)


def preempt(run: Run) -> Check:
    """Under a KV cache made small on purpose, preempted requests computed again give right samples."""
    engine = run.engine("pressure")
    if "skipped" in engine or not engine:
        return Check("preempt", NOT_RUN, f"the KV-pressure engine did not run: {engine.get('skipped', 'not planned')}")
    if "start_error" in engine:
        return Check("preempt", FAIL, f"the generator refused a KV cache of 1.5 contexts: {engine['start_error']}",
                     {"applied": engine.get("applied")})
    calls = _calls(run, "pressure", "pressure")
    preempted = sorted({call["prompts"][i] for call in calls for i in call.get("preempted", []) if i >= 0})
    evidence = {"applied": engine.get("applied"), "num_blocks": engine.get("facts", {}).get("num_blocks"),
                "preempted_prompts": len(preempted)}
    faults = _errors(calls)
    cannot = [f for f in faults if re.search(UNSUPPORTED, f)]
    if cannot and not preempted:
        return Check("preempt", NOT_RUN, f"this build cannot run prompts split across steps here "
                     f"({', '.join(engine.get('applied', []))}): {cannot[0][:300]}", evidence)
    if not preempted and not faults:
        return Check("preempt", NOT_RUN, f"the scheduler preempted no request ({', '.join(engine.get('applied', []))})",
                     evidence)
    items = [(p, s) for p, _, s in run.samples("pressure", "pressure")]
    faults += run.judged(items, run.layer_ids("pressure"), {p for call in calls for p in call["prompts"]})
    what = (f"{len(preempted)} requests were preempted and computed again under a KV cache of "
            f"{evidence['num_blocks']} blocks ({len(items)} samples)")
    return _verdict(faults, f"{what}: every sample equals the reference", what, evidence, "preempt", run)


def _spread(items: Sequence[tuple[Hashable, Any]], same: Callable[[Any, Any], float]) -> float:
    """The largest difference between samples of one prompt (0 when no prompt has two)."""
    by_prompt: dict[Hashable, list] = {}
    worst = 0.0
    for key, sample in items:
        for other in by_prompt.setdefault(key, []):
            worst = max(worst, same(sample, other))
        by_prompt[key].append(sample)
    return worst


def _rel(a, b) -> float:
    import torch

    a, b = a.to(torch.float64), b.to(torch.float64)
    return float(torch.linalg.norm(a - b) / max(float(torch.linalg.norm(b)), 1e-30))


def _sample_rel(a: dict, b: dict) -> float:
    if len(a["hidden_states"]) != len(b["hidden_states"]):
        return float("inf")
    return max((_rel(x, y) if x.shape == y.shape else float("inf"))
               for x, y in zip(a["hidden_states"], b["hidden_states"]))


def batch(run: Run) -> Check:
    """A call of many prompts gives each the tensors it gets alone."""
    batched = {p: s for p, c, s in run.samples("main", "realistic")}
    singles = run.samples("main", "single")
    steps = [s for c in _calls(run, "main", "realistic") for s in c.get("steps", [])]
    if not singles or not any(s["requests"] > 1 for s in steps):
        return Check("batch", NOT_RUN, "no step ran more than one request")
    diffs = [(p, _sample_rel(batched[p], s)) for p, _, s in singles if p in batched]
    worst = max((d for _, d in diffs), default=0.0)
    native = (run.native or {}).get("spread")
    evidence = {"prompts": len(diffs), "largest_difference": worst, "native_spread": native}
    if native is not None and native > run.tolerance:
        return Check("batch", VARIES, f"vLLM's own path varies with the batch on this build (its states of one prompt "
                     f"differ batched and alone by up to {native:.3g}, above the {run.dtype} bound "
                     f"{run.tolerance:g}); this pipeline's batched and one-at-a-time samples differ by up to "
                     f"{worst:.3g}", evidence)
    faults = [f"prompt {p}: differs by {d:.3g}" for p, d in diffs if not d <= run.tolerance]
    return _verdict(faults, f"{len(diffs)} prompts: batched and alone agree (largest difference {worst:.3g})",
                    f"{len(faults)} of {len(diffs)} prompts differ batched and alone", evidence, "batch")


def capacity(run: Run) -> Check:
    """A KV cache that cannot hold one request of the context is refused at start, as vLLM's engine refuses it."""
    engine = run.engine("capacity")
    if "skipped" in engine or not engine:
        return Check("kv-capacity", NOT_RUN, f"did not run: {engine.get('skipped', 'not planned')}")
    applied = engine.get("applied", [])
    if "start_error" in engine:
        error = engine["start_error"]
        clear = re.search(r"KV cache|max_model_len|max seq len|memory", error, re.IGNORECASE)
        state = PASS if clear else FAIL
        return Check("kv-capacity", state, f"a KV cache for half the context ({', '.join(applied)}) was refused "
                     f"at start: {error[:300]}" + ("" if clear else " (the error does not say why)"),
                     {"applied": applied})
    facts = engine.get("facts", {})
    calls = _calls(run, "capacity", "capacity")
    items = run.samples("capacity", "capacity")
    rows = [len(s["hidden_states"][0]) if s["hidden_states"] else 0 for _, _, s in items]
    said = _errors(calls) or [f"a prompt of {len(run.plan.prompts[p])} tokens came back with {r} rows"
                              for (p, _, _), r in zip(items, rows)]
    return Check("kv-capacity", FAIL, f"the generator started with a KV cache of {facts.get('num_blocks')} blocks "
                 f"of {facts.get('block_size')} tokens for a context of {facts.get('max_model_len')}: "
                 + _listed(said), {"applied": applied, "rows": rows})


def layer_order(run: Run) -> Check:
    """Layer ids unsorted and repeated: the samples hold them in the order asked (what the metadata says), or
    the generator refuses them loudly."""
    engine = run.engine("layers")
    asked: list[int] = next((e["layer_ids"] for e in run.plan.engines if e["name"] == "layers"), [])
    if "skipped" in engine or not engine:
        return Check("layer-order", NOT_RUN, f"did not run: {engine.get('skipped', 'not planned')}")
    if "start_error" in engine:
        error = engine["start_error"]
        clear = re.search(r"layer", error, re.IGNORECASE)
        return Check("layer-order", PASS if clear else FAIL, f"layer ids {asked} were refused at start: "
                     f"{error[:300]}", {"asked": asked})
    said = engine.get("facts", {}).get("layer_ids", [])
    items = [(p, s) for p, _, s in run.samples("layers", "layers")]
    faults = _errors(_calls(run, "layers", "layers"))
    if said != asked:
        faults.append(f"the generator's layer_ids (its metadata) are {said}")
    faults += run.judged(items, asked, {p for c in _calls(run, "layers", "layers") for p in c["prompts"]})
    return _verdict(faults, f"layer ids {asked}: {len(items)} samples hold them in that order", f"layer ids {asked}",
                    {"asked": asked, "metadata": said}, "layer-order", run)


def truncation(run: Run) -> Check:
    """A prompt longer than the context is cut, and the call says so (or refuses it)."""
    facts = run.engine("main").get("facts", {})
    calls = _calls(run, "main", "truncation")
    if not calls:
        return Check("truncation", NOT_RUN, "the truncation job did not run")
    call = calls[0]
    long = max(call["prompts"], key=lambda i: len(run.plan.prompts[i]))
    length = len(run.plan.prompts[long])
    if length < facts.get("max_model_len", 0):
        return Check("truncation", NOT_RUN, f"no prompt reached the context ({facts.get('max_model_len')})")
    if call.get("error"):
        return Check("truncation", PASS, f"a prompt of {length} tokens was refused: {call['error'][:200]}")
    rows = [len(s["hidden_states"][0]) for p, _, s in run.samples("main", "truncation") if p == long]
    said = [w for w in call.get("warnings", []) if re.search(r"trunc|cut|longer", w, re.IGNORECASE)]
    evidence = {"prompt_tokens": length, "rows": rows, "warnings": said}
    if not said:
        return Check("truncation", FAIL, f"a prompt of {length} tokens came back with {rows[0] if rows else 0} rows, "
                     "and the call said nothing", evidence)
    return Check("truncation", PASS, f"a prompt of {length} tokens came back with {rows[0] if rows else 0} rows, "
                 f"and the call said: {said[0][:200]}", evidence)


def after_failure(run: Run) -> Check:
    """After a call fails inside a decoder layer, the next calls are right and nothing of it is left behind."""
    failed = _calls(run, "main", "fault")
    error = failed[0].get("error") if failed else None
    if not error:
        return Check("after-failure", NOT_RUN, "the fault injected into a decoder layer did not make the call fail")
    if FAULT not in error:
        return Check("after-failure", FAIL, f"the call failed before the injected fault could: {error[:200]}",
                     {"error": error})
    calls = _calls(run, "main", "after-fault")
    items = [(p, s) for p, _, s in run.samples("main", "after-fault")]
    faults = _errors(calls) + run.judged(items, run.layer_ids("main"), {p for c in calls for p in c["prompts"]})
    faults += [f"after call {i} the scheduler holds {c['scheduler_left']} and the workers "
               f"{c.get('workers_left')} requests" for i, c in enumerate(calls)
               if c.get("scheduler_left") or c.get("workers_left")]
    what = f"a call failed ({failed[0]['error'][:120]})"
    return _verdict(faults, f"{what}; the {len(items)} samples of the next calls equal the reference and nothing "
                    "is left queued", f"{what}; then", {"error": failed[0]["error"]}, "after-failure", run)


def leftovers(run: Run) -> Check:
    """After each call, neither the scheduler nor the workers hold any of its requests."""
    calls = _calls(run, "main", "realistic")
    known = [c for c in calls if c.get("workers_left") is not None]
    if not known:
        return Check("leftovers", NOT_RUN, "the workers' requests could not be counted on this build")
    faults = [f"after call {i}: the scheduler holds {c['scheduler_left']}, the workers {c['workers_left']}"
              for i, c in enumerate(calls) if c.get("scheduler_left") or c.get("workers_left")]
    last = calls[-1]
    return _verdict(faults, f"after each of {len(calls)} calls the scheduler and the workers hold no request",
                    f"requests left behind (after the last call: scheduler {last.get('scheduler_left')}, workers "
                    f"{last.get('workers_left')})", {"calls": len(calls)}, "leftovers")


def _refused(run: Run, name: str, what: str, about: str) -> Check:
    calls = _calls(run, "main", name)
    after = _calls(run, "main", f"after-{name}")
    if not calls:
        return Check(name, NOT_RUN, f"the {name} job did not run")
    error = calls[0].get("error")
    faults = []
    if not error:
        faults.append(f"a call with {what} returned {calls[0].get('samples')} samples without an error")
    elif not error.partition(": ")[2].strip():
        faults.append(f"a call with {what} raised a bare {error.partition(':')[0]}")
    elif not re.search(about, error, re.IGNORECASE):
        faults.append(f"a call with {what} raised an error that does not say so: {error[:200]}")
    items = [(p, s) for p, _, s in run.samples("main", f"after-{name}")]
    faults += [f"the next call: {e}" for e in _errors(after)]
    faults += run.judged(items, run.layer_ids("main"), {p for c in after for p in c["prompts"]})
    return _verdict(faults, f"a call with {what} was refused ({(error or '')[:160]}), and the next call is right",
                    f"{what}", {"error": error}, name, run)


def empty(run: Run) -> Check:
    return _refused(run, "empty", "an empty prompt", r"empty|no token")


def oov(run: Run) -> Check:
    return _refused(run, "oov", "token ids outside the vocabulary", r"vocab")


def relabel(run: Run) -> Check:
    """``generator.layer_ids`` changed after the generator was built: the states would be other layers' under the
    new labels (the hooks were installed for the old ids), so the call must refuse, saying so."""
    return _refused(run, "relabel", "layer ids changed after the generator was built", r"layer")


def nonfinite(run: Run) -> Check:
    """NaN in a decoder layer's output (put there on purpose, as a model vLLM computes wrongly gives): the call
    refuses, naming the sample and the layer, instead of returning the states."""
    return _refused(run, "nonfinite", "NaN in a captured layer", r"sample \d+.*layer \d+.*(non-finite|nan)")


def native(run: Run) -> Check:
    """The samples equal vLLM's own ``extract_hidden_states`` on the same build, weights and prompts, run batched."""
    if run.native is None:
        return Check("native", NOT_RUN, "vLLM's own extraction was not run")
    if "error" in run.native:
        return Check("native", NOT_RUN, f"vLLM's own extract_hidden_states did not run on this build: "
                     f"{run.native['error']}")
    theirs: dict[int, dict[int, Any]] = run.native["states"]
    items = [(p, s) for p, _, s in run.samples("main", "realistic") if p in theirs]
    layer_ids = run.layer_ids("main")
    worst, faults = 0.0, []
    for p, sample in items:
        for slot, k in enumerate(layer_ids):
            other = theirs[p].get(k)
            if other is None:
                continue
            mine = sample["hidden_states"][slot]
            if mine.shape != other.shape:
                faults.append(f"prompt {p} layer {k}: {list(mine.shape)} against {list(other.shape)}")
                continue
            rel = _rel(mine, other.to(mine.dtype))
            worst = max(worst, rel)
            if not rel <= run.tolerance:
                faults.append(f"prompt {p} layer {k}: relative difference {rel:.3g}")
    spread = run.native.get("spread", 0.0)
    compared = sorted({k for p in theirs for k in theirs[p]} & set(layer_ids))
    evidence = {"samples": len(items), "layers": compared, "largest_difference": worst, "native_spread": spread}
    what = f"{len(items)} samples, layers {compared}, against vLLM's own extraction of them in one batch"
    if spread > run.tolerance:
        return Check("native", VARIES, f"{what}: vLLM's own path varies with the batch on this build (its states of "
                     f"one prompt differ batched and alone by up to {spread:.3g}, above the {run.dtype} bound "
                     f"{run.tolerance:g}); this pipeline differs from it by up to {worst:.3g}", evidence)
    return _verdict(faults, f"{what}: equal within {run.tolerance:g} (largest difference {worst:.3g})", what,
                    evidence, "native")


CHECKS = {"realistic": realistic, "split": split, "seq-limit": seq_limit, "preempt": preempt, "batch": batch,
          "native": native, "kv-capacity": capacity, "layer-order": layer_order, "truncation": truncation,
          "after-failure": after_failure, "leftovers": leftovers, "empty": empty, "oov": oov, "relabel": relabel,
          "nonfinite": nonfinite}


def evaluate(run: Run, names: tuple[str, ...]) -> list[Check]:
    found = []
    for name in names:
        run.varied, run.worst = [], 0.0
        found.append(CHECKS[name](run))
    return found


def native_states(directory: Path, prompts: list[int], captured: list[int]) -> dict:
    """What ``compat.extract.native`` wrote for ``prompts`` run with vLLM layer ids ``k + 1`` for each ``k`` of
    ``captured`` (vLLM's id ``k + 1`` is the state after decoder layer ``k``): per prompt, ``k`` -> that state; and
    ``spread``, how much the build's own path varies with the batch: the largest difference between a prompt's
    states in the batch and alone (``alone.json``), or between copies of one prompt in the batch."""
    from safetensors.torch import load_file

    manifest = json.loads((directory / "manifest.json").read_text())
    alone_path = directory / "alone.json"
    alone = json.loads(alone_path.read_text()) if alone_path.exists() else []
    states: dict[int, dict[int, Any]] = {}
    copies: list[tuple[tuple, Any]] = []
    for prompt, record in zip(prompts, manifest):
        tensor = load_file(record["path"])["hidden_states"]
        states[prompt] = {k: tensor[:, index, :] for index, k in enumerate(captured)}
        copies.append((tuple(record["prompt_token_ids"]), tensor))
    for record in alone:
        copies.append((tuple(record["prompt_token_ids"]), load_file(record["path"])["hidden_states"]))
    return {"states": states, "spread": _spread(copies, _rel), "alone": len(alone)}


def root_cause(stderr: str) -> str:
    """The first ``SomeError: message`` line of a failed run's log (vLLM logs a worker's error before the
    engine's generic one), without the logger's prefix; else its last line."""
    from compat.extract.native import NOT_HERE

    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line.removeprefix(NOT_HERE) for line in lines if line.startswith(NOT_HERE)]
    if said:
        return said[0]
    for line in lines:
        found = re.search(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)", line)
        if found and not line.startswith(("warnings.warn", "File ")):
            return f"{found.group(1)}: {found.group(2)}"
    return lines[-1] if lines else "no output"
