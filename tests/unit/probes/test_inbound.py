"""probes/inbound.py: how vLLM calls the consumer's classes it loads (hooks it now calls, RPCs it now sends,
attributes it now reads on what an override returns), on the two builds of tests/test_inbound.py."""

from __future__ import annotations

import pytest
from compat.probes.inbound import PROBE

from compat.findings import Status

from ...test_inbound import BROKEN_PLUGIN, BUILD, FOLLOWS, NEW, OLD

THEN = {path: text.format(**OLD) for path, text in BUILD.items()}
NOW = {path: text.format(**NEW) for path, text in BUILD.items()}

# The hook called only from a device's own code (a path that runs where that platform is selected).
DEVICE_ONLY = {path: text.format(**{**NEW, "seed": "return seed"}) for path, text in BUILD.items()} | {
    "vllm/platforms/cuda.py": "from vllm.platforms import current_platform\n\n\n"
                              "def seed_all(seed):\n    current_platform.manual_seed_all(seed)\n"}
# The RPC sent only from an optional entry point, not from the engine core or its executors.
ENTRY_POINT_ONLY = {path: text.format(**{**NEW, "extra_rpc": ""}) for path, text in BUILD.items()} | {
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/rl.py": "from vllm.v1.executor.abstract import Executor\n\n\n"
                              "def reload(executor: Executor):\n    executor.collective_rpc(\"discard\")\n"}

# The hook's call in a try that takes a fallback where it raises NotImplementedError (vLLM 0.14.0's
# stateless_init_device_torch_dist_pg, distributed/utils.py: gloo then).
CAUGHT = {path: text.format(**{**NEW, "seed": "try:\n                current_platform.manual_seed_all(seed)\n"
                                              "            except {caught}:\n                return seed"})
          for path, text in BUILD.items()}

PLUGIN = BROKEN_PLUGIN.format(scheduler="")


# (consumer, audited build, expected status, words the message holds; the finding is the one whose message
#  holds the first word)
CASES = [
    pytest.param(PLUGIN, NOW, Status.BROKEN,
                 ["vLLM now calls manual_seed_all at vllm/utils.py", "consumer.MyPlatform does not define it",
                  "did not exist"], id="missing-hook"),
    pytest.param(PLUGIN, DEVICE_ONLY, Status.UNKNOWN,
                 ["vLLM now calls manual_seed_all at vllm/platforms/cuda.py",
                  "runs only where a feature, platform, backend or kernel is selected"], id="missing-hook-device-only"),
    pytest.param(PLUGIN, NOW, Status.BROKEN,
                 ["vLLM now sends profile to every worker at vllm/v1/executor/abstract.py",
                  "consumer.MyWorker.profile(is_start=True) refuses"], id="refused-rpc-arguments"),
    pytest.param(PLUGIN, NOW, Status.BROKEN,
                 ["vLLM now reads .language_model on what compile_or_warm_up_model returns",
                  "returns float (a float)"], id="return-value-lacks-what-vllm-reads"),
    pytest.param(PLUGIN, NOW, Status.BROKEN,
                 ["vLLM now sends discard to every worker by name at vllm/v1/executor/abstract.py",
                  "consumer.MyWorker has no discard", "AttributeError"], id="rpc-the-worker-lacks"),
    pytest.param(PLUGIN, ENTRY_POINT_ONLY, Status.UNKNOWN,
                 ["vLLM now sends discard to every worker by name", "sent only outside the engine core"],
                 id="rpc-the-worker-lacks-sent-by-an-entry-point"),
]


@pytest.mark.parametrize(("source", "vllm", "status", "says"), CASES)
def test_how_vllm_calls_the_consumer_s_classes(trees, source, vllm, status, says):
    findings = [f for f in trees.findings(PROBE, source, vllm, THEN) if says[0] in f.message]
    assert [f.status for f in findings] == [status], [f.message for f in trees.findings(PROBE, source, vllm, THEN)]
    for word in says:
        assert word in findings[0].message, findings[0].message


def test_a_plugin_that_follows_the_build_gets_nothing(trees):
    assert trees.findings(PROBE, FOLLOWS.format(scheduler=""), NOW, THEN) == []


def test_against_the_build_it_was_written_for_nothing_changed(trees):
    assert trees.findings(PROBE, PLUGIN, THEN, THEN) == []


