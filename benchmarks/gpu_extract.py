"""Hidden-state extraction throughput on one GPU: speculators 0.3.0's generator as ``compat.fix`` patches it,
beside plain vLLM prefill (the ceiling), HF transformers and vLLM's own extraction, on the same weights and
prompts; then the gate, with the HF reference, on what the patched generator saved.

    python benchmarks/gpu_extract.py --patched DIR [--shape llama-8b] [--prompts 256] [--out reports/gpu]

Each path runs in its own process (``benchmarks/gpu_paths.py``, ``compat.extract.native``,
``compat.extract.runner``), so each starts with the device free; each figure is tokens over the seconds of the
timed part, after its engine or model is up and warmed up:

- ``plain``: ``LLM.generate`` with ``max_tokens=1`` over every prompt, the generator's engine settings (eager,
  prefix caching off, its token budget and sequence limit);
- ``hf``: transformers' forward, ``output_hidden_states=True``, batches of about 16k padded tokens, the captured
  layers of every token kept on the device;
- ``native``: vLLM's ``extract_hidden_states`` with ``ExampleHiddenStatesConnector`` (one safetensors file per
  prompt), until the last file is written;
- ``patched``: the generator, in calls of ``--batch`` prompts: ``memory`` (each call's samples returned as CPU
  tensors, as ``generate`` returns them), ``saved`` (each sample also saved as speculators' ``data_<n>.pt``, from
  writer threads while the next call runs, until the last file is written), and ``pickled`` (the first
  ``--pickled`` prompts with the captured states pickled through vLLM's message queue, as the patch did before
  CUDA IPC); each split by the shim's functions (the profile).

Then ``python -m compat.gate`` on the saved files (``--values``, and ``--reference`` on ``--gate-samples``
samples in float32 on the device), and the dtype's own deviation measured the same way (HF in the run's dtype
against HF float32). Prints a table; writes ``gpu-<shape>.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compat.cache import atomic_write_text  # noqa: E402
from compat.extract import prompts as make  # noqa: E402
from compat.extract.stage import child_env, copy_patched  # noqa: E402

GENERATOR = "speculators.data_generation.vllm_hidden_states_generator:VllmHiddenStatesGenerator"
SHIM = "speculators._vllm_compat"
PATHS = ("plain", "hf", "native", "patched", "gate", "baseline", "transfer")


def _child(args: list[str], env: dict, log: Path, timeout: int) -> str | None:
    """Run one path; None when it exited 0, else why not (the log's last lines)."""
    began = time.perf_counter()
    with log.open("w") as handle:
        try:
            proc = subprocess.run([sys.executable, *args], stdout=handle, stderr=subprocess.STDOUT, env=env,
                                  timeout=timeout, check=False, start_new_session=True)
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout} s; log {log}"
    print(f"    ({args[1]}: {time.perf_counter() - began:.0f} s)", flush=True)
    if proc.returncode != 0:
        lines = log.read_text(errors="replace").strip().splitlines()
        return f"exit {proc.returncode}: {lines[-1][:300] if lines else 'no output'} (log {log})"
    return None


def _path(name: str, spec: dict, work: Path, env: dict, timeout: int) -> dict:
    (work / f"{name}.json").write_text(json.dumps(spec))
    failed = _child([str(ROOT / "benchmarks" / "gpu_paths.py"), name, str(work / f"{name}.json"),
                     str(work / f"{name}-result.json")], env, work / f"{name}.log", timeout)
    return {"error": failed} if failed else json.loads((work / f"{name}-result.json").read_text())


def _split(calls: list[dict]) -> dict:
    """The scheduler's own account (``compat.extract.runner.Watch``): prompts split across steps, and steps."""
    split, steps = set(), 0
    for number, call in enumerate(calls):
        for step in call.get("steps", []):
            steps += 1
            for index, _start, count, total in step["chunks"]:
                if count < total:
                    split.add((number, index))
    return {"prompts_split": len(split), "steps": steps}


