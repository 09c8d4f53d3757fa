"""probes/protocol.py: execute_model may return None and need sample_tokens next; the consumer's step loop."""

from __future__ import annotations

import pytest
from compat.probes.protocol import PROBE

from compat.findings import Status

from .executors import RUNNER_ONE_PHASE, build

STEP = '''
from vllm.v1.executor.multiproc_executor import MultiprocExecutor


def step(config, scheduler_output):
    executor = MultiprocExecutor(config)
    output = executor.execute_model(scheduler_output)
    {sample}
    return output
'''

SAMPLES = STEP.format(sample="output = output or executor.sample_tokens(None)")
SKIPS = STEP.format(sample="pass")
NO_RUNNER_TYPE = "class Worker:\n    def __init__(self, runner):\n        self.model_runner = runner\n"
NO_EXECUTE = "class GPUModelRunner:\n    pass\n"
NOT_AN_EXECUTOR = '''
from vllm.v1.executor.multiproc_executor import Gone


def step(config, scheduler_output):
    return Gone(config).execute_model(scheduler_output)
'''


@pytest.mark.parametrize(("source", "vllm", "status", "says"), [
    pytest.param(SKIPS, build(), Status.BROKEN,
                 ["returns None in this build", "never calls it", "State error: sample_tokens() must be called"],
                 id="two-phase-without-sample-tokens"),
    pytest.param(SAMPLES, build(), Status.OK, ["sample_tokens() must follow", "the consumer calls sample_tokens()"],
                 id="two-phase-with-sample-tokens"),
    pytest.param(SKIPS, build(runner=RUNNER_ONE_PHASE), Status.OK, ["returns the model output itself"],
                 id="one-phase"),
    pytest.param(SKIPS, build(sample=False), Status.OK, ["no second step"], id="executor-without-sample-tokens"),
    pytest.param(SKIPS, build(worker=NO_RUNNER_TYPE), Status.UNKNOWN,
                 ["cannot tell the execution protocol", "model runner class"], id="runner-class-unknown"),
    pytest.param(SKIPS, build(runner=NO_EXECUTE), Status.UNKNOWN, ["has no execute_model"], id="runner-without-it"),
    pytest.param(NOT_AN_EXECUTOR, build(), Status.UNKNOWN, ["cannot read execute_model"], id="executor-unknown"),
])
def test_the_step_against_the_build_s_execution_protocol(trees, source, vllm, status, says):
    findings = trees.findings(PROBE, source, vllm)
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


def test_a_worker_s_own_execute_model_is_not_judged(trees):
    source = '''
class Extension:
    def run(self, scheduler_output):
        return self.execute_model(scheduler_output)


def start():
    from vllm import LLM
    LLM("m", worker_extension_cls="consumer.Extension")
'''
    assert trees.findings(PROBE, source, build()) == []


OVERRIDE = '''
from vllm.v1.executor.multiproc_executor import MultiprocExecutor


class TimedExecutor(MultiprocExecutor):
    def execute_model(self, scheduler_output):
        inner = MultiprocExecutor(self.config)
        return inner.execute_model(scheduler_output)
'''


def test_execute_model_passed_on_inside_an_override_vllm_calls_is_not_the_consumer_s_loop(trees):
    """Inside ``TimedExecutor.execute_model``, an override of the executor's method, vLLM's engine calls the
    override and then sample_tokens itself: the call inside is not a step loop the consumer runs (it was broken)."""
    findings = trees.findings(PROBE, OVERRIDE, build())
    assert [f.status for f in findings] == [Status.OK], [f.message for f in findings]
    assert "which overrides vllm.v1.executor.multiproc_executor.MultiprocExecutor.execute_model" in findings[0].message
    # the same call in a function of its own is the consumer's step, judged as before
    plain = OVERRIDE.replace("class TimedExecutor(MultiprocExecutor):\n    def execute_model(self, scheduler_output):",
                             "class TimedExecutor:\n    def step(self, scheduler_output):")
    assert [f.status for f in trees.findings(PROBE, plain, build())] == [Status.BROKEN]