def test_without_the_build_written_for_nothing_is_judged(trees):
    assert trees.findings(PROBE, PLUGIN, NOW) == []


def test_every_kind_is_one_finding_with_its_fix(trees):
    findings = trees.findings(PROBE, PLUGIN, NOW, THEN)
    assert sorted(f.symbol for f in findings) == [
        "consumer.MyWorker.compile_or_warm_up_model", "consumer.MyWorker.discard", "consumer.MyWorker.profile",
        "vllm.platforms.interface.Platform:manual_seed_all"]
    assert all(f.fix and f.evidence.written_for_build == "1.0.0" for f in findings)


def _default_builds(then: str, now: str):
    from ..facts.test_resolution import PLATFORMS

    config = ("from dataclasses import dataclass, field\n\n\n@dataclass\nclass SchedulerConfig:\n"
              "    async_scheduling: bool = {a}\n\n\n@dataclass\nclass VllmConfig:\n"
              "    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)\n")
    files = {**PLATFORMS, "vllm/config/__init__.py": "from vllm.config.vllm import SchedulerConfig, VllmConfig\n",
             "vllm/v1/__init__.py": "", "vllm/v1/worker/__init__.py": "", "vllm/v1/engine/__init__.py": "",
             "vllm/v1/worker/worker_base.py": ("class WorkerBase:\n    def execute_model(self):\n"
                                               "        return None\n\n"
                                               "    def sample_tokens(self, grammar):\n"
                                               "        raise NotImplementedError\n"),
             "vllm/v1/engine/core.py": ("class EngineCore:\n    def __init__(self, vllm_config, worker):\n"
                                        "        self.scheduler_config = vllm_config.scheduler_config\n"
                                        "        self.worker = worker\n\n    def step(self):\n"
                                        "        out = self.worker.execute_model()\n"
                                        "        if self.scheduler_config.async_scheduling:\n"
                                        "            out = self.worker.sample_tokens(None)\n        return out\n")}
    return ({**files, "vllm/config/vllm.py": config.format(a=then)},
            {**files, "vllm/config/vllm.py": config.format(a=now)})


WORKER_PLUGIN = """
    from vllm.v1.worker.worker_base import WorkerBase


    class MyWorker(WorkerBase):
        def execute_model(self):
            return 1
"""


@pytest.mark.parametrize(("then", "now", "expected"), [("False", "True", [Status.BROKEN]), ("False", "False", []),
                                                       ("True", "True", [])])
def test_a_default_that_makes_vllm_call_a_hook_the_plugin_leaves_raising_is_broken(trees, then, now, expected):
    """vLLM calls sample_tokens in both builds, but only under async_scheduling: broken where this build's default
    turns it on and the written-for build's did not (on every platform here), not where nothing changed."""
    old, new = _default_builds(then, now)
    found = [f for f in trees.findings(PROBE, WORKER_PLUGIN, new, old) if f.symbol.endswith(":sample_tokens")]
    assert [f.status for f in found] == expected, [f.message for f in found]
    if found:
        assert "when `(self.scheduler_config.async_scheduling)`" in found[0].message
        assert "SchedulerConfig.async_scheduling is True" in found[0].message and "on CUDA" in found[0].message


def test_a_hook_called_in_a_conditional_expression_is_read_with_its_condition(trees):
    old, new = _default_builds("False", "True")
    core = new["vllm/v1/engine/core.py"].replace(
        "        if self.scheduler_config.async_scheduling:\n            out = self.worker.sample_tokens(None)\n",
        "        out = self.worker.sample_tokens(None) if self.scheduler_config.async_scheduling else out\n")
    found = [f for f in trees.findings(PROBE, WORKER_PLUGIN, {**new, "vllm/v1/engine/core.py": core}, old)
             if f.symbol.endswith(":sample_tokens") or f.status is Status.ERROR]
    assert [f.status for f in found] == [Status.BROKEN], [f.message for f in found]


@pytest.mark.parametrize(("caught", "status"), [
    pytest.param("NotImplementedError", None, id="caught-by-name"),
    pytest.param("(ValueError, RuntimeError)", None, id="caught-by-a-base"),
    pytest.param("ValueError", Status.BROKEN, id="not-caught"),
])
def test_a_hook_vllm_calls_in_a_try_that_catches_its_raise_is_no_failure(trees, caught, status):
    vllm = {path: text.replace("{caught}", caught) for path, text in CAUGHT.items()}
    findings = [f for f in trees.findings(PROBE, PLUGIN, vllm, THEN) if "manual_seed_all" in f.message]
    assert [f.status for f in findings] == ([status] if status else []), [f.message for f in findings]



