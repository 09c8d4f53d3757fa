"""``python -m compat.extract``: audit, fix, run, validate. The consumer (speculators 0.3.0 by default), patched
by ``compat.fix`` for its whole range of vLLM builds, runs its own hidden-state generator on the installed
vLLM; the outputs are saved in its own layout and validated by the gate (HF reference on every sample, exact
layer values on the predictable model); ``--check`` adds the checks of ``compat.extract.checks``, each shown to
have met its condition on the engine, or ``not run``.

Exit codes: 0 the tensors are right (and every check passed or did not apply), 1 they are not (a check failed,
or varies with the batch beyond the dtype's bound, or the run crashed: the error and its traceback are in the
report), 2 the run could not be made (bad input).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from compat import child
from compat.audit.pipeline import DEFAULT_CONSUMER
from compat.cache import atomic_write_text
from compat.cli import guarded
from compat.errors import CompatError
from compat.extract import checks as consistency
from compat.extract import prompts as make
from compat.extract.progress import Bar
from compat.extract.verdict import predictable, validate
from compat.extract.workload import CHECKS, plan
from compat.models.builder import ARCHITECTURES, FAMILIES

GENERATOR = "speculators.data_generation.vllm_hidden_states_generator:VllmHiddenStatesGenerator"
ALL = "all"
NONE = "none"
"""``--checks none``: no check (with several families, whose default is ``realistic``)."""
CONTEXT = 1024
"""The context the engine gets by default (at most the model's): prompts of realistic lengths up to it average
well above a step's token budget over its sequence limit (8192 / 32 for speculators' generator)."""


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
    p.add_argument("--arch", default="llama",
                   help=f"the tiny model to build: one of {', '.join(ARCHITECTURES)}; several, comma-separated, or "
                        f"'{ALL}' (every family) each run on its own engine, with a table of what each gave "
                        "(default llama)")
    p.add_argument("--layer-ids", default="0,2,3", help="decoder layers to capture (default 0,2,3)")
    p.add_argument("--prompts", type=int, default=8, help="how many prompts to generate (default 8)")
    p.add_argument("--prompts-file", type=Path, help="JSONL of token-id lists instead of generated prompts")
    p.add_argument("--max-len", type=int, default=96, help="longest generated prompt (default 96)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help=f"the engine's context (default: the model's, at most {CONTEXT})")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    p.add_argument("--dtype", default="auto", help="auto (the consumer's own), float32, bfloat16, float16")
    p.add_argument("--reference-samples", type=int, default=0, help="samples recomputed by HF (default: all)")
    p.add_argument("--check", action="store_true", help="run every check too")
    p.add_argument("--checks", help=f"run these checks (comma-separated: {', '.join(CHECKS)}; or {NONE}); with "
                                    "several families, realistic unless this says otherwise")
    p.add_argument("--out", type=Path, help="where outputs and report.json go (default: a temporary directory)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for the engine run (default 1800)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--debug", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return guarded("compat.extract", args.debug, lambda: _extract(args))


def _model(args: argparse.Namespace, arch: str | None = None) -> Path:
    if args.model is not None:
        if not (args.model / "config.json").is_file():
            raise CompatError(f"--model {args.model}: no config.json there")
        return args.model
    from compat.confirm import tiny_model

    return tiny_model(arch or args.arch)


def _families_asked(args: argparse.Namespace) -> list[str] | None:
    """The families ``--arch`` names when it names several (``all``, or a comma-separated list); None for one."""
    names = [n.strip() for n in args.arch.split(",") if n.strip()]
    if names == [ALL]:
        return list(FAMILIES)
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown or not names:
        raise CompatError(f"--arch {args.arch}: no such architecture ({', '.join(unknown) or 'none named'}); "
                          f"choose from {', '.join(ARCHITECTURES)} or {ALL}")
    if args.model is not None and (len(names) > 1):
        raise CompatError("--model runs one model: give one --arch, or none")
    return names if len(names) > 1 else None


def _chosen(args: argparse.Namespace) -> tuple[str, ...]:
    """The checks asked for: all with ``--check``, or those ``--checks`` names (in the order of ``CHECKS``)."""
    if args.checks is None:
        return CHECKS if args.check else ()
    names = {n.strip() for n in args.checks.split(",") if n.strip()} - {NONE}
    unknown = sorted(names - set(CHECKS))
    if unknown:
        raise CompatError(f"--checks {', '.join(unknown)}: no such check (checks: {', '.join(CHECKS)})")
    return tuple(c for c in CHECKS if c in names)


def _engine_run(spec: dict, work: Path, env: dict, timeout: float) -> dict:
    """The engine child (``compat.extract.runner``) run to its end, its progress shown; its result, or why it
    has none."""
    spec_path, result_path = work / "spec.json", work / "result.json"
    spec_path.write_text(json.dumps(spec))
    total = sum(len(call) for engine in spec["engines"] for job in engine["jobs"] for call in job["calls"])
    with Bar(Path(spec["progress"]), total) as bar:
        ended = child.run([sys.executable, "-m", "compat.extract.runner", str(spec_path), str(result_path)],
                          env=env, timeout=timeout, log=work / "engine.log", watch=bar.update)
    if ended.timed_out or not result_path.exists():
        return {"error": f"the engine run {ended.describe()} without a result", "log": ended.tail()}
    result = json.loads(result_path.read_text())
    if "error" in result:
        result["log"] = ended.tail()
    return result


def _native(model: Path, work: Path, prompts: list[list[int]], indices: list[int], layer_ids: list[int],
            layers: int, dtype: str, context: int, env: dict, timeout: float) -> dict:
    """vLLM's own extraction of ``indices`` in one batched ``generate``, then each alone (how much the build's own
    path varies with the batch), or why it did not run."""
    captured = [k for k in dict.fromkeys(layer_ids) if k + 1 < layers]
    if not captured:
        return {"error": f"vLLM's extraction gives states entering layers 0..{layers - 1}, none of which is the "
                         "output of a captured layer"}
    directory = work / "checks" / "native"
    directory.mkdir(parents=True, exist_ok=True)
    listed = work / "checks" / "native-prompts.json"
    listed.write_text(json.dumps([prompts[i] for i in indices]))
    ended = child.run([sys.executable, "-m", "compat.extract.native", str(model), str(directory),
                       "--layer-ids", ",".join(str(k + 1) for k in captured), "--dtype", dtype,
                       "--prompts", str(listed), "--max-model-len", str(context), "--alone", str(len(indices))],
                      env=env, timeout=timeout, log=work / "native.log")
    if ended.returncode != 0:
        return {"error": consistency.root_cause(ended.tail(20000)) if not ended.timed_out else ended.describe()}
    return consistency.native_states(directory, indices, captured)


def _extract(args: argparse.Namespace) -> int:
    from compat.extract.stage import copy_patched, stage

    out = args.out or Path(tempfile.mkdtemp(prefix="compat-extract-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    staging: dict = {"notes": []}
    if args.patched:
        staged_root, notes = copy_patched(args.patched, out / "consumer", args.generator.partition(":")[0])
        staging["notes"] += notes
    else:
        staged = stage(args.consumer, out / "consumer", args.generator.partition(":")[0], args.vllm,
                       tuple(args.without), args.unpatched)
        staged_root = staged.root
        staging["notes"] += list(staged.notes)
        staging["fix"] = [{"fixer": p.fixer, "notes": p.notes} for p in staged.fix.plans]
    families = _families_asked(args)
    if families is not None:
        return _families(args, families, out, staged_root, staging)
    report = _run(args, _model(args), out, staged_root, staging, started)
    _print(report, out)
    return 0 if report["verdict"] == "pass" else 1


def _run(args: argparse.Namespace, model: Path, out: Path, staged_root: Path, staging: dict, started: float) -> dict:
    """One model through the staged consumer's generator, validated; the report (also ``out/report.json``)."""
    from compat.extract.stage import child_env

    layer_ids = [int(x) for x in args.layer_ids.split(",") if x.strip()]
    chosen = _chosen(args)
    config = json.loads((model / "config.json").read_text())
    vocab = int(config.get("vocab_size", 1000))
    layers = int(config.get("num_hidden_layers", 4))
    if predictable(model):
        vocab = min(vocab, 256 - layers - 2)  # exact in bfloat16
    context = args.max_model_len or min(int(config.get("max_position_embeddings", CONTEXT)), CONTEXT)
    max_len = min(args.max_len, context - 1)
    user = make.read_jsonl(args.prompts_file, vocab) if args.prompts_file else make.generated(
        args.prompts, vocab, max_len, seed=args.seed)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"model": str(model), "architecture": (config.get("architectures") or ["?"])[0],
                    "layer_ids": layer_ids, "prompts": len(user), "tp": args.tp, "dtype": args.dtype,
                    "max_model_len": context, "notes": list(staging["notes"])}
    if "fix" in staging:
        report["fix"] = staging["fix"]
    work = plan(user, args.batch_size, vocab, context, layer_ids, layers, out, args.seed, chosen)
    report["workload"] = work.sizes
    spec = {"generator": args.generator, "model": str(model), "max_model_len": context,
            "tensor_parallel_size": args.tp, "dtype": args.dtype, "prompts": work.prompts, "engines": work.engines,
            "progress": str(out / "progress.json")}
    env = child_env(staged_root, args.tp)
    result = _engine_run(spec, out, env, args.timeout)
    report["run"] = {k: v for k, v in result.items() if k != "log"}
    main_engine = result.get("engines", {}).get("main", {})
    crash = _crash(result)
    ok = crash is None
    dtype = args.dtype
    if ok:
        facts = main_engine["facts"]
        dtype = facts["engine_dtype"]
        samples = args.reference_samples or len(user)
        # The layer ids in the order the generator says its samples hold them (the metadata speculators writes).
        validation = validate(out / "main", model, facts["layer_ids"] or layer_ids, dtype, samples)
        report["gate"] = validation.gate.as_json()["summary"]
        report["gate_failures"] = [f.as_dict() for f in validation.gate.failing()][:20]
        report["exact"] = list(validation.exact) if validation.exact is not None else None
        ok = validation.ok
        if chosen:
            from compat.gate.recompute import HFReference

            native = _native(model, out, work.prompts, work.realistic, layer_ids, layers, dtype, context, env,
                             args.timeout) if "native" in chosen else None
            run = consistency.Run(result, work, dtype, HFReference(model).states, native)
            found = consistency.evaluate(run, chosen)
            report["checks"] = [c.as_dict() for c in found]
            ok = ok and all(c.state in (consistency.PASS, consistency.NOT_RUN) for c in found)
    if not ok and crash is None:
        # Wrong states: the capture's fault only if vLLM's own engine computes the model as HF does.
        from compat.extract import own

        compared = own.measure(model, [work.prompts[i] for i in (work.realistic or range(len(user)))], dtype,
                               context, out / "own", env, args.timeout)
        report["own"] = compared.as_dict() if isinstance(compared, own.OwnComparison) else {"error": compared}
    report["crash"] = {"error": crash[0], "traceback": crash[1]} if crash is not None else None
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["verdict"] = "pass" if ok else "fail"
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, default=str))
    return report


