"""Extraction throughput of the patched consumer's generator, side by side with plain vLLM prefill of the same
prompts on the same engine build (the capture overhead) and with HF transformers' ``output_hidden_states=True``
on the same weights.

    python benchmarks/extract_speed.py [--hidden 1024] [--layers 8] [--prompts 64] [--len 256] [--batch 16]
                                       [--dtype bfloat16] [--repeat 5] [--patched DIR]

A random-weight Llama of the given size is built once into the cache. The three are measured in turn in one
run (each after a warm-up batch, each run over the same batches of the same prompts; the best of --repeat
passes counts), then the figures and both ratios are printed. The generator is speculators 0.3.0 patched by
``compat.fix`` for the installed vLLM (or the patched copy --patched names), run by ``compat.extract.runner``
exactly as ``python -m compat.extract`` runs it; plain prefill is ``vllm.LLM.generate`` with ``max_tokens=1``,
prefix caching off as in the patched generator, the same token budget per step, and the engine core in the
calling process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), as the generator runs its scheduler in its own.

Target: the capture overhead (1 - generator / plain prefill on the same executor) within 10%. The patched
generator drives vLLM's ``MultiprocExecutor`` (speculators builds it by hand); plain prefill is measured both
on that executor (``distributed_executor_backend="mp"``: the capture overhead) and on vLLM's default one at
TP 1 (the worker in the engine's own process). On a machine with few cores the former pays for its reader
spinning on a core for a second after each reply (vLLM's shared-memory queue), which the worker's threads
then lack.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compat.cache import cache_dir  # noqa: E402
from compat.extract import prompts as make  # noqa: E402
from compat.extract.stage import child_env, copy_patched, stage  # noqa: E402

GENERATOR = "speculators.data_generation.vllm_hidden_states_generator:VllmHiddenStatesGenerator"
MAX_MODEL_LEN = 512  # the tiny models have 512 positions
BUDGET = 8192  # the patched generator's max_num_batched_tokens (speculators sets it)

PREFILL = r'''
import json, sys, time
from vllm import LLM, SamplingParams


def main():
    spec = json.load(open(sys.argv[1]))
    extra = {"distributed_executor_backend": spec["executor"]} if spec["executor"] else {}
    llm = LLM(model=spec["model"], dtype=spec["dtype"], enforce_eager=True, max_model_len=spec["max_model_len"],
              max_num_batched_tokens=spec["budget"], enable_prefix_caching=False, seed=0, **extra)
    params = SamplingParams(max_tokens=1, temperature=0.0)
    prompts = spec["prompts"]

    def once(batches):
        start = time.perf_counter()
        for batch in batches:
            llm.generate([{"prompt_token_ids": prompts[i]} for i in batch], params, use_tqdm=False)
        return time.perf_counter() - start

    once(spec["warmup"])
    json.dump({"seconds": [once(spec["batches"]) for _ in range(spec["repeat"])]}, open(sys.argv[2], "w"))


if __name__ == "__main__":  # vLLM spawns its engine core
    main()
'''


def build_model(hidden: int, layers: int) -> Path:
    from compat import models

    directory = cache_dir() / "bench" / f"llama-h{hidden}-l{layers}"
    if not (directory / "config.json").exists():
        models.build("llama", directory, hidden_size=hidden, num_layers=layers)
    return directory


def run_child(args: list[str], env: dict, log: Path) -> None:
    with log.open("w") as handle:
        proc = subprocess.run([sys.executable, *args], stdout=handle, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        sys.exit(f"extract_speed: {' '.join(args[:2])} failed (exit {proc.returncode}); log: {log}")


def generator_seconds(model: Path, staged: Path, prompts, batches, warmup, dtype, repeat, work: Path) -> list[float]:
    jobs = [{"name": "warmup", "out": str(work / "gen-warmup"), "calls": warmup}]
    jobs += [{"name": f"pass{i}", "out": str(work / f"gen-{i}"), "calls": batches} for i in range(repeat)]
    spec = {"generator": GENERATOR, "model": str(model), "max_model_len": MAX_MODEL_LEN, "tensor_parallel_size": 1,
            "dtype": dtype, "prompts": prompts,
            "engines": [{"name": "bench", "layer_ids": [0, 2, 3], "jobs": jobs}]}
    (work / "gen.json").write_text(json.dumps(spec))
    run_child(["-m", "compat.extract.runner", str(work / "gen.json"), str(work / "gen-result.json")],
              child_env(staged, 1), work / "gen.log")
    result = json.loads((work / "gen-result.json").read_text())
    engine = result.get("engines", {}).get("bench", {})
    failed = result.get("error") or engine.get("start_error") or next(
        (c["error"] for job in engine.get("jobs", {}).values() for c in job["calls"] if c.get("error")), None)
    if failed:
        sys.exit(f"extract_speed: the generator failed: {failed}\n{result.get('traceback', '')}")
    # In generate() (the capture and the transfer of the captured states included), and with saving each sample.
    return ([engine["jobs"][f"pass{i}"]["generate_s"] for i in range(repeat)],
            [engine["jobs"][f"pass{i}"]["seconds"] for i in range(repeat)])


def prefill_seconds(model: Path, prompts, batches, warmup, dtype, repeat, work: Path, executor: str | None
                    ) -> list[float]:
    script = work / "prefill.py"
    script.write_text(PREFILL)
    spec = {"model": str(model), "dtype": dtype, "max_model_len": MAX_MODEL_LEN, "budget": BUDGET,
            "prompts": prompts, "batches": batches, "warmup": warmup, "repeat": repeat, "executor": executor}
    (work / "prefill.json").write_text(json.dumps(spec))
    # The engine core in this process, as the generator drives its scheduler in its own: what remains is the
    # engine's own per-step work (and its detokenizer and sampler, which extraction does not need).
    env = dict(child_env(work, 1), VLLM_ENABLE_V1_MULTIPROCESSING="0")
    run_child([str(script), str(work / "prefill.json"), str(work / "prefill-result.json")], env, work / "prefill.log")
    return json.loads((work / "prefill-result.json").read_text())["seconds"]


def hf_seconds(model: Path, prompts, batches, warmup, dtype, repeat) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype)).eval()

    def once(chosen) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for batch in chosen:
                ids = torch.tensor([prompts[i] for i in batch])  # equal lengths: no padding
                out = hf(input_ids=ids, output_hidden_states=True)
                _ = [h.cpu() for h in out.hidden_states]
        return time.perf_counter() - start

    once(warmup)
    return [once(batches) for _ in range(repeat)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--len", type=int, default=256, help="tokens per prompt")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--patched", type=Path, help="a patched copy (compat.fix --apply); default: patch for the "
                                                "installed vLLM now")
    args = p.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

    import vllm

    model = build_model(args.hidden, args.layers)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    prompts = make.generated(args.prompts, vocab, args.len, seed=7, min_len=args.len)
    batches = [list(range(i, min(i + args.batch, len(prompts)))) for i in range(0, len(prompts), args.batch)]
    warmup = batches[:1]
    tokens = sum(len(p) for p in prompts)
    work = Path(tempfile.mkdtemp(prefix="compat-bench-"))  # kept when a run fails, for its log
    module = GENERATOR.partition(":")[0]
    if args.patched:
        staged, _ = copy_patched(args.patched, work / "consumer", module)
    else:
        staged = stage("speculators==0.3.0", work / "consumer", module, "installed").root
    print(f"vLLM {vllm.__version__}; model {model.name} ({args.dtype}); {len(prompts)} prompts x {args.len} "
          f"tokens in batches of {args.batch}; best of {args.repeat}", flush=True)
    generating, saving = generator_seconds(model, staged, prompts, batches, warmup, args.dtype, args.repeat, work)
    figures = {
        "patched generator: generate() (3 layers captured)": generating,
        "patched generator: generate() and saving each sample": saving,
        "plain vLLM prefill, the same executor (MultiprocExecutor)": prefill_seconds(
            model, prompts, batches, warmup, args.dtype, args.repeat, work, "mp"),
        "plain vLLM prefill, vLLM's default executor at TP 1": prefill_seconds(
            model, prompts, batches, warmup, args.dtype, args.repeat, work, None),
        "HF transformers (output_hidden_states=True)": hf_seconds(
            model, prompts, batches, warmup, args.dtype, args.repeat),
    }
    shutil.rmtree(work, ignore_errors=True)
    rates = {}
    for name, seconds in figures.items():
        rates[name] = tokens / min(seconds)
        print(f"  {name:62} {rates[name]:10.0f} tokens/s  (passes: {', '.join(f'{s:.2f}' for s in seconds)} s)")
    gen, _, plain, default, hf = rates.values()
    print(f"  capture overhead (1 - generator / plain prefill on the same executor): {100 * (1 - gen / plain):+.1f}% "
          "(target within 10%)")
    print(f"  generator / plain prefill: {gen / plain:.2f}x (same executor), {gen / default:.2f}x (default executor); "
          f"generator / HF transformers: {gen / hf:.2f}x")


if __name__ == "__main__":
    main()
