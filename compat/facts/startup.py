"""The start-up sequence: what the engine core does between creating the executor and the first step."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import StrEnum

from compat.facts import Fact
from compat.facts.reading import loc, method
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

ENGINE_CORE = "vllm.v1.engine.core.EngineCore"

PREFIX_CACHING_OFF = "prefix caching is off"
NO_KV_CONNECTOR = "no KV connector is configured"
EAGER = "the model runs eagerly (enforce_eager=True)"


@dataclass(frozen=True)
class NotNeeded:
    """Why a hand-built pipeline may skip a start-up step: ``reason``, which holds while ``assumes`` (one of
    ``PREFIX_CACHING_OFF``, ``NO_KV_CONNECTOR``, ``EAGER``, or None: always) holds for the consumer's pipeline."""

    reason: str
    assumes: str | None = None

    def text(self) -> str:
        return self.reason + (f" (this assumes {self.assumes})" if self.assumes else "")


NOT_NEEDED = {
    "get_kv_connector_handshake_metadata": NotNeeded("KV connectors exchange handshakes; the pipeline has no KV "
                                                     "connector", NO_KV_CONNECTOR),
    "init_kv_output_aggregator": NotNeeded("aggregates KV connector outputs; the pipeline has no KV connector",
                                           NO_KV_CONNECTOR),
    "init_ec_output_aggregator": NotNeeded("aggregates encoder-cache connector outputs; the pipeline has none"),
    "measure_encoder_output_widths": NotNeeded("sizes multimodal encoder outputs; the pipeline feeds token ids only"),
    "engine_receiver_cache_from_config": NotNeeded("a multimodal input cache; the pipeline feeds token ids only"),
    "register_failure_callback": NotNeeded("reports a dead worker to the engine core; the pipeline's calls raise "
                                           "instead"),
    "compile_or_warm_up_model": NotNeeded("compiles and warms up kernels; the pipeline runs eagerly, and warm-up "
                                          "changes no value", EAGER),
    "update_max_model_len": NotNeeded("tells workers a max_model_len the engine core lowered to fit the KV cache; the "
                                      "pipeline sizes its own cache and truncates prompts to its max_model_len"),
    "get_kv_cache_capacity": NotNeeded("logs how many tokens the KV cache holds"),
    "update_kv_cache_capacity": NotNeeded("lowers max_model_len to what the KV cache holds (auto-fit); the pipeline "
                                          "keeps its own limits"),
    "get_simple_cpu_offload_num_blocks": NotNeeded("sizes KV offloading to CPU memory, which the pipeline does not "
                                                   "use", NO_KV_CONNECTOR),
    "register_all_kvcache_specs": NotNeeded("registers KV cache spec types for the engine core's own decoding; the "
                                            "pipeline receives specs through collective_rpc"),
    "is_full_attention_spec": NotNeeded("a test inside the engine core's KV planning, not a step of its own"),
    "get_global_kv_cache_groups": NotNeeded("the engine core's KV cache planning; the pipeline plans with "
                                            "get_kv_cache_config_from_groups"),
    "resolve_kv_cache_block_sizes": NotNeeded("gives the scheduler its block sizes, which the pipeline passes to "
                                              "Scheduler itself (the calls fixer passes block_size as the engine "
                                              "core computes it)"),
    "resolve_cache_hit_alignment_tokens": NotNeeded("aligns prefix-cache hits; the pipeline runs with prefix caching "
                                                    "off", PREFIX_CACHING_OFF),
    "determine_available_memory": NotNeeded("profiles memory to size the KV cache; the pipeline sizes its own"),
    "get_kv_cache_configs": NotNeeded("the engine core's KV cache planning; the pipeline plans with "
                                      "get_kv_cache_config_from_groups"),
    "generate_scheduler_kv_cache_config": NotNeeded("the engine core's KV cache planning; the pipeline plans its "
                                                    "own"),
    "initialize_cache": NotNeeded("the engine core's name for the KV cache set-up the pipeline does itself"),
    "init_none_hash": NotNeeded("prefix-cache hashing; the pipeline runs with prefix caching off",
                                PREFIX_CACHING_OFF),
    "get_request_block_hasher": NotNeeded("prefix-cache hashing; the pipeline runs with prefix caching off",
                                          PREFIX_CACHING_OFF),
}
"""The start-up steps a hand-built pipeline's correctness does not depend on, each with why: one source for the
startup probe (``ok`` in the audit) and the startup fixer (accepted). A step whose reason assumes something of
the consumer's pipeline stays ``changed`` in the audit when its source shows the assumption does not hold."""
_SKIP_MODULES = ("vllm.utils", "vllm.logger", "vllm.envs", "vllm.tracing", "vllm.usage")
_MAX_DEPTH = 2


