"""Block hashing and prefix caching: when Requests need a block hasher, and what it needs first."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.reading import find_class, function, loc, method
from compat.signature import Signature
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found

HASH_MODULE = "vllm.v1.core.kv_cache_utils"


@dataclass(frozen=True)
class HashingFacts:
    """The default of ``CacheConfig.enable_prefix_caching``, whether ``Request`` takes a ``block_hasher``, how
    ``BlockPool.cache_full_blocks`` fails without block hashes, and the ``NONE_HASH`` initialisation ritual."""

    prefix_caching_default: str | None
    cache_config_at: str | None
    request_accepts_block_hasher: bool
    failure: str
    failure_at: str | None
    failure_text: str | None
    init_none_hash: str | None
    get_request_block_hasher: str | None
    none_hash: str | None
    none_hash_at: str | None = None


def _block_hashes_failure(surface: StaticSurface) -> tuple[str, str | None, str | None]:
    """(exception type, where, what) of a Request without block hashes in ``cache_full_blocks``."""
    pool = find_class(surface, "BlockPool", prefer="vllm.v1.core")
    found = method(surface, pool, "cache_full_blocks") if pool else None
    if found is None:
        return "unknown", None, None
    for sub in ast.walk(found.node):
        if isinstance(sub, ast.Assert) and "block_hashes" in ast.unparse(sub.test):
            return "AssertionError", loc(found.module, sub), f"assert {ast.unparse(sub.test)}"
    for sub in ast.walk(found.node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Name) and "hash" in ast.unparse(sub.value):
            return "IndexError", loc(found.module, sub), f"{ast.unparse(sub)} on an empty block_hashes list"
    return "unknown", loc(found.found), None


def _none_hash(surface: StaticSurface) -> tuple[str | None, str | None]:
    """What ``NONE_HASH`` is until ``init_none_hash`` runs, and where it is declared."""
    info = surface.index.module(HASH_MODULE)
    for stmt in info.tree.body if info is not None else []:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
            stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "NONE_HASH":
            value = getattr(stmt, "value", None)
            return ("undefined (annotation only: NameError)" if value is None else
                    f"{ast.unparse(value)} until init_none_hash runs"), loc(info, stmt)
    return None, None


def read(surface: StaticSurface, cache_config: str, request: str) -> HashingFacts:
    config = surface.lookup(cache_config)
    sig = surface.signature(config) if isinstance(config, Found) else None
    param = sig.get("enable_prefix_caching") if isinstance(sig, Signature) else None
    req = surface.lookup(request)
    req_sig = surface.signature(req) if isinstance(req, Found) else None
    init = function(surface, f"{HASH_MODULE}.init_none_hash")
    hasher = function(surface, f"{HASH_MODULE}.get_request_block_hasher")
    none_hash, none_hash_at = _none_hash(surface)
    return HashingFacts(
        prefix_caching_default=param.default if param is not None else None,
        cache_config_at=loc(config) if isinstance(config, Found) else None,
        request_accepts_block_hasher=isinstance(req_sig, Signature) and req_sig.get("block_hasher") is not None,
        failure=(failure := _block_hashes_failure(surface))[0], failure_at=failure[1], failure_text=failure[2],
        init_none_hash=loc(init.found) if init else None,
        get_request_block_hasher=loc(hasher.found) if hasher else None,
        none_hash=none_hash, none_hash_at=none_hash_at)


FACT = Fact("hashing", read)
