"""probes/startup.py: the steps the build's engine core performs at start-up against the consumer's hand-built
pipeline: done too; skipped, judged by the state the step writes (broken where the consumer's path reads it, ok
where nothing does, where the read is tested first, where the step puts back what a constructor set or compares a
value with itself that nothing on the path changes); unknown where that cannot be read, new or not."""

from __future__ import annotations

import pytest
from compat.probes.startup import PROBE

from compat.findings import Status

EXECUTOR = '''
    _RESULTS = None


    class MultiprocExecutor:
        def __init__(self, vllm_config):
            self.vllm_config = vllm_config
            self.aggregator = None
            self.pending = []

        def collective_rpc(self, method, args=(), aggregator=None):
            {rpc}
            return []

        def get_kv_cache_specs(self):
            return []

        def initialize_from_config(self, kv_cache_configs):
            pass

        def register_failure_callback(self, callback):
            pass

        def init_kv_output_aggregator(self, connector):
            self.aggregator = connector

        def clear_pending(self):
            self.pending = []

        def keep_results(self, results):
            global _RESULTS
            _RESULTS = results

        def execute_model(self, scheduler_output):
            self.pending.append(scheduler_output)
            return self.collective_rpc("execute_model", aggregator=self.aggregator)

        def sample_tokens(self, grammar_output):
            return _RESULTS
'''

CORE = '''
    from vllm.v1.core.kv_cache_utils import init_none_hash


    class EngineCore:
        def __init__(self, vllm_config, executor_class):
            self.log_stats = False
            self.connector = None
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
    "init_kv_output_aggregator": "self.model_executor.init_kv_output_aggregator(self.connector)",
    "clear_pending": "self.model_executor.clear_pending()",
    "keep_results": "self.model_executor.keep_results([])",
    "update_max_model_len": "if vllm_config.model_config.max_model_len != vllm_config.model_config.max_model_len:\n"
                            "                self.model_executor.collective_rpc('update_max_model_len')",
    "register_failure_callback": "self.model_executor.register_failure_callback(print)",
}

CONFIG = '''
    class CacheConfig:
        def __init__(self, block_size=16, enable_prefix_caching=False):
            self.enable_prefix_caching = enable_prefix_caching


    class ModelConfig:
        def __init__(self, model, enforce_eager=False, max_model_len=512):
            self.enforce_eager = enforce_eager
            self.max_model_len = max_model_len


    class VllmConfig:
        def __init__(self, model_config: ModelConfig = None, cache_config: CacheConfig = None,
                     kv_transfer_config=None):
            self.model_config = model_config
'''


def build(*steps: str, core: bool = True, rpc: str = "pass") -> dict[str, str]:
    files = {
        "vllm/config/__init__.py": CONFIG,
        "vllm/v1/__init__.py": "",
        "vllm/v1/core/__init__.py": "",
        "vllm/v1/core/kv_cache_utils.py": "def init_none_hash(hash_fn):\n    pass\n",
        "vllm/v1/executor/__init__.py": "",
        "vllm/v1/executor/multiproc_executor.py": EXECUTOR.replace("{rpc}", rpc),
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
STEPPED = pipeline(more="executor.execute_model(None)")
TESTED = build(*ALL, rpc="if aggregator is not None:\n                aggregator.add(method)")
CASES = [
    pytest.param(pipeline(), None, "get_kv_cache_specs", Status.OK, ["executor get_kv_cache_specs is done by the "
                                                                     "consumer too"], id="done-too"),
    pytest.param(pipeline(more='executor.collective_rpc("init_device")'), None, "init_device", Status.OK,
                 ["rpc init_device is done by the consumer too"], id="rpc-done-too"),
    pytest.param(pipeline(), None, "init_device", Status.UNKNOWN,
                 ["the engine core performs rpc init_device at start-up", "what the step writes cannot be read"],
                 id="skipped-nothing-known"),
    pytest.param(pipeline(), BEFORE, "init_device", Status.UNKNOWN,
                 ["skipped with vLLM 0.0.0 as well", "cannot be read"], id="skipped-as-before-is-no-verdict"),
    pytest.param(pipeline(), BEFORE, "compile_or_warm_up_model", Status.UNKNOWN,
                 ["new since vLLM 0.0.0", "cannot be read"], id="new-is-no-verdict"),
    pytest.param(pipeline(), None, "register_failure_callback", Status.OK,
                 ["it writes no state the consumer's objects hold"], id="writes-nothing"),
    pytest.param(pipeline(), None, "init_kv_output_aggregator", Status.OK,
                 ["nothing on the consumer's path reads what it writes (MultiprocExecutor.aggregator of the "
                  "object it runs on)"], id="written-not-read"),
    pytest.param(STEPPED, None, "init_kv_output_aggregator", Status.BROKEN,
                 ["it writes MultiprocExecutor.aggregator of the object it runs on",
                  "which the consumer's path reads at MultiprocExecutor.execute_model"], id="written-and-read"),
    pytest.param(STEPPED, None, "clear_pending", Status.OK,
                 ["it writes no state the consumer's objects hold"], id="puts-back-what-the-constructor-set"),
    pytest.param(STEPPED, None, "keep_results", Status.OK,
                 ["nothing on the consumer's path reads what it writes (the module global "
                  "multiproc_executor._RESULTS)"], id="module-global-not-read"),
    pytest.param(pipeline(more="executor.sample_tokens(None)"), None, "keep_results", Status.BROKEN,
                 ["it writes the module global multiproc_executor._RESULTS",
                  "which the consumer's path reads at MultiprocExecutor.sample_tokens"], id="module-global-read"),
    pytest.param(pipeline(), None, "update_max_model_len", Status.OK,
                 ["runs it only when ModelConfig.max_model_len changed between two of its own reads",
                  "nothing on the consumer's path assigns it"], id="compares-a-value-with-itself"),
    pytest.param(pipeline(more="config.model_config.max_model_len = 256"), None, "update_max_model_len",
                 Status.UNKNOWN, ["cannot be read"], id="compares-a-value-the-consumer-assigns"),
]


@pytest.mark.parametrize(("source", "written_for", "step", "status", "says"), CASES)
def test_a_start_up_step_against_the_consumer_s_pipeline(trees, source, written_for, step, status, says):
    findings = trees.findings(PROBE, source, NOW, written_for)
    judged = [f for f in findings if f.touchpoint == f"startup:{step}"]
    assert [f.status for f in judged] == [status], [(f.touchpoint, f.message) for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message


def test_a_read_the_callee_tests_first_is_no_dependence(trees):
    """The executor passes the attribute straight on to collective_rpc, which tests it before using it: the
    pipeline runs without the step (TESTED); untested, the same read is broken (the written-and-read case)."""
    findings = trees.findings(PROBE, STEPPED, TESTED)
    [judged] = [f for f in findings if f.touchpoint == "startup:init_kv_output_aggregator"]
    assert judged.status is Status.OK, judged.message
    assert "but to test whether it is set, running without it" in judged.message


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
