"""Block hashing: whether the consumer's Requests need a block hasher under its cache configuration."""

from __future__ import annotations

from dataclasses import fields

from compat.consumer.result import Kind, TouchPoint
from compat.facts import hashing
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext
from compat.vllm.surface import Found

REQUEST = "vllm.v1.request.Request"
CACHE_CONFIG = "vllm.config.CacheConfig"


def _is(ctx: ProbeContext, tp: TouchPoint, path: str) -> bool:
    if tp.kind != Kind.CALL:
        return False
    found, target = ctx.lookup(tp.symbol), ctx.lookup(path)
    return isinstance(found, Found) and isinstance(target, Found) and found.path == target.path


class HashingProbe(Probe):
    def applies(self, tp: TouchPoint) -> bool:
        return tp.kind == Kind.CALL and tp.symbol.rsplit(".", 1)[-1] == "Request"

    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        if not _is(ctx, tp, REQUEST):
            return None
        facts = ctx.fact(hashing.FACT, CACHE_CONFIG, REQUEST)
        configs = [t for t in ctx.scan.touchpoints if _is(ctx, t, CACHE_CONFIG)]
        given = [dict(t.literals).get("enable_prefix_caching") for t in configs]
        explicit = next((g for g in given if g is not None), None)
        effective = explicit if explicit is not None else facts.prefix_caching_default
        source = (f"the consumer's CacheConfig(enable_prefix_caching={explicit})" if explicit is not None else
                  f"the build's default CacheConfig.enable_prefix_caching={effective} ({facts.cache_config_at})")
        evidence = Evidence(audited=f"prefix caching: {effective} ({source}); without block hashes: "
                                    f"{facts.failure} at {facts.failure_at}",
                            extra=tuple((f.name, str(getattr(facts, f.name))) for f in fields(facts)
                                        if getattr(facts, f.name) is not None and f.name != "prefix_caching_default"))
        if ctx.written_for is not None:
            old = ctx.fact(hashing.FACT, CACHE_CONFIG, REQUEST, surface=ctx.written_for)
            evidence = Evidence(written_for=f"default enable_prefix_caching={old.prefix_caching_default}",
                                audited=evidence.audited, written_for_build=ctx.written_for.build.version,
                                extra=evidence.extra)
        on = effective in ("True", "true", "1")
        passes_hasher = tp.call is not None and ("block_hasher" in tp.call.keywords or tp.call.star_kwargs)
        uses_hasher = any(t.symbol.endswith("get_request_block_hasher") for t in ctx.scan.touchpoints
                          if t.kind == Kind.CALL)
        inits = any(t.symbol.endswith("init_none_hash") for t in ctx.scan.touchpoints if t.kind == Kind.CALL)
        if uses_hasher and not inits and facts.none_hash:
            return self.finding(
                tp, Status.BROKEN, f"get_request_block_hasher() hashes with NONE_HASH, which is "
                f"{facts.none_hash} ({facts.none_hash_at}); the consumer never calls init_none_hash()",
                facts.init_none_hash, evidence, fix="call init_none_hash(hash_fn) once before "
                "get_request_block_hasher(block_size, hash_fn)", symbol=REQUEST)
        if not on:
            return self.finding(tp, Status.OK, f"prefix caching is off ({source}); Requests need no block hasher",
                                facts.cache_config_at, evidence, symbol=REQUEST)
        if not passes_hasher:
            return self.finding(
                tp, Status.BROKEN,
                f"prefix caching is on ({source}) and this Request gets no block_hasher, so its block_hashes stay "
                f"empty: the scheduler fails with {facts.failure} in BlockPool.cache_full_blocks "
                f"({facts.failure_at}: {facts.failure_text}) as soon as a prompt fills a block",
                facts.failure_at, evidence,
                fix="CacheConfig(enable_prefix_caching=False) for extraction, or pass block_hasher="
                    "get_request_block_hasher(block_size, hash_fn) after init_none_hash(hash_fn)", symbol=REQUEST)
        if ctx.scan.model_patches:
            return self.finding(
                tp, Status.CHANGED,
                f"prefix caching is on ({source}): prompts sharing a cached prefix skip its forward pass, so the "
                f"consumer's patched forward captures fewer rows than the prompt has tokens, without an error",
                facts.cache_config_at, evidence, fix="CacheConfig(enable_prefix_caching=False)", symbol=REQUEST)
        return self.finding(tp, Status.OK, f"prefix caching is on ({source}) and the Request gets a block hasher",
                            facts.cache_config_at, evidence, symbol=REQUEST)


PROBE = HashingProbe(
    name="block-hashing",
    description="Whether Requests need a block hasher under the consumer's cache configuration (the build's "
                "defaults included), what the hasher needs initialised first (init_none_hash), and how a missing "
                "one fails in that build.",
    kinds=(Kind.CALL,),
    order=60,
)
