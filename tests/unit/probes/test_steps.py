"""probes/steps.py: the consumer's own step loop against what the build's scheduler may do between steps."""

from __future__ import annotations

import pytest
from compat.probes.steps import PROBE

from compat.findings import Status

from ...test_steps_probe import CONSUMER
from ...test_steps_probe import scheduler_tree as build

LOOP = CONSUMER  # a speculators-shaped loop that finishes what each step scheduled

NOT_VLLMS = '''
    class Scheduler:
        def schedule(self):
            return None


    class Generator:
        def __init__(self):
            self.scheduler = Scheduler()

        def generate(self):
            while (out := self.scheduler.schedule()).total_num_scheduled_tokens > 0:
                for req_id in out.num_scheduled_tokens:
                    self.scheduler.finish_requests([req_id])
'''


# (the loop, the build, expected status (None: the probe says nothing), words the message holds)
CASES = [
    pytest.param(LOOP.format(chunked=""), build("True", "break"), Status.BROKEN,
                 ["splits a prompt at the step's token budget", "enable_chunked_prefill defaults to True"],
                 id="chunked-prefill-default-splits-prompts"),
    pytest.param(LOOP.format(chunked=""), build("None", "continue"), Status.BROKEN,
                 ["runs the prompts after it first", "continue"], id="skips-ahead-without-chunked-prefill"),
    pytest.param(LOOP.format(chunked=""), build("None", "break"), Status.OK,
                 ["computes whole prompts", "defaults to None"], id="stops-at-a-prompt-that-does-not-fit"),
    pytest.param(LOOP.format(chunked=", enable_chunked_prefill=False"), build("True", "break"), Status.OK,
                 ["the consumer's SchedulerConfig(enable_chunked_prefill=False)"], id="consumer-turns-chunking-off"),
    pytest.param(LOOP.format(chunked=""), build("True", "break", stale=True), Status.BROKEN,
                 ["splits a prompt", "never hands a step's output back", "is_stale_output"],
                 id="holds-preempted-until-output-handed-back"),
    pytest.param(NOT_VLLMS, build(), None, [], id="not-vllms-scheduler-says-nothing"),
    pytest.param(LOOP.format(chunked=""), {"vllm/v1/__init__.py": ""}, None, [], id="build-without-scheduler"),
]


@pytest.mark.parametrize(("source", "vllm", "status", "says"), CASES)
def test_the_loop_against_the_build_s_scheduler(trees, source, vllm, status, says):
    findings = trees.findings(PROBE, source, vllm)
    if status is None:
        assert findings == []
        return
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


def test_the_build_written_for_goes_into_the_evidence(trees):
    (finding,) = trees.findings(PROBE, LOOP.format(chunked=""), build("True", "break"), build("None", "break"))
    assert finding.status is Status.BROKEN
    assert "defaults to None" in finding.evidence.written_for
    assert "chunked prefill: True" in finding.evidence.audited