def _sends_under_a_test(test: str, direct: bool) -> dict[str, str]:
    """vLLM sends a new RPC, ``extend_cache``, only under ``test`` on its configs (``CacheConfig.extensible``
    resolves true on CUDA, false on CPU, as vLLM 0.34.0's ``enable_extensible_kv_cache``): from the engine core
    itself, or from an executor's def that the engine core calls under the test (0.34.0's ``extend_kv_cache``)."""
    from ..facts.test_resolution import CONFIG, PLATFORMS

    send = (f"        if {test}:\n            self.executor.collective_rpc(\"extend_cache\")\n" if direct else
            f"        extensible = {test}\n        if extensible:\n            self.executor.extend()\n")
    executor = "class Executor:\n    def extend(self):\n" + (
        "        pass\n" if direct else "        self.collective_rpc(\"extend_cache\")\n")
    return {**PLATFORMS, "vllm/config/__init__.py": "from vllm.config.vllm import CacheConfig, VllmConfig\n",
            "vllm/config/vllm.py": CONFIG, "vllm/v1/__init__.py": "", "vllm/v1/worker/__init__.py": "",
            "vllm/v1/engine/__init__.py": "", "vllm/v1/executor/__init__.py": "",
            "vllm/v1/executor/abstract.py": executor,
            "vllm/v1/worker/worker_base.py": "class WorkerBase:\n    def execute_model(self):\n        return None\n",
            "vllm/v1/engine/core.py": ("class EngineCore:\n    def __init__(self, vllm_config, executor):\n"
                                       "        self.vllm_config = vllm_config\n        self.executor = executor\n\n"
                                       "    def start(self):\n" + send)}


def _then(build: dict[str, str]) -> dict[str, str]:
    return {**build, "vllm/v1/executor/abstract.py": "class Executor:\n    def extend(self):\n        pass\n",
            "vllm/v1/engine/core.py": build["vllm/v1/engine/core.py"].split("    def start")[0]}


PLATFORM_PLUGIN = WORKER_PLUGIN + """

    from vllm.platforms.{module} import {base}


    class MyPlatform({base}):
        pass
"""
EXTENSIBLE = "self.vllm_config.cache_config.extensible"


@pytest.mark.parametrize("direct", [True, False], ids=["in-the-engine", "in-an-executor-def-the-engine-calls"])
@pytest.mark.parametrize(("plugin", "test", "status"), [
    pytest.param(WORKER_PLUGIN, EXTENSIBLE, Status.BROKEN, id="no-own-platform"),
    pytest.param(PLATFORM_PLUGIN.format(module="interface", base="Platform"), EXTENSIBLE, Status.UNKNOWN,
                 id="own-platform-decides"),
    pytest.param(PLATFORM_PLUGIN.format(module="cuda", base="CudaPlatformBase"), EXTENSIBLE, Status.BROKEN,
                 id="own-platform-on-vllm-s-cuda"),
    pytest.param(PLATFORM_PLUGIN.format(module="interface", base="Platform"),
                 "self.vllm_config.cache_config.memory_bytes is not None", Status.BROKEN,
                 id="off-on-every-platform-an-optional-path"),
])
def test_an_rpc_sent_only_under_a_test_the_platform_decides(trees, plugin, test, status, direct):
    """tpu-inference 0.32.0 at vLLM 0.34.0: extend_kv_cache and set_kv_cache_reclaimable are sent only under
    ``enable_extensible_kv_cache``, which vLLM turns on for CUDA only; TpuPlatform is made on vLLM's Platform
    interface, so its own code decides. A test false on every platform is a feature a user turns on: broken there."""
    build = _sends_under_a_test(test, direct)
    found = [f for f in trees.findings(PROBE, plugin, build, _then(build)) if "extend_cache" in f.symbol]
    assert [f.status for f in found] == [status], [f.message for f in found]
    if status is Status.UNKNOWN:
        assert f"sent only when `({test})`" in found[0].message, found[0].message
        assert "by default CUDA: True, CPU: False; consumer.MyPlatform, the consumer's own platform" \
            in found[0].message, found[0].message
