"""Block hashing and prefix caching: when Requests need a block hasher, and what it needs first."""

from __future__ import annotations

import ast

from compat.facts import find_class, function, loc, method
from compat.signature import Signature
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found


def _block_hashes_failure(surface: StaticSurface) -> dict:
    pool = find_class(surface, "BlockPool", prefer="vllm.v1.core")
    found = method(surface, pool, "cache_full_blocks") if pool else None
    if found is None:
        return {"failure": "unknown", "failure_at": None, "failure_text": None}
    member, node, info = found
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assert) and "block_hashes" in ast.unparse(sub.test):
            return {"failure": "AssertionError", "failure_at": loc(info, sub),
                    "failure_text": f"assert {ast.unparse(sub.test)}"}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Name):
            base = ast.unparse(sub.value)
            if "hash" in base:
                return {"failure": "IndexError", "failure_at": loc(info, sub),
                        "failure_text": f"{ast.unparse(sub)} on an empty block_hashes list"}
    return {"failure": "unknown", "failure_at": loc(member), "failure_text": None}


def _none_hash(surface: StaticSurface, module: str) -> dict:
    info = surface.index.module(module)
    init = function(surface, f"{module}.init_none_hash")
    hasher = function(surface, f"{module}.get_request_block_hasher")
    out = {"init_none_hash": loc(init[0]) if init else None,
           "get_request_block_hasher": loc(hasher[0]) if hasher else None, "none_hash": None}
    if info is None:
        return out
    for stmt in info.tree.body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (
            stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "NONE_HASH":
            value = getattr(stmt, "value", None)
            out["none_hash"] = "undefined (annotation only: NameError)" if value is None else (
                f"{ast.unparse(value)} until init_none_hash runs")
            out["none_hash_at"] = loc(info, stmt)
            break
    return out


def read(surface: StaticSurface, cache_config: str, request: str) -> dict:
    facts: dict = {}
    config = surface.lookup(cache_config)
    sig = surface.signature(config) if isinstance(config, Found) else None
    param = sig.get("enable_prefix_caching") if isinstance(sig, Signature) else None
    facts["prefix_caching_default"] = param.default if param is not None else None
    facts["cache_config_at"] = loc(config) if isinstance(config, Found) else None
    req = surface.lookup(request)
    req_sig = surface.signature(req) if isinstance(req, Found) else None
    facts["request_accepts_block_hasher"] = isinstance(req_sig, Signature) and req_sig.get("block_hasher") is not None
    facts.update(_block_hashes_failure(surface))
    facts.update(_none_hash(surface, "vllm.v1.core.kv_cache_utils"))
    return facts
