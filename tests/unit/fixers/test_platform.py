"""fixers/platform.py: CUDA-only calls and a fixed KV block size, so the consumer also runs on vLLM's CPU builds
(no finding is involved): ``torch.cuda.mem_get_info()`` answered by the executor built beside it (and the KV cache
share taken of it replaced by the engine's own budget), ``torch.cuda.empty_cache()`` only where there is CUDA,
``CacheConfig(block_size=...)`` left to the CPU backend; skipped where no executor is built beside the call or
CacheConfig is not imported by its own name."""

from __future__ import annotations

import pytest
from compat.fixers.platform import FIXER

BUILDS = {"0.1.0": {"vllm/config.py": "class CacheConfig:\n    def __init__(self, block_size=16):\n        pass\n"},
          "0.2.0": {"vllm/config.py": "class CacheConfig:\n    def __init__(self, block_size=None):\n        pass\n"}}
EXECUTOR = "from vllm.v1.executor.abstract import Executor\nimport torch\n\n\n"
MEMORY = EXECUTOR + ("def start(config):\n    executor = Executor(config)\n    free, _ = torch.cuda.mem_get_info()\n"
                     "    cache = int(free * 0.9)\n    return executor, cache\n")
NO_EXECUTOR = EXECUTOR + "def start(config):\n    free, _ = torch.cuda.mem_get_info()\n    return free\n"
EMPTY = EXECUTOR + "def stop(config):\n    Executor(config)\n    torch.cuda.empty_cache()\n"
BLOCK = "from vllm.config import CacheConfig\n\n\ndef make():\n    return CacheConfig(block_size=16)\n"
ALIASED = "from vllm.config import CacheConfig as CC\n\n\ndef make():\n    return CC(block_size=16)\n"
UNSIZED = "from vllm.config import CacheConfig\n\n\ndef make():\n    return CacheConfig()\n"


@pytest.mark.parametrize(("source", "keys", "edited"), [
    pytest.param(MEMORY, ["platform:device_memory", "platform:kv_cache_budget"],
                 ["free, _ = vllm_compat.device_memory(executor)",
                  "cache = vllm_compat.kv_cache_budget(executor, int(free * 0.9))"], id="device memory and budget"),
    pytest.param(NO_EXECUTOR, [], [], id="no executor beside it: skipped"),
    pytest.param(EMPTY, ["platform:empty_cache"], ["    vllm_compat.empty_cache()"], id="empty_cache"),
    pytest.param(BLOCK, ["adjust:CacheConfig:platform"], ["from pkg._vllm_compat import CacheConfig",
                                                         "return CacheConfig(block_size=16)"], id="block size"),
    pytest.param(ALIASED, [], [], id="aliased CacheConfig: skipped"),
    pytest.param(UNSIZED, [], [], id="no block size: nothing"),
])
def test_cuda_only(fixing, source, keys, edited):
    ctx = fixing.context({"pkg/run.py": source}, BUILDS)
    plan = FIXER.plan(ctx)
    assert not plan.claims and not plan.unhandled and not plan.accepted
    assert [p.key for p in plan.pieces if not p.key.startswith("raw:")] == keys, [p.key for p in plan.pieces]
    assert len(plan.notes) == len(keys)
    if not keys:
        assert plan.empty
        return
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    for line in edited:
        assert line in text, text
    assert "torch.cuda" not in text
