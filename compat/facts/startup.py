"""The start-up sequence: what the engine core does between creating the executor and the first step."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from enum import StrEnum

from compat.facts import Fact
from compat.facts.reading import loc, method
from compat.syntax import FunctionNode
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
    guard: str = ""
    """The tests the engine core makes before the step (``vllm_config.cache_config.enable_extensible_kv_cache``),
    joined with ``and`` (an ``else`` as ``not (test)``), with the locals they name replaced by what they were
    assigned (``extensible = vllm_config.cache_config.enable_extensible_kv_cache``); "" when it always runs."""


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


def _step(surface: StaticSurface, call: ast.Call, info: ModuleInfo, aliases: set[str]) -> Step | None:
    text, at = ast.unparse(call.func), loc(info, call)
    head, _, name = text.rpartition(".")
    if head == "self.model_executor" or head in aliases:
        rpc = _rpc_name(call) if name == "collective_rpc" else None
        return Step(StepKind.RPC, rpc, at) if rpc is not None else Step(StepKind.EXECUTOR, name, at)
    if text == "self.collective_rpc" and (sent := _rpc_name(call)) is not None:
        return Step(StepKind.RPC, sent, at)
    if isinstance(call.func, ast.Name):
        found = surface.resolve_expr(info, call.func)
        if isinstance(found, Found) and found.kind == FoundKind.FUNCTION and not found.path.startswith(_SKIP_MODULES):
            return Step(StepKind.FUNCTION, call.func.id, at, found.path)
    return None


def _tests(body: list[ast.stmt], tests: tuple[str, ...], assigned: dict[str, str],
           out: dict[int, tuple[str, ...]]) -> None:
    """The tests each call of ``body`` sits under (by the call's id), with locals replaced by their values."""
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            assigned[stmt.targets[0].id] = _substituted(stmt.value, assigned)
        if isinstance(stmt, (ast.If, ast.While)):
            test = _substituted(stmt.test, assigned)
            for node in ast.walk(stmt.test):
                if isinstance(node, ast.Call):
                    out[id(node)] = tests
            _tests(stmt.body, tests + (test,), assigned, out)
            _tests(stmt.orelse, tests + (f"not ({test})",), assigned, out)
            continue
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.Try)):
            for node in _headers_of(stmt):
                for call in ast.walk(node):
                    if isinstance(call, ast.Call):
                        out[id(call)] = tests
            inner = list(getattr(stmt, "body", [])) + list(getattr(stmt, "orelse", [])) + \
                list(getattr(stmt, "finalbody", [])) + [s for h in getattr(stmt, "handlers", []) for s in h.body]
            _tests(inner, tests, assigned, out)
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                out[id(node)] = tests


def _headers_of(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [i.context_expr for i in stmt.items]
    return []


def _substituted(node: ast.expr, assigned: dict[str, str]) -> str:
    class Swap(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.AST:
            if name.id in assigned and isinstance(name.ctx, ast.Load):
                return ast.parse(f"({assigned[name.id]})", mode="eval").body
            return name
    return ast.unparse(Swap().visit(ast.parse(ast.unparse(node), mode="eval").body))


def _aliases(node: ast.AST) -> set[str]:
    """Locals bound to the executor (``executor = self.model_executor``)."""
    return {t.id for n in ast.walk(node) if isinstance(n, ast.Assign) and ast.unparse(n.value) == "self.model_executor"
            for t in n.targets if isinstance(t, ast.Name)}


def _steps_of(surface: StaticSurface, owner: Found, node: FunctionNode, info: ModuleInfo, depth: int,
              out: list[Step], seen: set[str], after: int = 0, guard: tuple[str, ...] = ()) -> None:
    tests: dict[int, tuple[str, ...]] = {}
    _tests([s for s in node.body if s.lineno > after], (), {}, tests)
    aliases = _aliases(node)
    for call in _calls(node):
        if call.lineno <= after or id(call) not in tests:
            continue
        under = guard + tests[id(call)]
        step = _step(surface, call, info, aliases)
        text = ast.unparse(call.func)
        if step is None and text.startswith("self.") and text.count(".") == 1:
            # A call of one of the engine core's own methods: its steps count as the caller's.
            inner = method(surface, owner, text[5:]) if depth < _MAX_DEPTH else None
            if inner is not None and text not in seen:
                seen.add(text)
                _steps_of(surface, owner, inner.node, inner.module, depth + 1, out, seen, 0, under)
            continue
        if step is not None and not any(s.name == step.name for s in out):
            out.append(replace(step, guard=" and ".join(f"({t})" if " or " in t else t for t in under)))


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
    _steps_of(surface, owner, init.node, init.module, 0, steps, set(), start.lineno)
    return StartupFacts(loc(init.found), loc(init.module, start), tuple(steps))


FACT = Fact("startup", read)
