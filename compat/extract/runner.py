"""Runs inside a child process with the staged consumer and vLLM importable: build the consumer's generator
once, run every job's batches through it, and save each sample in the consumer's own layout.

    python -m compat.extract.runner SPEC.json RESULT.json

SPEC: ``generator`` (``module:Class``), ``model``, ``layer_ids``, ``max_model_len``, ``tensor_parallel_size``,
``dtype`` (``auto`` keeps the consumer's own), ``prompts`` (token-id lists), ``progress`` (optional: a file
rewritten after each batch with ``{"job", "done"}``, the samples saved so far) and ``jobs``: ``{"name", "batches":
[[prompt index, ...], ...], "out"}``. Each sample is saved as ``out/data_<n>.pt`` (n counts the job's samples
in order), ``{"input_ids", "hidden_states": [per layer], "loss_mask"}``, the loss mask all ones (the prompts
carry no chat roles). RESULT gets timings (each job's ``seconds``, of which ``generate_s`` in the generator)
and the saved files, or the error with its traceback.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from compat.cache import atomic_write_text


def _force_dtype(module: Any, dtype: str) -> None:
    """The consumer builds ``ModelConfig(dtype="auto")`` itself; the run's ``--dtype`` replaces that value."""
    original = getattr(module, "ModelConfig", None)
    if original is None:
        raise RuntimeError(f"{module.__name__} builds no ModelConfig; --dtype cannot be applied")

    def model_config(*args, **kwargs):
        kwargs["dtype"] = dtype
        return original(*args, **kwargs)

    module.ModelConfig = model_config


def _save(sample: dict, path: Path) -> None:
    import torch

    record = dict(sample)
    if record.get("loss_mask") is None:
        record["loss_mask"] = torch.ones(len(record["input_ids"]), dtype=torch.long)
    tmp = path.with_suffix(".tmp")
    torch.save(record, tmp)
    tmp.replace(path)


def run(spec: dict) -> dict:
    module_name, _, class_name = spec["generator"].partition(":")
    module = importlib.import_module(module_name)
    if spec.get("dtype", "auto") != "auto":
        _force_dtype(module, spec["dtype"])
    start = time.perf_counter()
    generator = getattr(module, class_name)(spec["model"], layer_ids=spec["layer_ids"],
                                            max_model_len=spec["max_model_len"],
                                            tensor_parallel_size=spec["tensor_parallel_size"])
    result: dict[str, Any] = {"init_s": round(time.perf_counter() - start, 2), "jobs": {}}
    config = getattr(generator, "vllm_config", None)
    if config is not None:
        result["engine_dtype"] = str(config.model_config.dtype).removeprefix("torch.")
    prompts = spec["prompts"]
    progress = Path(spec["progress"]) if spec.get("progress") else None
    done = 0
    for job in spec["jobs"]:
        out = Path(job["out"])
        out.mkdir(parents=True, exist_ok=True)
        files, tokens, start, generating = [], 0, time.perf_counter(), 0.0
        for batch in job["batches"]:
            began = time.perf_counter()
            samples = generator.generate([prompts[i] for i in batch])
            generating += time.perf_counter() - began
            if len(samples) != len(batch):
                raise RuntimeError(f"job {job['name']}: {len(batch)} prompts gave {len(samples)} samples")
            for index, sample in zip(batch, samples):
                path = out / f"data_{len(files)}.pt"
                _save(sample, path)
                files.append({"file": path.name, "prompt": index})
                tokens += len(prompts[index])
            done += len(batch)
            if progress is not None:
                atomic_write_text(progress, json.dumps({"job": job["name"], "done": done}))
        result["jobs"][job["name"]] = {"files": files, "tokens": tokens,
                                       "seconds": round(time.perf_counter() - start, 3),
                                       "generate_s": round(generating, 3)}
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = run(spec)
    except BaseException as exc:  # noqa: BLE001 - reported with its traceback to the parent
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    atomic_write_text(Path(argv[1]), json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
