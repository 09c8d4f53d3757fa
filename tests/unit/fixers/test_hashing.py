"""fixers/hashing.py: prefix caching on by default (a ``block-hashing`` finding): the shim's CacheConfig turns it
off unless the consumer sets it; declined where the consumer sets it itself or does not build CacheConfig from
``from vllm.config import CacheConfig``.

The ``block-hashing`` findings are given (the probe reads an engine core's worth of vLLM); the builds the shim
imports CacheConfig from are hand-written."""

from __future__ import annotations

import pytest
from compat.fixers.hashing import FIXER

from .conftest import finding

CONFIG = "class CacheConfig:\n    def __init__(self, block_size=16, enable_prefix_caching={on}):\n        pass\n"
BUILDS = {"0.1.0": {"vllm/config.py": CONFIG.format(on=False)}, "0.2.0": {"vllm/config.py": CONFIG.format(on=True)}}
PLAIN = "from vllm.config import CacheConfig\n\n\ndef make():\n    return CacheConfig(block_size=16)\n"
EXPLICIT = PLAIN.replace("block_size=16", "block_size=16, enable_prefix_caching=True")
ALIASED = "from vllm.config import CacheConfig as CC\n\n\ndef make():\n    return CC(block_size=16)\n"
HASHING = finding("block-hashing", "vllm.v1.request.Request", "pkg/run.py:5")


@pytest.mark.parametrize(("source", "given", "unhandled"), [
    pytest.param(PLAIN, {"0.2.0": [HASHING]}, "", id="turned off through the shim"),
    pytest.param(EXPLICIT, {"0.2.0": [HASHING]}, "the consumer sets enable_prefix_caching itself",
                 id="consumer sets it: declined"),
    pytest.param(ALIASED, {"0.2.0": [HASHING]}, "does not build its CacheConfig from `from vllm.config import "
                                                "CacheConfig`", id="aliased: declined"),
    pytest.param(PLAIN, {}, "", id="no finding: nothing planned"),
])
def test_prefix_caching(fixing, source, given, unhandled):
    ctx = fixing.context({"pkg/run.py": source}, BUILDS, given=given)
    plan = FIXER.plan(ctx)
    if not given:
        assert plan.empty
        return
    if unhandled:
        assert [u.finding for u in plan.unhandled] == [HASHING] and unhandled in plan.unhandled[0].reason
        assert not plan.edits and not plan.claims and not plan.pieces
        return
    assert not plan.unhandled and [c.covers(HASHING) for c in plan.claims] == [True]
    [adjust] = [p for p in plan.pieces if p.wraps]
    assert adjust.wraps == "CacheConfig" and 'kwargs["enable_prefix_caching"] = False' in adjust.code
    assert "vLLM 0.2.0" in plan.notes[0]
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    assert text.startswith("from pkg._vllm_compat import CacheConfig") and "vllm.config" not in text
