"""Runtime confirmation: run the installed vLLM on a tiny model in child processes and observe what the
static probes predicted (reply shapes with tensor parallel 1 and 2, the execution protocol, block hashing,
model conventions, the start-up sequence). ``probes/confirm.py`` compares the two verdicts.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from compat.cache import cache_dir

DEFAULT_TIMEOUT_S = 300.0


def tiny_model(arch: str = "llama") -> Path:
    """A tiny random-weight model built once into the cache (``compat.models``)."""
    from compat import models

    directory = cache_dir() / "models" / f"{arch}-{hashlib.sha256(models.__file__.encode()).hexdigest()[:8]}"
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


def run_child(spec: dict, timeout: float = DEFAULT_TIMEOUT_S) -> dict:
    """Run one check in a child process; a crash, a timeout or a missing result is reported, not raised."""
    with tempfile.TemporaryDirectory(prefix="compat-confirm-") as tmp:
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "out.json")
        spec_path.write_text(json.dumps(spec))
        log = Path(tmp, "child.log")
        try:
            with log.open("w") as handle:
                proc = subprocess.run([sys.executable, "-m", "compat.confirm.engine", str(spec_path), str(out_path)],
                                      stdout=handle, stderr=subprocess.STDOUT, env=_env(spec.get("tp", 1)),
                                      timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"TimeoutExpired: the {spec['check']} check ran past {timeout:.0f} s",
                    "traceback": log.read_text()[-4000:]}
        if not out_path.exists():
            return {"error": f"the {spec['check']} check exited with status {proc.returncode} without a result",
                    "traceback": log.read_text()[-4000:]}
        result = json.loads(out_path.read_text())
        if "error" in result:
            result["log"] = log.read_text()[-4000:]
        return result


# Architectures the tiny-model builder makes, by the registry name vLLM dispatches on.
TINY = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "DeepseekV3ForCausalLM": "deepseek_v3"}


def observe(timeout: float = DEFAULT_TIMEOUT_S, tensor_parallel: tuple[int, ...] = (1, 2),
            architectures: tuple[str, ...] = ("LlamaForCausalLM",)) -> dict:
    """Everything the confirmation needs from real engines, one child process per engine shape."""
    model = tiny_model("llama")
    observed: dict = {f"replies_tp{tp}": run_child({"check": "replies", "model": str(model), "tp": tp}, timeout)
                      for tp in tensor_parallel}
    observed["engine"] = run_child({"check": "engine", "model": str(model)}, timeout)
    observed["models"] = {"LlamaForCausalLM": observed["engine"]}
    for arch in architectures:
        if arch in TINY and arch not in observed["models"]:
            observed["models"][arch] = run_child({"check": "model", "model": str(tiny_model(TINY[arch]))}, timeout)
    return observed
