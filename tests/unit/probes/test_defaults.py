"""probes/defaults.py: config fields the consumer leaves out whose default is not the one of the build it was
written for (the trees of tests/test_defaults.py: a SchedulerConfig whose enable_chunked_prefill goes from None
to True as between vLLM 0.11.0 and 0.11.1)."""

from __future__ import annotations

import pytest
from compat.probes.defaults import PROBE

from compat.findings import Status

from ...test_defaults import CONSUMER, NEW, OLD

SCHEDULER = "vllm/config/scheduler.py"
# The audited build with one more changed default that nothing in the build reads.
NEW_POLICY = {**NEW, SCHEDULER: NEW[SCHEDULER].replace('policy: str = "fcfs"', 'policy: str = "priority"')}

OPAQUE = """
    from vllm.config import SchedulerConfig


    def run(options):
        return SchedulerConfig(**options)
"""

GUARDED = """
    from vllm.config import SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler


    def run():
        if hasattr(SchedulerConfig, "async_scheduling"):
            config = VllmConfig(scheduler_config=SchedulerConfig(max_num_seqs=4))
            return Scheduler(config).schedule()
"""

WITHOUT_OBSERVABILITY = """
    from vllm.config import VllmConfig


    def run():
        return VllmConfig()
"""

NOT_A_CONFIG = """
    from vllm.v1.core.sched.scheduler import Scheduler


    def run(config):
        return Scheduler(config).schedule()
"""

# (consumer, audited build, the field judged, expected status (None: no finding for it), words the message holds)
CASES = [
    pytest.param(CONSUMER, NEW, "SchedulerConfig.enable_chunked_prefill", Status.CHANGED,
                 ["defaults to True in this build (None in vLLM 9.0.0", "read by Scheduler.schedule",
                  "which the consumer calls at"], id="changed-read-by-code-it-calls"),
    pytest.param(CONSUMER, NEW, "CacheConfig.enable_prefix_caching", Status.CHANGED, ["Scheduler.__init__"],
                 id="changed-read-by-a-constructor-it-calls"),
    pytest.param(CONSUMER, NEW, "SchedulerConfig.stream_interval", Status.OK,
                 ["no code the consumer calls reads it directly", "OutputProcessor.process_outputs"],
                 id="ok-read-only-elsewhere"),
    pytest.param(CONSUMER, NEW_POLICY, "SchedulerConfig.policy", Status.OK,
                 ["defaults to 'priority'", "nothing in this build reads it through scheduler_config"],
                 id="ok-read-by-nothing"),
    pytest.param(WITHOUT_OBSERVABILITY, NEW, "VllmConfig.observability_config", Status.OK,
                 ["None became a default ObservabilityConfig()"], id="none-became-a-default-instance"),
    pytest.param(GUARDED, NEW, "SchedulerConfig.enable_chunked_prefill", Status.UNKNOWN,
                 ["read by Scheduler.schedule", "but this call is guarded", "hasattr(SchedulerConfig"],
                 id="unknown-guarded"),
    pytest.param(CONSUMER, NEW, "SchedulerConfig.policy", None, [], id="unchanged-default"),
    pytest.param(CONSUMER, NEW, "SchedulerConfig.max_num_seqs", None, [], id="passed-field"),
    pytest.param(CONSUMER, NEW, "SchedulerConfig.new_field", None, [], id="new-field"),
    pytest.param(CONSUMER, NEW, "SchedulerConfig.async_scheduling", None, [], id="always-rewritten-to-the-old"),
    pytest.param(NOT_A_CONFIG, NEW, "SchedulerConfig.enable_chunked_prefill", None, [], id="no-config-built"),
]