def _families(args: argparse.Namespace, families: list[str], out: Path, staged_root: Path, staging: dict) -> int:
    """Each family through the staged consumer on its own engine (the realistic check unless others are asked
    for), and a table of outcomes (``out/families.json``): exit 1 if any family's states are wrong while vLLM's own
    engine computes it as HF does."""
    from compat.extract.families import outcome, render

    if args.checks is None and not args.check:
        args.checks = "realistic"
    rows = []
    for family in families:
        started = time.perf_counter()
        report = _run(args, _model(args, family), out / family, staged_root, staging, started)
        rows.append(outcome(family, report))
        print(render([rows[-1]], header=False), flush=True)
    atomic_write_text(out / "families.json", json.dumps([r.as_dict() for r in rows], indent=2))
    print(f"compat.extract: {len(rows)} families; table: {out / 'families.json'}")
    print(render(rows))
    return 1 if any(r.failed for r in rows) else 0


def _crash(result: dict) -> tuple[str, str] | None:
    """The first error of the run: the child's, a generator that would not start, or a call that raised."""
    if "error" in result:
        return result["error"], result.get("traceback") or result.get("log") or ""
    main = result.get("engines", {}).get("main", {})
    if "start_error" in main:
        return main["start_error"], main.get("traceback", "")
    for call in main.get("jobs", {}).get("main", {}).get("calls", []):
        if call.get("error"):
            return call["error"], call.get("traceback") or ""
    return None


