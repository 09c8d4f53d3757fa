"""probes/startup.py: the steps the build's engine core performs at start-up against the consumer's hand-built
pipeline (done too, not needed and why, new since the build it was written for, skipped as before)."""

from __future__ import annotations

import pytest
from compat.probes.startup import PROBE

from compat.findings import Status

EXECUTOR = '''
    class MultiprocExecutor:
        def __init__(self, vllm_config):
            self.vllm_config = vllm_config

        def collective_rpc(self, method, args=()):
            return []

        def get_kv_cache_specs(self):
            return []

        def initialize_from_config(self, kv_cache_configs):
            pass

        def register_failure_callback(self, callback):
            pass
'''

CORE = '''
    from vllm.v1.core.kv_cache_utils import init_none_hash


    class EngineCore:
        def __init__(self, vllm_config, executor_class):
            self.log_stats = False
            self.model_executor = executor_class(vllm_config)
            self._initialize_kv_caches(vllm_config)
            {steps}

        def _initialize_kv_caches(self, vllm_config):
            specs = self.model_executor.get_kv_cache_specs()
            self.model_executor.initialize_from_config(specs)
'''

STEPS = {
    "init_device": 'self.model_executor.collective_rpc("init_device")',
    "compile_or_warm_up_model": 'self.model_executor.collective_rpc("compile_or_warm_up_model")',
    "init_kv_output_aggregator": 'self.model_executor.collective_rpc("init_kv_output_aggregator")',
    "init_none_hash": "init_none_hash(hash)",
    "register_failure_callback": "self.model_executor.register_failure_callback(print)",
}

CONFIG = '''
    class CacheConfig:
        def __init__(self, block_size=16, enable_prefix_caching=False):
            self.enable_prefix_caching = enable_prefix_caching


    class ModelConfig:
        def __init__(self, model, enforce_eager=False):
            self.enforce_eager = enforce_eager


    class VllmConfig:
        def __init__(self, model_config=None, cache_config=None, kv_transfer_config=None):
            self.model_config = model_config
'''


def build(*steps: str, core: bool = True) -> dict[str, str]:
    files = {
        "vllm/config/__init__.py": CONFIG,
        "vllm/v1/__init__.py": "",
        "vllm/v1/core/__init__.py": "",
        "vllm/v1/core/kv_cache_utils.py": "def init_none_hash(hash_fn):\n    pass\n",
        "vllm/v1/executor/__init__.py": "",
        "vllm/v1/executor/multiproc_executor.py": EXECUTOR,
        "vllm/v1/engine/__init__.py": "",
    }
    if core:
        files["vllm/v1/engine/core.py"] = CORE.format(steps="\n            ".join(STEPS[s] for s in steps) or "pass")
    return files


PIPELINE = '''
from vllm.config import CacheConfig, ModelConfig, VllmConfig
from vllm.v1.executor.multiproc_executor import MultiprocExecutor


def start():
    config = VllmConfig(model_config=ModelConfig("m"{model}), cache_config=CacheConfig({cache}){kv})
    executor = MultiprocExecutor(config)
    specs = executor.get_kv_cache_specs()
    executor.initialize_from_config(specs)
    {more}
'''


def pipeline(model: str = "", cache: str = "", kv: str = "", more: str = "pass") -> str:
    return PIPELINE.format(model=model, cache=cache, kv=kv, more=more)


ALL = tuple(STEPS)
NOW = build(*ALL)
BEFORE = build("init_device")  # the build written for: only init_device after the KV cache set-up


# (consumer, build written for (None: not known), the start-up step, expected status, words the message holds)
CASES = [
    pytest.param(pipeline(), None, "get_kv_cache_specs", Status.OK, ["executor get_kv_cache_specs is done by the "
                                                                     "consumer too"], id="done-too"),
    pytest.param(pipeline(more='executor.collective_rpc("init_device")'), None, "init_device", Status.OK,
                 ["rpc init_device is done by the consumer too"], id="rpc-done-too"),
    pytest.param(pipeline(), None, "init_device", Status.UNKNOWN,
                 ["the engine core performs rpc init_device at start-up", "the consumer's pipeline does not"],
                 id="skipped-nothing-known"),
    pytest.param(pipeline(), BEFORE, "init_device", Status.OK, ["skips the start-up step rpc init_device, as it "
                                                                "did with vLLM 0.0.0"], id="skipped-as-before"),
    pytest.param(pipeline(), None, "register_failure_callback", Status.OK,
                 ["correctness does not depend on", "reports a dead worker"], id="not-needed-always"),
    pytest.param(pipeline(model=", enforce_eager=True"), BEFORE, "compile_or_warm_up_model", Status.OK,
                 ["does not depend on", "the consumer's ModelConfig(enforce_eager=True)"], id="not-needed-eager"),
    pytest.param(pipeline(model=", enforce_eager=False"), BEFORE, "compile_or_warm_up_model", Status.CHANGED,
                 ["now performs rpc compile_or_warm_up_model", "new since vLLM 0.0.0", "could be skipped if the "
                  "model runs eagerly", "ModelConfig(enforce_eager=False)"], id="new-and-needed-not-eager"),
    pytest.param(pipeline(model=", enforce_eager=False"), None, "compile_or_warm_up_model", Status.UNKNOWN,
                 ["performs rpc compile_or_warm_up_model"], id="needed-not-eager-nothing-known"),
    pytest.param(pipeline(), BEFORE, "compile_or_warm_up_model", Status.OK,
                 ["this assumes the model runs eagerly"], id="not-needed-unread-assumption"),
    pytest.param(pipeline(), BEFORE, "init_kv_output_aggregator", Status.OK,
                 ["no KV connector is configured: the consumer's VllmConfig(...) passes no kv_transfer_config"],
                 id="no-kv-connector"),
    pytest.param(pipeline(kv=", kv_transfer_config=KVTransferConfig()"), BEFORE, "init_kv_output_aggregator",
                 Status.OK, ["this assumes no KV connector is configured"], id="kv-connector-opaque"),
    pytest.param(pipeline(cache="enable_prefix_caching=True"), BEFORE, "init_none_hash", Status.CHANGED,
                 ["now performs function init_none_hash", "the consumer's CacheConfig(enable_prefix_caching=True)"],
                 id="prefix-caching-on"),
    pytest.param(pipeline(cache="enable_prefix_caching=False"), BEFORE, "init_none_hash", Status.OK,
                 ["prefix caching is off: the consumer's CacheConfig(enable_prefix_caching=False)"],
                 id="prefix-caching-off"),
]


