"""probes/block_hashing.py: whether the consumer's Requests need a block hasher under its cache configuration."""

from __future__ import annotations

import pytest
from compat.probes.block_hashing import PROBE

from compat.findings import Status

from . import llama
from .llama import patch

CACHE = '''
    from dataclasses import dataclass


    @dataclass
    class CacheConfig:
        block_size: int = 16
        enable_prefix_caching: bool = {default}
'''

POOL = '''
    class BlockPool:
        def cache_full_blocks(self, request, num_full_blocks):
            assert len(request.block_hashes) >= num_full_blocks
'''

HASHING = '''
    NONE_HASH: bytes


    def init_none_hash(hash_fn):
        global NONE_HASH
        NONE_HASH = hash_fn(b"")


    def get_request_block_hasher(block_size, hash_fn):
        return lambda request: [NONE_HASH]
'''

REQUEST = '''
    class Request:
        def __init__(self, request_id, prompt_token_ids, block_hasher=None):
            self.block_hashes = []
'''


def build(default: str = "True") -> dict[str, str]:
    return {
        "vllm/config/__init__.py": "from vllm.config.cache import CacheConfig\n",
        "vllm/config/cache.py": CACHE.format(default=default),
        "vllm/v1/__init__.py": "",
        "vllm/v1/request.py": REQUEST,
        "vllm/v1/core/__init__.py": "",
        "vllm/v1/core/block_pool.py": POOL,
        "vllm/v1/core/kv_cache_utils.py": HASHING,
    }


def consumer(config: str = "", hasher: bool = False, init: bool = True) -> str:
    lines = ["from vllm.config import CacheConfig",
             "from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash",
             "from vllm.v1.request import Request", "",
             "def make(tokens):", f"    config = CacheConfig(block_size=16{config})"]
    if hasher and init:
        lines.append("    init_none_hash(hash)")
    if hasher:
        lines.append("    return Request('r', tokens, block_hasher=get_request_block_hasher(16, hash))")
    else:
        lines.append("    return Request('r', tokens)")
    return "\n".join(lines) + "\n"


# A consumer that also installs its own forward on the decoder stack (the rows it captures are the point).
CAPTURES = {"consumer/__init__.py": "", "consumer/requests.py": consumer(hasher=True), "consumer/capture.py": patch()}


@pytest.mark.parametrize(("source", "vllm", "status", "says"), [
    pytest.param(consumer(), build("True"), Status.BROKEN,
                 ["prefix caching is on", "default CacheConfig.enable_prefix_caching=True", "gets no block_hasher",
                  "AssertionError", "assert len(request.block_hashes)"], id="default-on-no-hasher"),
    pytest.param(consumer(", enable_prefix_caching=True"), build("False"), Status.BROKEN,
                 ["the consumer's CacheConfig(enable_prefix_caching=True)", "gets no block_hasher"],
                 id="consumer-turns-it-on"),
    pytest.param(consumer(), build("False"), Status.OK, ["prefix caching is off", "need no block hasher"],
                 id="default-off"),
    pytest.param(consumer(", enable_prefix_caching=False"), build("True"), Status.OK,
                 ["prefix caching is off (the consumer's CacheConfig(enable_prefix_caching=False))"],
                 id="consumer-turns-it-off"),
    pytest.param(consumer(hasher=True), build("True"), Status.OK, ["gets a block hasher"], id="hasher-passed"),
    pytest.param(consumer(hasher=True, init=False), build("True"), Status.BROKEN,
                 ["hashes with NONE_HASH", "undefined (annotation only: NameError)", "never calls init_none_hash"],
                 id="hasher-without-init-none-hash"),
    pytest.param(CAPTURES, {**build("True"), **llama.build()}, Status.CHANGED,
                 ["skip its forward pass", "captures fewer rows"], id="prefix-cache-with-patched-forward"),
])
def test_a_request_against_the_build_s_prefix_caching(trees, source, vllm, status, says):
    findings = trees.findings(PROBE, source, vllm)
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


def test_a_request_not_vllms_is_not_judged(trees):
    source = "class Request:\n    pass\n\n\ndef make():\n    return Request()\n"
    assert trees.findings(PROBE, source, build()) == []


def test_the_build_written_for_goes_into_the_evidence(trees):
    (finding,) = trees.findings(PROBE, consumer(), build("True"), build("False"))
    assert finding.status is Status.BROKEN
    assert finding.evidence.written_for == "default enable_prefix_caching=False"
