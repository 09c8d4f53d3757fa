"""Everything the runtime confirmation observes on real engines: one child process per engine shape."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from compat.confirm.checkpoints import TINY, dtypes_for, tiny_model
from compat.confirm.checks import DEFAULT_TIMEOUT_S, check_in_dtypes, run_child
from compat.confirm.progress import Progress


def observe(timeout: float = DEFAULT_TIMEOUT_S, tensor_parallel: tuple[int, ...] = (1, 2),
            architectures: tuple[str, ...] = ("LlamaForCausalLM",), *,
            tiny_model: Callable[[str], Path] = tiny_model,
            run_child: Callable[[dict, float, str], dict] = run_child) -> dict:
    """Everything the confirmation needs from real engines, one child process per engine shape (``tiny_model``
    builds a model, ``run_child`` runs one check: a test passes stand-ins)."""
    model = tiny_model("llama")
    extra = [arch for arch in dict.fromkeys(architectures) if arch in TINY and arch != "LlamaForCausalLM"]
    progress = Progress(len(tensor_parallel) + 1 + len(extra))

    def check(label: str, name: str, directory: Path, **extra) -> dict:
        progress.starting(label)
        started = time.perf_counter()
        result = check_in_dtypes({"check": name, "model": str(directory), **extra}, dtypes_for(directory), timeout,
                                 run_child=run_child)
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
