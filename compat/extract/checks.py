"""Consistency checks that catch silent corruption (``compat.extract --check``), all on one engine:

- ``batch``: a batch of prompts gives the same per-sample tensors as the same prompts one at a time;
- ``repeated``: identical prompts repeated in one batch and across batches give full-length, equal outputs
  (prefix caching would skip the cached rows);
- ``many-calls``: several hundred prompts in batches of different sizes and mixed lengths up to the
  context, over many ``generate`` calls (each call runs several scheduler steps);
- ``budget``: one batch whose tokens exceed a scheduler step's budget (chunked prefill across steps; the
  consumer sizes its budget at least ``max_model_len``, so a single prompt never exceeds it) against the
  same prompts one at a time;
- ``native``: the tensors equal those of vLLM's own ``extract_hidden_states`` on the same engine build,
  weights and prompts, with the numbering converted (vLLM's layer id ``k + 1`` is the state after layer ``k``),
  on builds that have it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from compat.extract import prompts as make
from compat.extract.native import NOT_HERE

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}
BUDGET = 8192
"""speculators 0.3.0 sizes a step's token budget as max(8192, max_model_len)."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None
    """None: could not be run here (the reason is the message)."""
    message: str


def jobs(prompts: list[list[int]], vocab: int, max_len: int, max_model_len: int, out: Path,
         seed: int) -> tuple[list[list[int]], list[dict]]:
    """The prompts (the run's own first) and the jobs the checks need."""
    n = len(prompts)
    extra = make.generated(320, vocab, max_len, seed=seed + 1)
    budget_prompts = make.generated(BUDGET // max_len + 2, vocab, max_len, seed=seed + 2, min_len=max_len)
    # Longer than a KV block (the CPU backend's blocks hold up to 128 tokens), so a cached prefix would be
    # skipped: a shorter prompt never fills a block and no prefix of it is cached.
    repeated = make.generated(1, vocab, max_model_len - 1, seed=seed + 3, min_len=max_model_len - 1)[0]
    allp = prompts + extra + budget_prompts + [repeated]
    base, budget0, rep = n, n + len(extra), n + len(extra) + len(budget_prompts)
    sizes = [1, 7, 16, 3, 32, 5, 11, 2, 24, 9]
    many, start = [], base
    while start < base + len(extra):
        size = sizes[len(many) % len(sizes)]
        many.append(list(range(start, min(start + size, base + len(extra)))))
        start += size
    budget = list(range(budget0, rep))
    specs = [
        {"name": "single", "batches": [[i] for i in range(min(n, 6))] + [[i] for i in budget]},
        {"name": "batch", "batches": [list(range(min(n, 6)))]},
        {"name": "repeated", "batches": [[rep, rep, rep], [rep]]},
        {"name": "many-calls", "batches": many},
        {"name": "budget", "batches": [budget]},
    ]
    for spec in specs:
        spec["out"] = str(out / "checks" / spec["name"])
    return allp, specs


def _load(directory: Path, files: list[dict]) -> list[tuple[int, dict]]:
    import torch

    return [(f["prompt"], torch.load(directory / f["file"], weights_only=True)) for f in files]


def _rel(a, b) -> float:
    import torch

    a, b = a.to(torch.float64), b.to(torch.float64)
    return float(torch.linalg.norm(a - b) / max(float(torch.linalg.norm(b)), 1e-30))


def _same(a: dict, b: dict, tol: float) -> str | None:
    """Why two samples of one prompt differ (None: they agree within ``tol``)."""
    if len(a["hidden_states"]) != len(b["hidden_states"]):
        return f"{len(a['hidden_states'])} layers against {len(b['hidden_states'])}"
    for slot, (x, y) in enumerate(zip(a["hidden_states"], b["hidden_states"])):
        if x.shape != y.shape:
            return f"layer slot {slot}: shape {list(x.shape)} against {list(y.shape)}"
        if _rel(x, y) > tol:
            return f"layer slot {slot}: relative difference {_rel(x, y):.3g} (tolerance {tol})"
    return None


def evaluate(result: dict, specs: list[dict], prompts: list[list[int]], dtype: str) -> list[Check]:
    tol = TOLERANCE.get(dtype, 2e-2)
    runs = {s["name"]: _load(Path(s["out"]), result["jobs"][s["name"]]["files"]) for s in specs}
    single = {p: s for p, s in runs["single"]}
    checks = []

    def against_single(name: str) -> Check:
        faults = [f"prompt {p}: {why}" for p, s in runs[name] if (why := _same(s, single[p], tol))]
        total = len(runs[name])
        return Check(name, not faults, f"{total - len(faults)} of {total} samples equal their one-at-a-time run"
                     + (f"; {faults[0]}" if faults else ""))

    checks.append(against_single("batch"))
    rows = [(p, len(s["hidden_states"][0]), len(prompts[p])) for p, s in runs["repeated"]]
    short = [f"prompt {p}: {got} rows of {want}" for p, got, want in rows if got != want]
    first = runs["repeated"][0][1]
    differ = [why for _, s in runs["repeated"][1:] if (why := _same(s, first, tol))]
    checks.append(Check("repeated", not short and not differ,
                        f"{len(rows)} copies of one prompt: " + ("; ".join(short + differ) if short or differ else
                                                                 "all full-length and equal")))
    bad = [f"prompt {p}: {len(s['hidden_states'][0])} rows of {len(prompts[p])}" for p, s in runs["many-calls"]
           if len(s["hidden_states"][0]) != len(prompts[p]) or len(s["input_ids"]) != len(prompts[p])]
    calls = len(specs[3]["batches"])
    checks.append(Check("many-calls", not bad, f"{len(runs['many-calls'])} prompts over {calls} generate calls"
                        + (f": {len(bad)} wrong, first {bad[0]}" if bad else ": every sample full-length")))
    budget_tokens = sum(len(prompts[p]) for p, _ in runs["budget"])
    check = against_single("budget")
    checks.append(Check("budget", check.ok, f"one batch of {budget_tokens} tokens (a step takes at most "
                        f"{BUDGET}): {check.message}"))
    return checks


def root_cause(stderr: str) -> str:
    """The first ``SomeError: message`` line of a failed run's log (vLLM logs a worker's error before the
    engine's generic one), without the logger's prefix; else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line.removeprefix(NOT_HERE) for line in lines if line.startswith(NOT_HERE)]
    if said:
        return said[0]
    for line in lines:
        found = re.search(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)", line)
        if found and not line.startswith(("warnings.warn", "File ")):
            return f"{found.group(1)}: {found.group(2)}"
    return lines[-1] if lines else "no output"


def native(model: Path, out: Path, stored: list[tuple[int, dict]], prompts: list[list[int]], layer_ids: list[int],
           dtype: str, env: dict, timeout: float) -> Check:
    """vLLM's own extraction of the same prompts, compared after converting its layer numbering."""
    import torch
    from safetensors.torch import load_file

    layers = json.loads((model / "config.json").read_text()).get("num_hidden_layers", 10 ** 6)
    # vLLM's layer id k is the state entering decoder layer k; the last layer's output is not one of them.
    slots = [(slot, k) for slot, k in enumerate(sorted(layer_ids)) if k + 1 < layers]
    if not slots:
        return Check("native", None, f"vLLM's extraction gives states entering layers 0..{layers - 1}, none of "
                     "which is the output of a captured layer")
    ids = [k + 1 for _, k in slots]
    chosen = stored[:4]
    directory = out / "checks" / "native"
    directory.mkdir(parents=True, exist_ok=True)
    listed = directory.parent / "native-prompts.json"
    listed.write_text(json.dumps([prompts[p] for p, _ in chosen]))
    proc = subprocess.run([sys.executable, "-m", "compat.extract.native", str(model), str(directory),
                           "--layer-ids", ",".join(map(str, ids)), "--dtype", dtype, "--prompts", str(listed)],
                          capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        return Check("native", None, f"vLLM's own extract_hidden_states did not run on this build: "
                     f"{root_cause(proc.stderr)}")
    manifest = json.loads((directory / "manifest.json").read_text())
    tol = TOLERANCE.get(dtype, 2e-2)
    faults = []
    for (p, sample), record in zip(chosen, manifest):
        theirs = load_file(record["path"])["hidden_states"]
        for index, (slot, k) in enumerate(slots):
            mine = sample["hidden_states"][slot]
            other = theirs[:, index, :].to(mine.dtype)
            if mine.shape != other.shape or _rel(mine, other) > tol:
                faults.append(f"prompt {p} layer {k}: "
                              + (f"shape {list(mine.shape)} against {list(other.shape)}" if mine.shape != other.shape
                                 else f"relative difference {_rel(mine, other):.3g}"))
        if not torch.equal(torch.as_tensor(record["prompt_token_ids"]), sample["input_ids"]):
            faults.append(f"prompt {p}: token ids differ")
    left = sorted(set(layer_ids) - {k for _, k in slots})
    return Check("native", not faults, f"{len(chosen)} samples, layers {[k for _, k in slots]} against vLLM's "
                 f"extract_hidden_states (its layer ids {ids})" + (f"; layer {left} has no vLLM counterpart" if left
                                                                   else "") + ": "
                 + (faults[0] if faults else "equal within " + str(tol)))
