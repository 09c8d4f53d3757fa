"""Runs inside a child process with the staged consumer and vLLM importable: build the consumer's generator for each
engine of the spec, run its jobs' calls, save each sample in the consumer's own layout, and record what the engine
itself did in each call (the evidence the checks need).

    python -m compat.extract.runner SPEC.json RESULT.json

SPEC: ``generator`` (``module:Class``), ``model``, ``max_model_len``, ``tensor_parallel_size``, ``dtype`` (``auto``
keeps the consumer's own), ``prompts`` (token-id lists), ``progress`` (optional: a file rewritten after each call
with ``{"job", "done"}``) and ``engines``: ``{"name", "layer_ids", "overrides": {"SchedulerConfig": {...}, ...},
"jobs": [...]}``. ``overrides`` are keywords added to the consumer's own calls of those config classes (a KV cache
made small on purpose), where the running build's class takes them. A job is ``{"name", "calls": [[prompt index,
...], ...], "out"}`` (``out``: where samples are saved, ``data_<n>.pt`` in call order), with ``"expect": "error"``
for calls that must raise, ``"fault": k`` to make decoder layer ``k`` raise during its first call (``"poison": k``:
put NaN into its output), ``"set": {"module.attribute": value}`` for switches held during the job, and ``"relabel":
[ids]`` for the generator's ``layer_ids`` changed after it was built, for the job (as a user who sets
``generator.layer_ids`` would). Samples are written from threads (``Writer``) while the next call runs; a job's
``seconds`` ends once all are written. ``profile`` (optional: the shim's module) splits each job's time by the shim
functions in ``PROFILED``. Each sample is ``{"input_ids", "hidden_states": [per layer], "loss_mask"}`` (the loss
mask all ones: the prompts carry no chat roles).

The evidence comes from the engine, not from the consumer: the scheduler's own output of every step (which requests
it scheduled, how many tokens of each, from which position: a prompt split across steps, a preempted request
computed again from its start, a step at the sequence limit), how many requests the scheduler and the workers still
hold after each call, and the warnings the call emitted. RESULT gets it with timings (each job's ``seconds``, of
which ``generate_s`` in the generator), the saved files, and any error with its traceback.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from compat.cache import atomic_write_text

FAULT = "compat.extract: a fault injected into decoder layer"
PROFILED = ("begin_call", "run_steps", "collective_rpc", "by_request", "truncated")
"""The shim's functions a call's time is split by (spec ``profile``: the shim's module)."""


def _override(module: Any, name: str, extra: dict) -> list[str]:
    """Add ``extra`` keywords to the consumer's calls of ``module.<name>``, one of ``vllm.config``'s classes
    (those the running build's class takes: a key it does not have is left out, and the evidence says which were
    applied); the keywords applied, as ``name.key=value``."""
    original = getattr(module, name, None)
    if original is None:
        raise RuntimeError(f"{module.__name__} builds no {name}; its overrides cannot be applied")
    params = inspect.signature(getattr(importlib.import_module("vllm.config"), name)).parameters
    taken = {k: v for k, v in extra.items() if k in params}

    def made(*args, **kwargs):
        kwargs.update(taken)
        return original(*args, **kwargs)

    setattr(module, name, made)
    return [f"{name}.{k}={v!r}" for k, v in taken.items()]


def _save(sample: dict, path: Path) -> None:
    import torch

    record = dict(sample)
    if record.get("loss_mask") is None:
        record["loss_mask"] = torch.ones(len(record["input_ids"]), dtype=torch.long)
    tmp = path.with_suffix(".tmp")
    torch.save(record, tmp)
    tmp.replace(path)


class Writer:
    """Saves samples from threads, so that writing one call's samples overlaps the next call's work on the engine
    (``torch.save`` writes with the GIL released). ``wait()`` blocks until every file is written and raises the
    first error a write met."""

    def __init__(self, threads: int = 4) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="compat-writer")
        self._pending: list = []

    def save(self, sample: dict, path: Path) -> None:
        self._pending.append(self._pool.submit(_save, sample, path))

    def wait(self) -> None:
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