def _print(report: dict, out: Path) -> None:
    print(f"compat.extract: {report['verdict'].upper()} ({report['seconds']} s); report: {out / 'report.json'}")
    for note in report["notes"]:
        print(f"  note: {note}")
    crash = report.get("crash")
    if crash is not None:
        print(f"  the run crashed: {crash['error']}")
        print("  " + "\n  ".join(crash["traceback"].strip().splitlines()[-12:]))
        return
    engine = report["run"]["engines"]["main"]
    main = engine["jobs"]["main"]
    print(f"  engine start {engine['init_s']} s; {len(main['files'])} samples, {main['tokens']} tokens in "
          f"{main['generate_s']} s")
    gate = report["gate"]
    print(f"  gate: {gate['ok']} ok, {gate['broken']} broken, {gate['error']} error")
    for failure in report["gate_failures"][:5]:
        print(f"    {failure['probe']} {failure['consumer_location']}: {failure['message'][:200]}")
    if report["exact"] is not None:
        print(f"  exact layer values (predictable model): {'all right' if not report['exact'] else report['exact'][0]}")
    for check in report.get("checks", []):
        state = {"pass": "pass", "fail": "FAIL", "not run": "not run", "varies": "VARIES"}[check["state"]]
        print(f"  check {check['name']:13} {state}: {check['message']}")
    if "own" in report:
        print(f"  vLLM's own: {report['own'].get('message') or report['own'].get('error')}")


def run() -> None:
    sys.exit(main(sys.argv[1:]))