def _patched(args, model: Path, prompts: list[list[int]], work: Path, staged: Path, timeout: int) -> dict:
    batches = [list(range(i, min(i + args.batch, len(prompts)))) for i in range(0, len(prompts), args.batch)]
    pickled = [b for b in batches if b[0] < args.pickled]
    # Warm up on a whole call: the first call of its size pays for allocations and page faults in the worker,
    # the IPC mappings and the host memory (measured on the H200: 9.5 s against 7.9 s for the same calls after).
    jobs = [{"name": "warmup", "calls": [batches[0]]},
            {"name": "memory", "calls": batches},
            {"name": "saved", "calls": batches, "out": str(work / "saved")}]
    if pickled:
        jobs.append({"name": "pickled", "calls": pickled, "set": {f"{SHIM}._SHARE_CUDA": False}})
    spec = {"generator": GENERATOR, "model": str(model), "max_model_len": args.max_model_len,
            "tensor_parallel_size": args.tp, "dtype": args.dtype, "prompts": prompts, "profile": SHIM,
            "engines": [{"name": "bench", "layer_ids": args.layer_ids, "jobs": jobs}]}
    (work / "patched.json").write_text(json.dumps(spec))
    failed = _child(["-m", "compat.extract.runner", str(work / "patched.json"), str(work / "patched-result.json")],
                    child_env(staged, args.tp), work / "patched.log", timeout)
    if failed:
        return {"error": failed}
    result = json.loads((work / "patched-result.json").read_text())
    engine = result.get("engines", {}).get("bench", {})
    error = result.get("error") or engine.get("start_error")
    if error:
        return {"error": error, "traceback": result.get("traceback") or engine.get("traceback")}
    out = {"init_s": engine["init_s"], "facts": engine["facts"]}
    for name, job in engine["jobs"].items():
        errors = [c["error"] for c in job["calls"] if c.get("error")]
        out[name] = {"tokens": job["tokens"], "seconds": job["seconds"], "generate_s": job["generate_s"],
                     "profile": job["profile"], "calls": len(job["calls"]), **_split(job["calls"]),
                     **({"error": errors[0]} if errors else {})}
    return out


def _gate(args, model: Path, work: Path, env: dict, timeout: int) -> dict:
    report = work / "gate.json"
    failed = _child(["-m", "compat.gate", str(work / "saved"), "--values", "--layer-ids",
                     ",".join(map(str, args.layer_ids)), "--reference", str(model), "--reference-samples",
                     str(args.gate_samples), "--reference-device", "auto", "--format", "json", "--output",
                     str(report)], env, work / "gate.log", timeout)
    if not report.exists():
        return {"error": failed or "the gate wrote no report"}
    data = json.loads(report.read_text())
    reference = data.get("reference") or {}
    worst = max((m["rel"] for sample in reference.get("samples", []) for m in sample["layers"]), default=None)
    summary = data["summary"]
    broken = [f for f in data["findings"] if f.get("status") not in ("ok", None)]
    return {"verdict": "PASS" if summary["exit_code"] == 0 else f"FAIL (exit {summary['exit_code']})",
            "summary": {k: summary[k] for k in ("files", "samples", "tokens", "ok", "broken", "error",
                                                "failures_by_rule")},
            "reference": {k: reference.get(k) for k in ("recomputed", "candidates", "numbering", "pairing")},
            "largest_rel": worst, "samples": reference.get("samples"), "not_ok": broken[:10]}


