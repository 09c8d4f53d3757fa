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