class Profile:
    """Seconds spent in named functions of a module (the shim's step loop, reply and reordering), per job: where
    a call's time goes. Installed by wrapping the module's attributes, which the consumer looks up at each call."""

    def __init__(self, module_name: str | None, names: tuple[str, ...]) -> None:
        self.seconds: dict[str, float] = {}
        self._restore: list[tuple[Any, str, Any]] = []
        if not module_name:
            return
        module = importlib.import_module(module_name)
        for name in names:
            function = getattr(module, name, None)
            if callable(function):
                setattr(module, name, self._timed(name, function))
                self._restore.append((module, name, function))

    def _timed(self, name: str, function: Any) -> Any:
        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - began

        return timed

    def take(self) -> dict[str, float]:
        taken, self.seconds = {k: round(v, 3) for k, v in self.seconds.items()}, {}
        return taken

    def remove(self) -> None:
        for module, name, function in self._restore:
            setattr(module, name, function)


class Watch:
    """The engine's own account of each call: the scheduler's outputs (read where ``schedule()`` returns them)
    and the order requests were added in, so each scheduled request is named by its prompt's place in the call."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.order: dict[str, int] = {}
        self.steps: list[dict] = []
        self.preempted: set[int] = set()
        self.seen: dict[str, int] = {}
        add, schedule = scheduler.add_request, scheduler.schedule

        def add_request(request, *args, **kwargs):
            self.order.setdefault(request.request_id, len(self.order))
            return add(request, *args, **kwargs)

        def observed(*args, **kwargs):
            output = schedule(*args, **kwargs)
            self._record(output)
            return output

        scheduler.add_request, scheduler.schedule = add_request, observed

    def begin(self) -> None:
        self.order, self.steps, self.preempted, self.seen = {}, [], set(), {}

    def _record(self, output: Any) -> None:
        if not output.total_num_scheduled_tokens:
            return
        chunks = []
        for rid, count in output.num_scheduled_tokens.items():
            request = self.scheduler.requests.get(rid)
            if request is None:
                continue
            start = request.num_computed_tokens - count
            index = self.order.get(rid, -1)
            if rid in self.seen and start < self.seen[rid]:
                self.preempted.add(index)  # computed again from an earlier position: it was preempted
            self.seen[rid] = start + count
            chunks.append([index, start, count, request.num_prompt_tokens])
        for rid in getattr(output, "preempted_req_ids", None) or ():
            if rid in self.order:
                self.preempted.add(self.order[rid])
        self.steps.append({"requests": len(chunks), "tokens": output.total_num_scheduled_tokens, "chunks": chunks})

    def account(self) -> dict:
        return {"steps": self.steps, "preempted": sorted(self.preempted),
                "scheduler_left": len(getattr(self.scheduler, "requests", {}))}


def _held(worker: Any) -> int | None:
    """Run in a worker (``collective_rpc``): how many requests its model runner still holds."""
    runner = getattr(worker, "model_runner", None)
    held = getattr(runner, "requests", None)
    return len(held) if held is not None else None


def _layers(model: Any) -> Any:
    """The decoder layers of a model (the first ``layers`` module list under it)."""
    for name, module in model.named_modules():
        if name.endswith("layers") and hasattr(module, "__len__") and len(module):
            return module
    raise RuntimeError(f"{type(model).__name__} has no decoder layers")


def _install_fault(worker: Any, layer: int) -> None:
    """Run in a worker: make decoder layer ``layer`` raise in every forward pass until ``_remove_fault``."""
    def fail(module, args):
        raise RuntimeError(f"{FAULT} {layer}")

    worker._compat_fault = _layers(worker.model_runner.model)[layer].register_forward_pre_hook(fail)


def _install_poison(worker: Any, layer: int) -> None:
    """Run in a worker: make decoder layer ``layer`` put NaN into the first row of what it returns (what a model
    vLLM computes wrongly gives), until ``_remove_fault``."""
    def poison(module, args, output):
        first = output[0] if isinstance(output, tuple) else output
        first[0].fill_(float("nan"))

    worker._compat_fault = _layers(worker.model_runner.model)[layer].register_forward_hook(poison)


def _remove_fault(worker: Any) -> None:
    handle = getattr(worker, "_compat_fault", None)
    if handle is not None:
        handle.remove()
        worker._compat_fault = None


class _Heard(logging.Handler):
    """Warnings the consumer logs during a call."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(f"{record.name}: {record.getMessage()}")


