"""Prefix caching and block hashes: a build that caches prefixes by default needs block hashes on every
Request, and skips the forward pass of a cached prefix, so a forward that captures states loses rows."""

from __future__ import annotations

import compat.probes.block_hashing as block_hashing_probe

from compat.consumer.result import Kind
from compat.fix.context import FixContext, span
from compat.fix.edits import RouteImport
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from compat.fix.shim import adjustment_name, raw_import
from compat.fix.source import imported_as

CACHE_CONFIG = "vllm.config.CacheConfig"
NAME = "hashing"


def _adjustment() -> str:
    return f'''
def {adjustment_name("CacheConfig", NAME)}(target, params, args, kwargs, context):
    """Prefix caching off unless the caller sets it: with it on, a prompt whose prefix is cached skips that
    prefix's forward pass (captured states lose rows), and every Request needs block hashes."""
    if "enable_prefix_caching" in params and "enable_prefix_caching" not in _passed(target, args, kwargs):
        kwargs["enable_prefix_caching"] = False
    return args, kwargs
'''


class PrefixCaching(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(block_hashing_probe.PROBE)
        if not failing:
            return plan
        configs = [tp for tp in ctx.scan.touchpoints if tp.kind == Kind.CALL and tp.symbol == CACHE_CONFIG]
        explicit = [tp for tp in configs if "enable_prefix_caching" in dict(tp.literals)]
        imports = [tp for tp in ctx.scan.touchpoints if tp.kind == Kind.IMPORT and tp.symbol == CACHE_CONFIG
                   and any(c.location.file == tp.location.file for c in configs)]
        if explicit or not imports or imported_as(ctx.root, imports[0].location.file, imports[0].location.line,
                                                  "CacheConfig") != "CacheConfig":
            reason = ("the consumer sets enable_prefix_caching itself" if explicit else
                      "the consumer does not build its CacheConfig from `from vllm.config import CacheConfig`")
            plan.unhandled += [Unhandled(f, reason) for _, f in failing]
            return plan
        tp = imports[0]
        plan.pieces += [raw_import(ctx, CACHE_CONFIG),
                        ShimPiece(f"adjust:CacheConfig:{NAME}", _adjustment(), "prefix caching off for extraction",
                                  wraps="CacheConfig")]
        plan.edits.append(RouteImport(tp.location.file, tp.location.line, "from vllm.config import CacheConfig",
                                      module="vllm.config", names=("CacheConfig",), shim=ctx.shim.module))
        plan.claims.append(Claim(block_hashing_probe.PROBE.name))
        builds = sorted({b.version for b, _ in failing})
        plan.notes.append("CacheConfig turns prefix caching off unless the consumer sets it (on by default in "
                          f"{span([b for b in ctx.builds if b.version in builds])}): every prompt's rows are "
                          "captured, and Requests need no block hashes")
        return plan


FIXER = PrefixCaching(
    name=NAME,
    description="Prefix caching on by default: the shim's CacheConfig turns it off unless the consumer sets it, "
                "so no captured row is skipped and Requests need no block hasher.",
    handles=(block_hashing_probe.PROBE,),
    order=50,
)