@pytest.mark.parametrize(("source", "vllm", "field", "status", "says"), CASES)
def test_a_field_left_to_its_default(trees, source, vllm, field, status, says):
    findings = trees.findings(PROBE, source, vllm, OLD)
    judged = [f for f in findings if f.symbol == f"vllm.config.{field}"]
    if status is None:
        assert judged == [], [f.message for f in judged]
        return
    assert [f.status for f in judged] == [status], [(f.symbol, f.message) for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message


def test_opaque_keyword_arguments_are_one_ok_naming_the_differing_fields(trees):
    findings = trees.findings(PROBE, OPAQUE, NEW, OLD)
    assert [(f.status, f.symbol) for f in findings] == [(Status.OK, "vllm.config.SchedulerConfig")]
    assert "opaque *args/**kwargs" in findings[0].message
    assert "enable_chunked_prefill (None -> True)" in findings[0].message


def test_without_the_build_written_for_there_is_nothing_to_compare(trees):
    assert trees.findings(PROBE, CONSUMER, NEW) == []


def test_a_config_class_new_in_this_build_has_no_default_to_have_changed(trees):
    new = {**NEW, "vllm/config/speculative.py": "from dataclasses import dataclass\n\n\n@dataclass\n"
                                                "class SpeculativeConfig:\n    num_speculative_tokens: int = 3\n"}
    source = CONSUMER.replace("def run(options):", "def run(options):\n        SpeculativeConfig()").replace(
        "from vllm.config import", "from vllm.config.speculative import SpeculativeConfig\n    from vllm.config import")
    findings = trees.findings(PROBE, source, new, OLD)
    assert not [f for f in findings if "SpeculativeConfig" in f.symbol]
    assert [f.status for f in findings if f.symbol == "vllm.config.SchedulerConfig.enable_chunked_prefill"] == [
        Status.CHANGED]


def test_the_fix_passes_the_value_the_consumer_was_written_against(trees):
    findings = trees.findings(PROBE, CONSUMER, NEW, OLD)
    (chunked,) = [f for f in findings if f.symbol == "vllm.config.SchedulerConfig.enable_chunked_prefill"]
    assert "pass enable_chunked_prefill=False to SchedulerConfig(...)" in chunked.fix
    assert (chunked.evidence.written_for, chunked.evidence.audited) == ("None", "True")


def _switch_builds():
    from ..facts.test_resolution import CONFIG, PLATFORMS

    worker = ("class GpuWorker:\n    def __init__(self, vllm_config):\n"
              "        self.cache_config = vllm_config.cache_config\n\n"
              "    def initialize_from_config(self):\n        if self.cache_config.extensible:\n            return 1\n")
    executor = ("class Executor:\n    def __init__(self, vllm_config):\n        self.vllm_config = vllm_config\n\n"
                "    def initialize_from_config(self):\n        self.collective_rpc('initialize_from_config')\n")
    init = "from vllm.config.vllm import CacheConfig, VllmConfig, KVTransferConfig\n"
    new = {**PLATFORMS, "vllm/config/__init__.py": init, "vllm/config/vllm.py": CONFIG, "vllm/worker.py": worker,
           "vllm/executor.py": executor}
    old_config = CONFIG.replace("    extensible: bool = None\n", "").replace(
        "        self._transfer()\n        self._resolve()\n", "        self._transfer()\n")
    old = {**new, "vllm/config/vllm.py": old_config}
    return old, new


SWITCH_CONSUMER = """
    from vllm.config import CacheConfig, VllmConfig
    from vllm.executor import Executor


    def run():
        config = VllmConfig(cache_config=CacheConfig(block_size=16))
        Executor(config).initialize_from_config()
"""


def test_a_new_switch_the_build_turns_on_on_one_platform_is_changed_naming_it(trees):
    """A switch the written-for build lacks, declared None, that the build's own construction turns on on CUDA and
    off on CPU, read by the worker the consumer's executor reaches through an RPC: changed, per platform."""
    old, new = _switch_builds()
    [found] = [f for f in trees.findings(PROBE, SWITCH_CONSUMER, new, written_for=old) if f.symbol.endswith(
        ".extensible")]
    assert found.status is Status.CHANGED, found.message
    extra = dict(found.evidence.extra)
    assert extra["platform_cuda"].startswith("True (vllm/config/vllm.py:")
    assert extra["platform_cpu"].startswith("False (vllm/config/vllm.py:")
    assert "GpuWorker.initialize_from_config" in found.message
    assert found.evidence.written_for.startswith("absent")


def test_a_new_switch_nothing_on_the_path_reads_is_no_finding(trees):
    old, new = _switch_builds()
    new = {**new, "vllm/worker.py": new["vllm/worker.py"].replace("self.cache_config.extensible", "True")}
    assert not [f for f in trees.findings(PROBE, SWITCH_CONSUMER, new, written_for=old) if f.symbol.endswith(
        ".extensible")]


def test_a_new_switch_passed_by_the_consumer_is_no_finding(trees):
    old, new = _switch_builds()
    consumer = SWITCH_CONSUMER.replace("CacheConfig(block_size=16)", "CacheConfig(block_size=16, extensible=False)")
    assert not [f for f in trees.findings(PROBE, consumer, new, written_for=old) if f.symbol.endswith(".extensible")]