def _call(generator: Any, watch: Watch, prompts: list[list[int]]) -> tuple[list[dict] | None, dict]:
    """One ``generate`` call: its samples (None when it raised) and what the engine did."""
    watch.begin()
    heard = _Heard()
    logging.getLogger().addHandler(heard)
    began = time.perf_counter()
    error = trace = None
    samples = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            samples = generator.generate(prompts)
        except Exception as exc:  # noqa: BLE001 - the check judges it; its type and message are kept
            error, trace = f"{type(exc).__name__}: {exc}", traceback.format_exc()
        finally:
            logging.getLogger().removeHandler(heard)
    account = watch.account()
    account.update(seconds=round(time.perf_counter() - began, 3), error=error, traceback=trace,
                   warnings=[str(w.message) for w in caught if not str(w.message).startswith("`torch.")]
                   + heard.texts)
    try:
        held = [h for h in generator.executor.collective_rpc(_held) if h is not None]
        account["workers_left"] = max(held) if held else None
    except Exception as exc:  # noqa: BLE001 - an executor that cannot answer leaves the count unknown
        account["workers_left"], account["workers_left_error"] = None, f"{type(exc).__name__}: {exc}"
    return samples, account


def _set(assignments: dict[str, Any]) -> list[tuple[Any, str, Any]]:
    """Set ``module.attribute`` values for one job (a shim's switch); what to restore."""
    restore = []
    for dotted, value in assignments.items():
        module_name, _, name = dotted.rpartition(".")
        module = importlib.import_module(module_name)
        restore.append((module, name, getattr(module, name)))
        setattr(module, name, value)
    return restore


def _job(generator: Any, watch: Watch, job: dict, prompts: list[list[int]], progress: Path | None,
         done: list[int], profile: Profile) -> dict:
    out = Path(job["out"]) if job.get("out") else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    files: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    tokens, generating = 0, 0.0
    restore = _set(job.get("set", {}))
    if job.get("relabel") is not None:
        restore.append((generator, "layer_ids", generator.layer_ids))
        generator.layer_ids = list(job["relabel"])
    writer = Writer()
    profile.take()
    began = time.perf_counter()
    try:
        for number, batch in enumerate(job["calls"]):
            injected = number == 0 and (job.get("fault") is not None or job.get("poison") is not None)
            if injected:
                install = _install_fault if job.get("fault") is not None else _install_poison
                generator.executor.collective_rpc(install, args=(job.get("fault", job.get("poison")),))
            try:
                samples, account = _call(generator, watch, [prompts[i] for i in batch])
            finally:
                if injected:
                    generator.executor.collective_rpc(_remove_fault)
            account["prompts"] = batch
            generating += account["seconds"]
            if samples is not None:
                account["samples"] = len(samples)
                if len(samples) != len(batch):
                    account["error"] = account["error"] or f"{len(batch)} prompts gave {len(samples)} samples"
                for index, sample in zip(batch, samples):
                    if out is not None:
                        path = out / f"data_{len(files)}.pt"
                        writer.save(sample, path)
                        files.append({"file": path.name, "prompt": index, "call": number})
                    tokens += len(prompts[index])
            calls.append(account)
            done[0] += len(batch)
            if progress is not None:
                atomic_write_text(progress, json.dumps({"job": job["name"], "done": done[0]}))
        writer.wait()
    finally:
        writer.close()
        for module, name, value in restore:
            setattr(module, name, value)
    return {"files": files, "calls": calls, "tokens": tokens, "generate_s": round(generating, 3),
            "seconds": round(time.perf_counter() - began, 3), "profile": profile.take()}


