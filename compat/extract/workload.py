"""What ``compat.extract --check`` runs: realistic prompts, and the engines and calls each check needs.

A check must be able to fail, so its workload is built to make the condition it names happen on a real engine:
prompts of lengths over the model's whole context (their mean well above a step's token budget divided by the
sequence limit, so steps fill up by tokens and the scheduler splits prompts across steps), shared prefixes and exact
copies of earlier prompts (prefix caching would skip their cached rows), a call of more short prompts than a step
takes sequences (steps at the sequence limit), a KV cache made small on purpose with prefills capped per step
(requests preempted and computed again), a KV cache too small for one request, layer ids unsorted and repeated,
layer ids changed after the generator was built, NaN in a layer's output, a prompt longer than the context, empty
and out-of-vocabulary prompts, and a fault injected into a decoder layer. Whether each condition did happen is read
afterwards from the engine itself (``compat.extract.runner.Watch``); this module only plans.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

REALISTIC_CALLS = (1, 42, 17, 30, 5, 40, 10)
"""Calls of the realistic job, in prompts: singles and calls of many more tokens than a step takes."""
SHORT_CALL = 48
"""A call of short prompts, more than the 32 sequences speculators' generator lets a step take."""
PRESSURE_PROMPTS = 24
"""Prompts run again under KV pressure (two calls)."""
PREFILL_CAP = 64
"""Tokens of one prompt a step may compute under KV pressure (``long_prefill_token_threshold``, with chunked prefill
on: vLLM 0.11.0's CPU attention computes a prompt split across steps only then): many prefills are in flight at
once, and a full KV cache preempts some."""


NEEDS = {
    "realistic": {"realistic"}, "split": {"realistic", "pressure"}, "seq-limit": {"realistic"},
    "preempt": {"pressure"}, "batch": {"realistic", "single"}, "native": {"realistic"},
    "kv-capacity": {"capacity"}, "layer-order": {"layers"}, "truncation": {"truncation"},
    "after-failure": {"fault", "after-fault"}, "leftovers": {"realistic"}, "empty": {"empty", "after-empty"},
    "oov": {"oov", "after-oov"}, "relabel": {"relabel", "after-relabel"},
    "nonfinite": {"nonfinite", "after-nonfinite"},
}
"""The jobs each check judges (``compat.extract.checks``)."""
CHECKS = tuple(NEEDS)


@dataclass
class Plan:
    prompts: list[list[int]]
    engines: list[dict]
    realistic: list[int] = field(default_factory=list)
    """The realistic prompts' indices."""
    sizes: dict[str, object] = field(default_factory=dict)
    """What the workload was built to reach (for the report)."""


def _random(rng: random.Random, vocab: int, n: int) -> list[int]:
    low = min(3, vocab - 1)
    return [rng.randrange(low, vocab) for _ in range(n)]