@pytest.mark.parametrize(("source", "written_for", "step", "status", "says"), CASES)
def test_a_start_up_step_against_the_consumer_s_pipeline(trees, source, written_for, step, status, says):
    findings = trees.findings(PROBE, source, NOW, written_for)
    judged = [f for f in findings if f.touchpoint == f"startup:{step}"]
    assert [f.status for f in judged] == [status], [(f.touchpoint, f.message) for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message


def test_a_new_step_s_evidence_says_it_was_none_before(trees):
    findings = trees.findings(PROBE, pipeline(model=", enforce_eager=False"), NOW, BEFORE)
    (new,) = [f for f in findings if f.touchpoint == "startup:compile_or_warm_up_model"]
    assert new.evidence.written_for == "not a start-up step" and new.evidence.written_for_build == "0.0.0"


def test_an_unreadable_engine_core_is_one_unknown(trees):
    findings = trees.findings(PROBE, pipeline(), build(core=False))
    assert [f.status for f in findings] == [Status.UNKNOWN]
    assert "cannot read the engine core's start-up" in findings[0].message


def test_no_hand_built_executor_no_finding(trees):
    assert trees.findings(PROBE, "from vllm.config import ModelConfig\n\nModelConfig('m')\n", NOW) == []


def _extensible_builds():
    """An engine core that, when CacheConfig.extensible resolves on (CUDA, not CPU: the build's own
    construction), extends the KV cache after initialize_from_config, whose worker side reads the switch."""
    from ..facts.test_resolution import CONFIG, PLATFORMS

    executor = ("class MultiprocExecutor:\n    def __init__(self, vllm_config):\n"
                "        self.vllm_config = vllm_config\n\n"
                "    def collective_rpc(self, method, args=()):\n        return []\n\n"
                "    def initialize_from_config(self, configs):\n"
                "        self.collective_rpc('initialize_from_config')\n\n"
                "    def extend_kv_cache(self, n):\n        self.collective_rpc('extend_kv_cache', args=(n,))\n")
    worker = ("class GpuWorker:\n    def __init__(self, vllm_config):\n"
              "        self.cache_config = vllm_config.cache_config\n\n"
              "    def initialize_from_config(self):\n        if self.cache_config.extensible:\n"
              "            self.reserve()\n\n"
              "    def reserve(self):\n        pass\n")
    core = ("class EngineCore:\n    def __init__(self, vllm_config, executor_class):\n"
            "        self.model_executor = executor_class(vllm_config)\n"
            "        self.model_executor.initialize_from_config([])\n"
            "        extensible = vllm_config.cache_config.extensible\n"
            "        if extensible:\n            self.model_executor.extend_kv_cache(8)\n")
    return {**PLATFORMS, "vllm/config/__init__.py": "from vllm.config.vllm import CacheConfig, VllmConfig, "
            "KVTransferConfig\n", "vllm/config/vllm.py": CONFIG, "vllm/worker.py": worker,
            "vllm/v1/__init__.py": "", "vllm/v1/engine/__init__.py": "", "vllm/v1/engine/core.py": core,
            "vllm/v1/executor/__init__.py": "", "vllm/v1/executor/multiproc_executor.py": executor}


EXTENSIBLE_PIPELINE = """
    from vllm.config import CacheConfig, VllmConfig
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor


    def run():
        config = VllmConfig(cache_config=CacheConfig({cache}))
        executor = MultiprocExecutor(config)
        executor.initialize_from_config([])
"""


@pytest.mark.parametrize(("cache", "settings", "cuda"), [
    ("block_size=16", (), "on CUDA: broken"),
    ("block_size=16, extensible=False", (), "on CUDA: ok, the engine core skips it too"),
    ("block_size=16", (("CacheConfig", "extensible", "False"),), "on CUDA: ok, the engine core skips it too"),
])
def test_a_step_under_a_switch_is_judged_per_platform_by_what_the_path_reads(trees, cache, settings, cuda):
    """The step runs where the build turns the switch on (CUDA), and the worker the consumer's executor reaches
    reads the switch: broken there; on CPU the engine core skips it too. A switch the consumer (or the shim's
    pinned defaults, Scan.settings) turns off makes it ok everywhere."""
    from dataclasses import replace

    from compat.audit.pipeline import run_probes

    ctx = trees.context(EXTENSIBLE_PIPELINE.format(cache=cache), _extensible_builds())
    ctx = replace(ctx, scan=replace(ctx.scan, settings=settings))
    [step] = [f for f in run_probes(ctx, [PROBE]) if f.touchpoint == "startup:extend_kv_cache"]
    assert cuda in step.message, step.message
    assert "on CPU: ok, the engine core skips it too" in step.message
    assert step.status is (Status.BROKEN if "broken" in cuda else Status.OK)
    if step.status is Status.BROKEN:
        assert "CacheConfig.extensible is True" in step.message and "GpuWorker.initialize_from_config" in step.message
