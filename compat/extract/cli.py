"""``python -m compat.extract``: audit, fix, run, validate. The consumer (speculators 0.3.0 by default), patched
by ``compat.fix`` for its whole range of vLLM builds, runs its own hidden-state generator on the installed
vLLM; the outputs are saved in its own layout and validated by the gate (HF reference on every sample, exact
layer values on the predictable model); ``--check`` adds the consistency checks.

Exit codes: 0 the tensors are right (and every check passed), 1 they are not (or a check failed, or the run
crashed: the error and its traceback are in the report), 2 the run could not be made (bad input).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compat.audit.pipeline import DEFAULT_CONSUMER
from compat.cache import atomic_write_text
from compat.cli import guarded
from compat.errors import CompatError
from compat.extract import checks as consistency
from compat.extract import prompts as make
from compat.extract.progress import follow
from compat.extract.verdict import predictable, validate

GENERATOR = "speculators.data_generation.vllm_hidden_states_generator:VllmHiddenStatesGenerator"
ARCHS = ("llama", "qwen3", "deepseek_v3", "predictable")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.extract", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--consumer", default=DEFAULT_CONSUMER)
    p.add_argument("--generator", default=GENERATOR, help=f"module:Class of the consumer's generator ({GENERATOR})")
    p.add_argument("--vllm", default=None, help="the range the patch is generated for (default: from the "
                                                "consumer's pin to the latest release)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--patched", type=Path, help="use this patched copy (compat.fix --apply) as it is")
    how.add_argument("--unpatched", action="store_true",
                     help="the consumer as released, with only the platform fixer (the baseline)")
    p.add_argument("--without", action="append", default=[], metavar="FIXER", help="leave a fixer out")
    p.add_argument("--model", type=Path, help="a model directory (default: a tiny model built on the spot)")
    p.add_argument("--arch", choices=ARCHS, default="llama", help="the tiny model to build (default llama)")
    p.add_argument("--layer-ids", default="0,2,3", help="decoder layers to capture (default 0,2,3)")
    p.add_argument("--prompts", type=int, default=8, help="how many prompts to generate (default 8)")
    p.add_argument("--prompts-file", type=Path, help="JSONL of token-id lists instead of generated prompts")
    p.add_argument("--max-len", type=int, default=96, help="longest generated prompt (default 96)")
    p.add_argument("--max-model-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    p.add_argument("--dtype", default="auto", help="auto (the consumer's own), float32, bfloat16, float16")
    p.add_argument("--reference-samples", type=int, default=0, help="samples recomputed by HF (default: all)")
    p.add_argument("--check", action="store_true", help="run the consistency checks too")
    p.add_argument("--out", type=Path, help="where outputs and report.json go (default: a temporary directory)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for the engine run (default 1800)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--debug", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return guarded("compat.extract", args.debug, lambda: _extract(args))


def _model(args: argparse.Namespace) -> Path:
    if args.model is not None:
        if not (args.model / "config.json").is_file():
            raise CompatError(f"--model {args.model}: no config.json there")
        return args.model
    from compat.confirm import tiny_model

    return tiny_model(args.arch)


def _run_child(spec: dict, work: Path, env: dict, timeout: float) -> dict:
    spec_path, result_path, log = work / "spec.json", work / "result.json", work / "engine.log"
    spec_path.write_text(json.dumps(spec))
    total = sum(len(batch) for job in spec["jobs"] for batch in job["batches"])
    with log.open("w") as handle:
        child = subprocess.Popen([sys.executable, "-m", "compat.extract.runner", str(spec_path), str(result_path)],
                                 stdout=handle, stderr=subprocess.STDOUT, env=env)
        try:
            follow(child, Path(spec["progress"]), total, timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return {"error": f"TimeoutExpired: the engine run passed {timeout:.0f} s", "log": log.read_text()[-4000:]}
    if not result_path.exists():
        return {"error": "the engine run ended without a result", "log": log.read_text()[-4000:]}
    result = json.loads(result_path.read_text())
    if "error" in result:
        result["log"] = log.read_text()[-4000:]
    return result


def _extract(args: argparse.Namespace) -> int:
    from compat.extract.stage import child_env, copy_patched, stage

    layer_ids = [int(x) for x in args.layer_ids.split(",") if x.strip()]
    model = _model(args)
    config = json.loads((model / "config.json").read_text())
    vocab = int(config.get("vocab_size", 1000))
    if predictable(model):
        vocab = min(vocab, 256 - int(config.get("num_hidden_layers", 4)) - 2)  # exact in bfloat16
    max_len = min(args.max_len, args.max_model_len - 1)
    prompts = make.read_jsonl(args.prompts_file, vocab) if args.prompts_file else make.generated(
        args.prompts, vocab, max_len, seed=args.seed)
    out = args.out or Path(tempfile.mkdtemp(prefix="compat-extract-"))
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"model": str(model), "layer_ids": layer_ids, "prompts": len(prompts), "tp": args.tp,
                    "dtype": args.dtype, "notes": []}
    started = time.perf_counter()
    if args.patched:
        staged_root, notes = copy_patched(args.patched, out / "consumer", args.generator.partition(":")[0])
        report["notes"] += notes
    else:
        staged = stage(args.consumer, out / "consumer", args.generator.partition(":")[0], args.vllm,
                       tuple(args.without), args.unpatched)
        staged_root = staged.root
        report["notes"] += list(staged.notes)
        report["fix"] = [{"fixer": p.fixer, "notes": p.notes} for p in staged.fix.plans]
    all_prompts, jobs = prompts, [{"name": "main", "out": str(out / "main"),
                                   "batches": [list(range(i, min(i + args.batch_size, len(prompts))))
                                               for i in range(0, len(prompts), args.batch_size)]}]
    if args.check:
        all_prompts, more = consistency.jobs(prompts, vocab, max_len, args.max_model_len, out, args.seed)
        jobs += more
    spec = {"generator": args.generator, "model": str(model), "layer_ids": layer_ids,
            "max_model_len": args.max_model_len, "tensor_parallel_size": args.tp, "dtype": args.dtype,
            "prompts": all_prompts, "jobs": jobs, "progress": str(out / "progress.json")}
    env = child_env(staged_root, args.tp)
    result = _run_child(spec, out, env, args.timeout)
    report["run"] = {k: v for k, v in result.items() if k != "log"}
    ok = "error" not in result
    if ok:
        import torch

        first = torch.load(out / "main" / "data_0.pt", weights_only=True)
        dtype = result.get("engine_dtype") or str(first["hidden_states"][0].dtype).removeprefix("torch.")
        samples = args.reference_samples or len(prompts)
        validation = validate(out / "main", model, layer_ids, dtype, samples)
        report["gate"] = validation.gate.as_json()["summary"]
        report["gate_failures"] = [f.as_dict() for f in validation.gate.failing()][:20]
        report["exact"] = list(validation.exact) if validation.exact is not None else None
        ok = validation.ok
        if args.check:
            found = consistency.evaluate(result, jobs[1:], all_prompts, dtype)
            stored = [(f["prompt"], torch.load(out / "main" / f["file"], weights_only=True))
                      for f in result["jobs"]["main"]["files"]]
            found.append(consistency.native(model, out, stored, all_prompts, layer_ids, dtype, env, args.timeout))
            report["checks"] = [{"name": c.name, "ok": c.ok, "message": c.message} for c in found]
            ok = ok and all(c.ok is not False for c in found)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["verdict"] = "pass" if ok else "fail"
    atomic_write_text(out / "report.json", json.dumps(report, indent=2))
    _print(report, result, out)
    return 0 if ok else 1


def _print(report: dict, result: dict, out: Path) -> None:
    print(f"compat.extract: {report['verdict'].upper()} ({report['seconds']} s); report: {out / 'report.json'}")
    for note in report["notes"]:
        print(f"  note: {note}")
    if "error" in result:
        print(f"  the run crashed: {result['error']}")
        print("  " + "\n  ".join((result.get("traceback") or result.get("log") or "").strip().splitlines()[-12:]))
        return
    main = result["jobs"]["main"]
    print(f"  engine start {result['init_s']} s; {len(main['files'])} samples, {main['tokens']} tokens in "
          f"{main['seconds']} s")
    gate = report["gate"]
    print(f"  gate: {gate['ok']} ok, {gate['broken']} broken, {gate['error']} error")
    for failure in report["gate_failures"][:5]:
        print(f"    {failure['probe']} {failure['consumer_location']}: {failure['message'][:200]}")
    if report["exact"] is not None:
        print(f"  exact layer values (predictable model): {'all right' if not report['exact'] else report['exact'][0]}")
    for check in report.get("checks", []):
        state = {True: "pass", False: "FAIL", None: "not run"}[check["ok"]]
        print(f"  check {check['name']:10} {state}: {check['message']}")


def run() -> None:
    sys.exit(main())