def _engine_facts(generator: Any) -> dict:
    """What the engine was built with, read from its own objects."""
    scheduler = generator.scheduler
    config = getattr(generator, "vllm_config", None) or scheduler.vllm_config
    sched = config.scheduler_config
    chunked = getattr(sched, "enable_chunked_prefill", None)
    if hasattr(sched, "chunked_prefill_enabled"):
        chunked = sched.chunked_prefill_enabled
    return {"budget": getattr(scheduler, "max_num_scheduled_tokens", None) or sched.max_num_batched_tokens,
            "max_num_seqs": sched.max_num_seqs, "chunked_prefill": bool(chunked),
            "block_size": getattr(scheduler, "block_size", None) or config.cache_config.block_size,
            "num_blocks": config.cache_config.num_gpu_blocks,
            "max_model_len": config.model_config.max_model_len,
            "engine_dtype": str(config.model_config.dtype).removeprefix("torch."),
            "layer_ids": list(getattr(generator, "layer_ids", []) or []),
            "vllm": importlib.import_module("vllm").__version__}


def _engine(module: Any, cls: Any, spec: dict, engine: dict, progress: Path | None, done: list[int]) -> dict:
    applied = []
    originals = {name: getattr(module, name) for name in engine.get("overrides", {})}
    if spec.get("dtype", "auto") != "auto":
        originals.setdefault("ModelConfig", getattr(module, "ModelConfig", None))
    try:
        for name, extra in engine.get("overrides", {}).items():
            applied += _override(module, name, extra)
        if spec.get("dtype", "auto") != "auto":
            applied += _override(module, "ModelConfig", {"dtype": spec["dtype"]})
        started = time.perf_counter()
        try:
            generator = cls(spec["model"], layer_ids=engine["layer_ids"], max_model_len=spec["max_model_len"],
                            tensor_parallel_size=spec["tensor_parallel_size"])
        except Exception as exc:  # noqa: BLE001 - a refusal at start is what some checks look for
            return {"applied": applied, "start_error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()}
        result: dict[str, Any] = {"applied": applied, "init_s": round(time.perf_counter() - started, 2),
                                  "facts": _engine_facts(generator), "jobs": {}}
        watch = Watch(generator.scheduler)
        profile = Profile(spec.get("profile"), PROFILED)
        try:
            for job in engine["jobs"]:
                result["jobs"][job["name"]] = _job(generator, watch, job, spec["prompts"], progress, done, profile)
        finally:
            profile.remove()
            executor = getattr(generator, "executor", None)
            if executor is not None:
                executor.shutdown()
        return result
    finally:
        for name, original in originals.items():
            if original is not None:
                setattr(module, name, original)


def _sized(engine: dict, block_size: int | None) -> dict | str:
    """The engine with ``kv_tokens`` (a KV cache of about that many tokens, made small on purpose) turned into
    ``CacheConfig(num_gpu_blocks_override=...)`` in the block size an earlier engine of this build used (one more
    block: the block pool keeps one back); why it cannot be, as a string."""
    if "kv_tokens" not in engine:
        return engine
    if not block_size:
        return "no earlier engine of this run started, so the KV block size is not known"
    blocks = -(-int(engine["kv_tokens"]) // int(block_size)) + 1
    overrides = {**engine.get("overrides", {})}
    overrides["CacheConfig"] = {**overrides.get("CacheConfig", {}), "num_gpu_blocks_override": blocks}
    return {**engine, "overrides": overrides}


def run(spec: dict) -> dict:
    module_name, _, class_name = spec["generator"].partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name)
    progress = Path(spec["progress"]) if spec.get("progress") else None
    done = [0]
    engines: dict[str, dict] = {}
    block_size = None
    for engine in spec["engines"]:
        sized = _sized(engine, block_size)
        if isinstance(sized, str):
            engines[engine["name"]] = {"skipped": sized}
            continue
        engines[engine["name"]] = _engine(module, cls, spec, sized, progress, done)
        block_size = block_size or engines[engine["name"]].get("facts", {}).get("block_size")
    return {"engines": engines}


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