def realistic(count: int, vocab: int, context: int, seed: int) -> list[list[int]]:
    """``count`` prompts like a real dataset's: some short (chat turns of a few tokens), the rest spread over the
    whole context up to its last position, most of them long, one prompt in five opening with one of four shared system
    prompts, one in seven an exact copy of an earlier one."""
    rng = random.Random(seed)
    longest = context - 1
    prefixes = [_random(rng, vocab, rng.randint(max(1, longest // 16), max(2, longest // 4))) for _ in range(4)]
    prompts: list[list[int]] = []
    for i in range(count):
        if i % 7 == 3 and prompts:
            prompts.append(list(rng.choice(prompts)))
            continue
        kind = rng.random()
        if kind < 0.15:
            n = rng.randint(1, max(1, min(40, longest)))
        elif kind < 0.4:
            n = rng.randint(max(1, longest // 10), max(1, longest * 6 // 10))
        else:
            n = rng.randint(max(1, longest * 4 // 10), longest)
        prompt = _random(rng, vocab, n)
        if i % 5 == 0:
            prompt = (rng.choice(prefixes) + prompt)[:max(n, 1)]
        prompts.append(prompt[:longest])
    prompts[min(len(prompts) - 1, 2)] = _random(rng, vocab, longest)  # the longest prompt the context takes
    return prompts


def _other_layers(layer_ids: list[int], num_layers: int) -> list[int]:
    """Layer ids of another set than ``layer_ids`` (what a user who changes ``generator.layer_ids`` after building
    it asks for): each moved to the next layer, the last wrapping round."""
    moved = [(k + 1) % num_layers for k in layer_ids]
    return moved if set(moved) != set(layer_ids) else [k for k in range(num_layers) if k not in layer_ids][:1] or moved


def _calls(indices: list[int], sizes: tuple[int, ...]) -> list[list[int]]:
    calls: list[list[int]] = []
    start = 0
    while start < len(indices):
        size = sizes[len(calls) % len(sizes)]
        calls.append(indices[start:start + size])
        start += size
    return calls


def plan(user: list[list[int]], batch_size: int, vocab: int, context: int, layer_ids: list[int], num_layers: int,
         out: Path, seed: int, checks: tuple[str, ...] = ()) -> Plan:
    """The prompts (the user's first) and the engines: ``main`` runs the user's prompts (and the jobs of the
    ``checks`` that need no configuration of their own); ``pressure``, ``capacity`` and ``layers`` each build the
    generator again, for the checks that need them. Only the jobs the ``checks`` judge are planned."""
    prompts = [list(p) for p in user]
    main_jobs = [{"name": "main", "out": str(out / "main"),
                  "calls": [list(range(i, min(i + batch_size, len(user)))) for i in range(0, len(user), batch_size)]}]
    result = Plan(prompts, [{"name": "main", "layer_ids": layer_ids, "jobs": main_jobs}])
    if not checks:
        return result

    def add(items: list[list[int]]) -> list[int]:
        prompts.extend(items)
        return list(range(len(prompts) - len(items), len(prompts)))

    def job(name: str, calls: list[list[int]], **extra: object) -> dict:
        return {"name": name, "out": str(out / "checks" / name), "calls": calls, **extra}

    rng = random.Random(seed + 7)
    count = sum(REALISTIC_CALLS) + 5
    real = add(realistic(count, vocab, context, seed + 1))
    calls = _calls(real, REALISTIC_CALLS)
    short = add([_random(rng, vocab, rng.randint(1, max(1, min(60, context - 1)))) for _ in range(SHORT_CALL)])
    calls.insert(3, short)
    result.realistic = real + short
    longest = max(real, key=lambda i: len(prompts[i]))
    # The call of the most tokens (more than a step takes), run again one prompt at a time.
    compared = max(calls, key=lambda call: sum(len(prompts[i]) for i in call))
    normal = add([_random(rng, vocab, max(1, min(50, context - 1)))])[0]
    too_long = add([_random(rng, vocab, context + 20)])[0]
    empty = add([[]])[0]
    outside = add([[vocab + 7] * 5])[0]
    # The calls that fail on purpose come last, each followed by a call that must be right: a consumer that
    # keeps a failed call's state breaks what follows, and that is what these checks look for.
    main_jobs += [job("realistic", calls), job("single", [[i] for i in compared]),
                  job("truncation", [[normal, too_long]]),
                  job("fault", [real[:4]], expect="error", fault=min(1, num_layers - 1)),
                  job("after-fault", [real[4:8], real[:4]]),
                  job("oov", [[normal, outside]], expect="error"), job("after-oov", [[normal]]),
                  job("empty", [[normal, empty]], expect="error"), job("after-empty", [[normal]]),
                  job("relabel", [real[:2]], expect="error", relabel=_other_layers(layer_ids, num_layers)),
                  job("after-relabel", [real[2:4]]),
                  job("nonfinite", [real[4:6]], expect="error", poison=min(layer_ids)),
                  job("after-nonfinite", [real[6:8]])]
    pressure = real[:PRESSURE_PROMPTS]
    unsorted = [num_layers - 1, 0, num_layers // 2, 0] if num_layers > 2 else [num_layers - 1, 0, 0]
    result.engines += [
        {"name": "pressure", "layer_ids": layer_ids, "kv_tokens": context * 3 // 2,
         "overrides": {"SchedulerConfig": {"enable_chunked_prefill": True,
                                           "long_prefill_token_threshold": PREFILL_CAP,
                                           "scheduler_reserve_full_isl": False}},
         "jobs": [job("pressure", _calls(pressure, (len(pressure) // 2, len(pressure) - len(pressure) // 2)))]},
        {"name": "capacity", "layer_ids": layer_ids, "kv_tokens": context // 2,
         "jobs": [job("capacity", [[longest]])]},
        {"name": "layers", "layer_ids": unsorted, "jobs": [job("layers", [real[8:12]])]},
    ]
    wanted = set().union(*(NEEDS[c] for c in checks))
    for engine in result.engines:
        engine["jobs"] = [j for j in engine["jobs"] if j["name"] == "main" or j["name"] in wanted]
    result.engines = [e for e in result.engines if e["jobs"]]
    lengths = [len(prompts[i]) for i in real]
    copies = len(real) - len({tuple(prompts[i]) for i in real})
    result.sizes = {"realistic_prompts": len(result.realistic), "realistic_calls": len(calls),
                    "mean_length": round(sum(lengths) / len(lengths), 1), "longest": max(lengths),
                    "exact_copies": copies, "context": context, "unsorted_layer_ids": unsorted}
    return result