class StepKind(StrEnum):
    """What a start-up step calls (``Step.kind``)."""

    EXECUTOR = "executor"
    """A method of the engine core's executor."""
    RPC = "rpc"
    """A worker RPC (``collective_rpc``)."""
    FUNCTION = "function"
    """A vLLM function."""


@dataclass(frozen=True)
class Step:
    """One start-up step: an executor method, a worker RPC or a vLLM function, and where it is called."""

    kind: StepKind
    name: str
    at: str | None
    path: str | None = None
    """The function's dotted path (functions only)."""


@dataclass(frozen=True)
class StartupFacts:
    engine_core: str | None = None
    executor_created_at: str | None = None
    steps: tuple[Step, ...] = ()
    error: str | None = None


def _calls(node: ast.AST) -> list[ast.Call]:
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _rpc_name(call: ast.Call) -> str | None:
    first = call.args[0] if call.args else None
    return str(first.value) if isinstance(first, ast.Constant) else None


def _step(surface: StaticSurface, call: ast.Call, info: ModuleInfo) -> Step | None:
    text, at = ast.unparse(call.func), loc(info, call)
    if text.startswith("self.model_executor."):
        name = text.rsplit(".", 1)[-1]
        rpc = _rpc_name(call) if name == "collective_rpc" else None
        return Step(StepKind.RPC, rpc, at) if rpc is not None else Step(StepKind.EXECUTOR, name, at)
    if text == "self.collective_rpc" and (sent := _rpc_name(call)) is not None:
        return Step(StepKind.RPC, sent, at)
    if isinstance(call.func, ast.Name):
        found = surface.resolve_expr(info, call.func)
        if isinstance(found, Found) and found.kind == FoundKind.FUNCTION and not found.path.startswith(_SKIP_MODULES):
            return Step(StepKind.FUNCTION, call.func.id, at, found.path)
    return None


def _steps_of(surface: StaticSurface, owner: Found, node: ast.AST, info: ModuleInfo, depth: int,
              out: list[Step], seen: set[str]) -> None:
    for call in _calls(node):
        step = _step(surface, call, info)
        text = ast.unparse(call.func)
        if step is None and text.startswith("self.") and text.count(".") == 1:
            # A call of one of the engine core's own methods: its steps count as the caller's.
            inner = method(surface, owner, text[5:]) if depth < _MAX_DEPTH else None
            if inner is not None and text not in seen:
                seen.add(text)
                _steps_of(surface, owner, inner.node, inner.module, depth + 1, out, seen)
            continue
        if step is not None and not any(s.name == step.name for s in out):
            out.append(step)


def read(surface: StaticSurface) -> StartupFacts:
    init = method(surface, ENGINE_CORE, "__init__")
    if init is None:
        return StartupFacts(error=f"{ENGINE_CORE}.__init__ not found")
    start = next((s for s in ast.walk(init.node) if isinstance(s, ast.Assign) and any(
        ast.unparse(t) == "self.model_executor" for t in s.targets)), None)
    if start is None:
        return StartupFacts(error="the engine core does not create self.model_executor in __init__")
    steps: list[Step] = []
    owner = surface.lookup(ENGINE_CORE)
    if not isinstance(owner, Found):  # its __init__ was read: not reached
        return StartupFacts(error=f"{ENGINE_CORE} not found")
    for stmt in [s for s in init.node.body if s.lineno > start.lineno]:
        _steps_of(surface, owner, stmt, init.module, 0, steps, set())
    return StartupFacts(loc(init.found), loc(init.module, start), tuple(steps))


FACT = Fact("startup", read)
