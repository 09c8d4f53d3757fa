"""CUDA-only calls in a consumer that must also run on vLLM's CPU builds (no vLLM finding: the consumer
assumes a GPU). The shim answers them as the engine core does on every platform."""

from __future__ import annotations

import ast

from compat.consumer.result import Kind
from compat.fix.context import FixContext
from compat.fix.edits import ReplaceStatements, RouteCall, RouteImport
from compat.fix.fixer import Fixer
from compat.fix.plan import FixerPlan, ShimPiece
from compat.fix.shim import adjustment_name, raw_import
from compat.fix.source import function_of, imported_as, parsed, segment, statement_at

NAME = "platform"
MEMORY = '''
def device_memory(executor):
    """``torch.cuda.mem_get_info()`` where CUDA answers; elsewhere (vLLM's CPU builds) what the engine core
    itself sizes the KV cache by: the executor's ``determine_available_memory()`` (its smallest worker)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.mem_get_info()
    available = min(executor.determine_available_memory())
    return available, available
'''
KV_BUDGET = '''
def kv_cache_budget(executor, planned):
    """The memory for the KV cache: ``planned`` (the consumer's share of the free CUDA memory) where CUDA answers;
    elsewhere what vLLM's engine itself gives the KV cache on that platform, the executor's
    ``determine_available_memory()`` (its smallest worker; on vLLM's CPU builds the KV space configured, or a
    share of the node's memory), which is already a budget for the KV cache and not free memory to take a share
    of again."""
    import torch

    if torch.cuda.is_available():
        return planned
    return min(executor.determine_available_memory())
'''
EMPTY_CACHE = '''
def empty_cache():
    """``torch.cuda.empty_cache()`` where there is CUDA (a no-op elsewhere)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
'''


def _block_size_adjustment() -> str:
    return f'''
def {adjustment_name("CacheConfig", NAME)}(target, params, args, kwargs, context):
    """On vLLM's CPU platform the attention backend picks the KV block size (a fixed one such as 16 is
    refused by newer CPU backends: "No common block size"); elsewhere the caller's is kept."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        kwargs.pop("block_size", None)
    return args, kwargs
'''


class CudaOnly(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        files = sorted({tp.location.file for tp in ctx.scan.touchpoints})
        for file in files:
            for node in ast.walk(parsed(ctx.root / file)):
                if not isinstance(node, ast.Call):
                    continue
                callee = ast.unparse(node.func)
                if callee == "torch.cuda.mem_get_info":
                    executor = self._executor(ctx, file, node.lineno)
                    if executor is None:
                        continue
                    plan.edits.append(RouteCall(file, node.lineno, callee, callee=callee,
                                                function=f"{ctx.shim.alias}.device_memory", extra_args=(executor,)))
                    plan.pieces.append(ShimPiece("platform:device_memory", MEMORY, "device memory on any platform"))
                    plan.notes.append(f"{file}:{node.lineno}: torch.cuda.mem_get_info() answered by "
                                      f"{executor}.determine_available_memory() where there is no CUDA")
                    self._budget(ctx, plan, file, node.lineno, executor)
                elif callee == "torch.cuda.empty_cache":
                    plan.edits.append(RouteCall(file, node.lineno, callee, callee=callee,
                                                function=f"{ctx.shim.alias}.empty_cache"))
                    plan.pieces.append(ShimPiece("platform:empty_cache", EMPTY_CACHE, "CUDA cache, when there is one"))
                    plan.notes.append(f"{file}:{node.lineno}: torch.cuda.empty_cache() only where there is CUDA")
        for tp in ctx.scan.touchpoints:
            if tp.kind == Kind.CALL and tp.symbol == "vllm.config.CacheConfig" and tp.call \
                    and "block_size" in tp.call.keywords:
                imp = next((t for t in ctx.scan.touchpoints if t.kind == Kind.IMPORT and t.symbol == tp.symbol
                            and t.location.file == tp.location.file), None)
                if imp is None or imported_as(ctx.root, imp.location.file, imp.location.line,
                                              "CacheConfig") != "CacheConfig":
                    continue
                plan.pieces += [raw_import(ctx, tp.symbol),
                                ShimPiece(f"adjust:CacheConfig:{NAME}", _block_size_adjustment(),
                                          "the CPU backend's own KV block size", wraps="CacheConfig")]
                plan.edits.append(RouteImport(imp.location.file, imp.location.line, "from vllm.config import "
                                              "CacheConfig", module="vllm.config", names=("CacheConfig",),
                                              shim=ctx.shim.module))
                plan.notes.append(f"{tp.location}: CacheConfig(block_size=...) leaves the block size to the "
                                  "attention backend on vLLM's CPU platform")
        return plan

    @staticmethod
    def _budget(ctx: FixContext, plan: FixerPlan, file: str, line: int, executor: str) -> None:
        """``cache_memory = <share of free_memory>`` after ``free_memory, _ = torch.cuda.mem_get_info()``: where
        there is no CUDA, the engine's own KV cache budget instead of a share of it."""
        function = function_of(ctx.root, file, line)
        index = statement_at(function.body, line) if function else None
        if function is None or index is None:
            return
        info = function.body[index]
        target = info.targets[0] if isinstance(info, ast.Assign) and len(info.targets) == 1 else None
        free = (target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target)
        if not isinstance(free, ast.Name):
            return
        for stmt in function.body[index + 1:]:
            if not any(isinstance(n, ast.Name) and n.id == free.id for n in ast.walk(stmt)):
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                plan.pieces.append(ShimPiece("platform:kv_cache_budget", KV_BUDGET, "the KV cache budget on any "
                                             "platform"))
                plan.edits.append(ReplaceStatements(
                    file, stmt.lineno, f"{name} = <a share of {free.id}>", expected=(segment(ctx.root, file, stmt),),
                    replacement=f"{name} = {ctx.shim.alias}.kv_cache_budget({executor}, "
                                f"{ast.unparse(stmt.value)})\n"))
                plan.notes.append(f"{file}:{stmt.lineno}: where there is no CUDA the KV cache gets the budget the "
                                  "engine itself would give it (determine_available_memory), not a share of it")
            return

    @staticmethod
    def _executor(ctx: FixContext, file: str, line: int) -> str | None:
        """The executor the consumer built in the function around ``line`` (``self.executor = Executor(...)``)."""
        function = function_of(ctx.root, file, line)
        executors = {tp.location.line for tp in ctx.scan.touchpoints if tp.kind == Kind.CALL
                     and tp.location.file == file and tp.symbol.endswith("Executor")}
        for node in ast.walk(function) if function else ():
            if isinstance(node, ast.Assign) and node.lineno in executors and len(node.targets) == 1:
                return ast.unparse(node.targets[0])
        return None


FIXER = CudaOnly(
    name=NAME,
    description="CUDA-only calls (torch.cuda.mem_get_info, torch.cuda.empty_cache) and a fixed KV block size, "
                "so that the consumer also runs on vLLM's CPU builds; no vLLM finding is involved.",
    handles=(),
    order=90,
)