def _rate(result: dict, tokens_key: str = "tokens", seconds_key: str = "seconds") -> float | None:
    if not isinstance(result, dict) or result.get("error") or not result.get(seconds_key):
        return None
    return result[tokens_key] / result[seconds_key]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--patched", type=Path, required=True, help="the patched copy (compat.fix --apply)")
    p.add_argument("--shape", default="llama-8b", help="llama-8b, deepseek-v3-6l, or tiny (a CPU try)")
    p.add_argument("--prompts", type=int, default=256)
    p.add_argument("--min-len", type=int, default=256)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--batch", type=int, default=32, help="prompts per generate() call")
    p.add_argument("--layer-ids", default="2,16,29,31")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pickled", type=int, default=32, help="prompts to run with the reply pickled (0: none)")
    p.add_argument("--gate-samples", type=int, default=4)
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--work", type=Path, default=Path("/tmp/compat-gpu"), help="models and outputs (large)")
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "gpu")
    p.add_argument("--timeout", type=int, default=420, help="seconds each path may take")
    args = p.parse_args()
    args.layer_ids = [int(x) for x in args.layer_ids.split(",")]
    paths = args.paths.split(",")
    work = args.work / args.shape
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    env = child_env(work, args.tp)
    model = work / "model"
    results: dict = {"date": time.strftime("%Y-%m-%d"), "shape": args.shape, "dtype": args.dtype,
                     "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]), "paths": {}}
    report = args.out / f"gpu-{args.shape}.json"

    def save() -> None:
        for result in results["paths"].values():
            result.setdefault("measured", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        for name in ("gate", "baseline", "transfer"):
            if isinstance(results.get(name), dict):
                results[name].setdefault("measured", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        atomic_write_text(report, json.dumps(results, indent=2, default=str))

    if not (model / "config.json").exists():
        print(f"building {args.shape} ...", flush=True)
        results["build"] = _path("build", {"shape": args.shape, "model": str(model), "dtype": args.dtype}, work, env,
                                 args.timeout)
        if results["build"].get("error"):
            save()
            sys.exit(f"gpu_extract: building the model failed: {results['build']['error']}")
    config = json.loads((model / "config.json").read_text())
    prompts = make.generated(args.prompts, config["vocab_size"], args.max_len, seed=0, min_len=args.min_len)
    tokens = sum(len(x) for x in prompts)
    if report.exists():  # an earlier run of other paths on the same prompts: keep its figures
        earlier = json.loads(report.read_text())
        if earlier.get("tokens") == tokens and earlier.get("layer_ids") == args.layer_ids:
            results["paths"] = earlier.get("paths", {})
            results.update({k: earlier[k] for k in ("gate", "baseline", "build") if k in earlier})
    results.update(prompts=len(prompts), tokens=tokens, layer_ids=args.layer_ids, batch=args.batch,
                   model={k: config.get(k) for k in ("model_type", "hidden_size", "num_hidden_layers",
                                                     "n_routed_experts", "num_experts_per_tok", "kv_lora_rank",
                                                     "vocab_size")})
    try:
        import vllm
        results["vllm"] = vllm.__version__
    except ImportError:
        results["vllm"] = None
    print(f"{args.shape} ({args.dtype}), vLLM {results['vllm']}: {len(prompts)} prompts, {tokens} tokens",
          flush=True)
    shutil.rmtree(work / "consumer", ignore_errors=True)
    staged, _ = copy_patched(args.patched, work / "consumer", GENERATOR.partition(":")[0])
    common = {"model": str(model), "dtype": args.dtype, "prompts": prompts, "layer_ids": args.layer_ids,
              "max_model_len": args.max_model_len, "budget": max(8192, args.max_model_len), "max_num_seqs": 32}
    if "plain" in paths:
        results["paths"]["plain"] = _path("prefill", common, work, env, args.timeout)
        save()
    if "hf" in paths:
        results["paths"]["hf"] = _path("hf", common, work, env, args.timeout)
        save()
    if "native" in paths:
        (work / "native-prompts.json").write_text(json.dumps(prompts))
        shutil.rmtree(work / "native", ignore_errors=True)
        failed = _child(["-m", "compat.extract.native", str(model), str(work / "native"), "--layer-ids",
                         ",".join(map(str, args.layer_ids)), "--dtype", args.dtype, "--prompts",
                         str(work / "native-prompts.json"), "--max-num-batched-tokens", str(common["budget"]),
                         "--max-model-len", str(args.max_model_len), "--seconds", str(work / "native-seconds.json")],
                        env, work / "native.log", args.timeout)
        results["paths"]["native"] = {"error": failed} if failed else json.loads(
            (work / "native-seconds.json").read_text())
        if not failed:
            results["paths"]["native"]["bytes"] = sum(f.stat().st_size for f in (work / "native").rglob("*")
                                                      if f.is_file())
        shutil.rmtree(work / "native", ignore_errors=True)
        save()
    if "patched" in paths:
        shutil.rmtree(work / "saved", ignore_errors=True)
        results["paths"]["patched"] = _patched(args, model, prompts, work, staged, args.timeout)
        save()
    if "gate" in paths and (work / "saved").exists():
        results["gate"] = _gate(args, model, work, env, args.timeout)
        save()
    if "baseline" in paths:
        step = max(1, len(prompts) // max(1, args.gate_samples))
        results["baseline"] = _path("baseline", {**common, "prompts": prompts[::step][:args.gate_samples]}, work,
                                    env, args.timeout)
        save()
    if "transfer" in paths:
        rows = sum(len(x) for x in prompts[:args.batch])
        results["transfer"] = _path("transfer", {**common, "prompts": [], "rows": rows, "batch": args.batch,
                                                 "hidden": config["hidden_size"]}, work, env, args.timeout)
        save()
    shutil.rmtree(work / "saved", ignore_errors=True)
    _table(results)
    save()
    print(f"figures: {report}")


def _table(results: dict) -> None:
    paths = results["paths"]
    plain = _rate(paths.get("plain", {}))
    hf = _rate(paths.get("hf", {}))
    rows = [("plain vLLM prefill (the ceiling)", paths.get("plain", {}), "tokens", "seconds"),
            ("HF transformers, output_hidden_states", paths.get("hf", {}), "tokens", "seconds"),
            ("vLLM extract_hidden_states + connector (to disk)", paths.get("native", {}), "tokens", "seconds")]
    patched = paths.get("patched", {})
    for job, label, seconds in (("memory", "patched generator, in memory, first pass", "seconds"),
                                ("saved", "patched generator, in memory, second pass (generate() of the saving "
                                          "pass)", "generate_s"),
                                ("saved", "patched generator, saving data_<n>.pt", "seconds"),
                                ("pickled", "patched generator, reply pickled (before)", "seconds")):
        if job in patched:
            rows.append((label, patched[job], "tokens", seconds))
    print("\n| path | tokens/s | / plain prefill | / HF |\n|---|---|---|---|")
    for label, result, tokens_key, seconds_key in rows:
        rate = _rate(result, tokens_key, seconds_key)
        if rate is None:
            print(f"| {label} | {result.get('error', 'not run')[:120] if result else 'not run'} | | |")
            continue
        print(f"| {label} | {rate:,.0f} | {rate / plain:.2f} |" if plain else f"| {label} | {rate:,.0f} | |",
              f" {rate / hf:.2f} |" if hf else " |")
    if patched.get("error"):
        print(f"patched generator failed: {patched['error']}")
    for job in ("memory", "saved", "pickled"):
        if job in patched:
            j = patched[job]
            print(f"  {job}: {j['calls']} calls, {j['steps']} steps, {j['prompts_split']} prompts split across steps; "
                  f"generate {j['generate_s']} s of {j['seconds']} s; profile {j['profile']}"
                  + (f"; ERROR {j['error']}" if j.get("error") else ""))
    gate = results.get("gate")
    if gate:
        print(f"  gate: {gate.get('verdict') or gate.get('error')}; largest relative error against HF float32 "
              f"{gate.get('largest_rel')}; {gate.get('summary')}")
    moved = results.get("transfer")
    if moved:
        print(f"  one call's states to the host ({moved.get('bytes')} bytes), seconds by way: "
              + ", ".join(f"{k} {v:.4f}" for k, v in moved.items() if isinstance(v, float)) + (
                  f" {moved['error']}" if moved.get("error") else ""))
    base = results.get("baseline")
    if base:
        print(f"  the dtype's own deviation (HF {results['dtype']} against HF float32): "
              f"{base.get('max_rel', base.get('error'))}")


if __name__ == "__main__":
    main()
