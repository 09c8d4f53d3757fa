"""A KV cache the consumer plans itself (``get_kv_cache_config_from_groups``) is checked as vLLM's engine core
checks the one it plans: one request of ``max_model_len`` must fit.

vLLM's engine core refuses to start when the KV cache cannot hold one request of the model's context
(``check_enough_kv_cache_memory``, "To serve at least one request with the models's max seq len ..."). A hand-built
pipeline that calls ``get_kv_cache_config_from_groups`` directly skips that check: speculators 0.3.0 with a small
cache returned a prompt that did not fit, and every prompt after it in the call, with its token ids and no hidden
state at all. The shim runs vLLM's own check (found where each audited build defines it) right after the plan, and
also checks the plan itself, since ``num_gpu_blocks_override`` can plan fewer blocks than the memory allows.
No vLLM finding is involved: the release has this gap on the build it was written for.
"""

from __future__ import annotations

import ast

from compat.consumer.result import Kind
from compat.errors import CompatError
from compat.fix.context import FixContext
from compat.fix.edits import InsertAfter
from compat.fix.fixer import Fixer
from compat.fix.plan import FixerPlan, ShimPiece
from compat.fix.shim import homes
from compat.fix.source import call_of, function_of, statement_at

NAME = "kv-cache"
PLAN = "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups"
CHECKS = ("vllm.v1.core.kv_cache_utils.check_enough_kv_cache_memory",
          "vllm.v1.core.kv_cache_utils.get_max_concurrency_for_kv_cache_config")

CODE = '''
def check_kv_cache(vllm_config, kv_cache_spec, available_memory, kv_cache_config):
    """What vLLM's engine core checks of the KV cache it plans, for one the pipeline planned itself: its own
    ``check_enough_kv_cache_memory`` (one request of ``max_model_len`` fits in ``available_memory``; it raises
    ValueError with how much is needed), and that the planned blocks hold such a request (a block-count override
    can plan fewer than the memory allows)."""
    check = _first_of(_CHECK_ENOUGH)
    if check is not None and kv_cache_spec is not None:
        check(vllm_config, kv_cache_spec, available_memory)
    concurrency = _first_of(_MAX_CONCURRENCY)
    if concurrency is not None and concurrency(vllm_config, kv_cache_config) < 1:
        raise ValueError(f"the KV cache planned ({kv_cache_config.num_blocks} blocks) cannot hold one request of the "
                         f"model's max_model_len ({vllm_config.model_config.max_model_len} tokens): a prompt that "
                         "does not fit would never be computed. Give the KV cache more memory or lower max_model_len.")


def _first_of(paths):
    """The first of ``paths`` the running build defines."""
    return next((found for found in map(_lookup, paths) if found is not None), None)
'''


def _paths(ctx: FixContext, symbol: str) -> tuple[str, ...]:
    """Where the audited builds define ``symbol``'s function, newest home first (none: a build lacks it, and the
    shim then skips that check where it does not find it)."""
    name = symbol.rpartition(".")[2]
    try:
        return tuple(f"{module}.{name}" for module, _ in homes(ctx.builds, symbol))
    except CompatError:
        return tuple(sorted({f"{path}" for b in ctx.builds for path in b.surface.definitions(name)}))


class KvCacheCheck(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        for tp in ctx.scan.touchpoints:
            if tp.kind != Kind.CALL or tp.symbol.rpartition(".")[2] != PLAN.rpartition(".")[2]:
                continue
            found = call_of(ctx.root, tp.location.file, tp.location.line, "get_kv_cache_config_from_groups")
            function = function_of(ctx.root, tp.location.file, tp.location.line)
            index = statement_at(function.body, tp.location.line) if function else None
            stmt = function.body[index] if function is not None and index is not None else None
            if found is None or not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                                     and isinstance(stmt.targets[0], ast.Name)):
                continue
            call = found[0]
            given = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}
            positional = dict(zip(("vllm_config", "kv_cache_groups", "kv_cache_specs", "available_memory"),
                                  map(ast.unparse, call.args)))
            given = {**positional, **given}
            if "vllm_config" not in given or "available_memory" not in given:
                continue
            target = stmt.targets[0].id
            specs = given.get("kv_cache_specs", "None")
            plan.edits.append(InsertAfter(tp.location.file, stmt.lineno, f"{target} = get_kv_cache_config_from_groups"
                                          "(...)", assigns=target,
                                          code=f"{ctx.shim.alias}.check_kv_cache({given['vllm_config']}, {specs}, "
                                               f"{given['available_memory']}, {target})"))
            plan.notes.append(f"{tp.location}: the KV cache the pipeline plans is checked as the engine core checks "
                              "its own (one request of max_model_len must fit), instead of prompts that do not fit "
                              "coming back without hidden states")
        if plan.edits:
            checks = [_paths(ctx, symbol) for symbol in CHECKS]
            plan.pieces.append(ShimPiece("kv-cache:check", f"_CHECK_ENOUGH = {checks[0]!r}\n_MAX_CONCURRENCY = "
                                         f"{checks[1]!r}\n\n{CODE}", "the engine core's KV cache checks"))
        return plan


FIXER = KvCacheCheck(
    name=NAME,
    description="A KV cache the pipeline plans itself is checked as the engine core checks its own: one request "
                "of max_model_len must fit (else prompts that do not fit come back without hidden states).",
    handles=(),
    order=75,
)
