"""fixers/steps.py: the consumer's own step loop (``steps`` findings) run as the engine core runs steps, each
request given its own rows: the loop becomes ``run_steps``, the requests are preceded by ``begin_call``, a cut of
the prompts becomes ``truncated``, the fetched rows go through ``by_request``; declined, with why, where the loop
is not one the scan read, does more than step and finish, finishes another set, keeps no positions (no capture
hooks), adds no requests in a loop, or fetches no rows after it.

The ``steps`` and ``model`` findings are given; the consumer is hand-written (its capture is test_capture's)."""

from __future__ import annotations

import pytest
from compat.fixers.steps import FIXER

from .conftest import finding
from .test_capture import PLAIN as CAPTURE

GENERATOR = '''from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.executor.abstract import Executor
from vllm.v1.request import Request, RequestStatus


class Generator:
    def __init__(self, config):
        self.scheduler = Scheduler(vllm_config=config)
        self.executor = Executor(config)
        self.layer_ids = [1, 2]
        self.executor.collective_rpc("install", args=(self.layer_ids,))

    def generate(self, prompts):
        prompts = [p[:100] for p in prompts]
        for i, prompt in enumerate(prompts):
            self.scheduler.add_request(Request(str(i), prompt))
        while (scheduler_output := self.scheduler.schedule()).total_num_scheduled_tokens > 0:
            self.executor.execute_model(scheduler_output)
            for req_id in scheduler_output.num_scheduled_tokens:
                self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)
        {fetch}
        return rows
'''
FETCH = 'rows = self.executor.collective_rpc("fetch", unique_reply_rank=0)'
PLAIN = GENERATOR.format(fetch=FETCH)
NO_FETCH = GENERATOR.format(fetch="rows = []")
OTHERS = PLAIN.replace("            self.executor.execute_model(scheduler_output)\n",
                       "            self.executor.execute_model(scheduler_output)\n            self.tick()\n")
ONE_REQUEST = PLAIN.replace("        for i, prompt in enumerate(prompts):\n            self.scheduler.add_request(",
                            "        if prompts:\n            self.scheduler.add_request(")
SOME = PLAIN.replace("for req_id in scheduler_output.num_scheduled_tokens:", "for req_id in self.done:")
BUILDS = {"0.1.0": {}, "0.2.0": {}}
LOOP = "pkg/gen.py:17"


@pytest.mark.parametrize(("source", "location", "fixers", "unhandled"), [
    pytest.param(PLAIN, LOOP, ("capture", "steps"), "", id="loop rewritten"),
    pytest.param(PLAIN, "pkg/gen.py:13", ("capture", "steps"), "not a step loop the scan read", id="not a loop"),
    pytest.param(SOME, "pkg/gen.py:17", ("capture", "steps"), "does not run `<executor>.execute_model(out)` and "
                 "finish the step's requests", id="finishes another set: declined"),
    pytest.param(OTHERS, LOOP, ("capture", "steps"), "the loop also runs 'self.tick()'", id="loop does more"),
    pytest.param(PLAIN, LOOP, ("steps",), "captured by the consumer's own forward, which keeps no positions",
                 id="capture fixer left out: declined"),
    pytest.param(ONE_REQUEST, LOOP, ("capture", "steps"), "the requests are not added by a `for ... in <prompts>` "
                 "loop", id="requests not added in a loop: declined"),
    pytest.param(NO_FETCH, LOOP, ("capture", "steps"), "no RPC after the loop fetches the captured rows",
                 id="no rows fetched: declined"),
])
def test_step_loop(fixing, source, location, fixers, unhandled):
    steps = finding("steps", "vllm.v1.core.sched.scheduler.Scheduler.schedule", location)
    model = finding("model", "LlamaForCausalLM:layers", "pkg/run.py:27")
    ctx = fixing.context({"pkg/run.py": CAPTURE, "pkg/gen.py": source}, BUILDS,
                         given={"0.2.0": [steps, model]}, fixers=fixers)
    plan = FIXER.plan(ctx)
    if unhandled:
        assert [u.finding for u in plan.unhandled] == [steps]
        assert unhandled in plan.unhandled[0].reason, plan.unhandled
        assert not plan.edits and not plan.pieces and not plan.claims
        return
    assert not plan.unhandled and any(c.covers(steps) for c in plan.claims)
    chunked = finding("defaults", "vllm.config.SchedulerConfig.enable_chunked_prefill", "pkg/gen.py:8")
    assert any(c.covers(chunked) for c in plan.claims)
    assert [p.key for p in plan.pieces] == ["protocol:execute_model", "steps:run", "steps:by_request"]
    text = fixing.edited(ctx, plan)["pkg/gen.py"]
    assert "    def generate(self, prompts):\n" \
           "        prompts = vllm_compat.truncated(prompts, 100)\n" \
           "        vllm_compat.begin_call(self.scheduler, self.executor, prompts, RequestStatus.FINISHED_ABORTED)\n" \
           "        for i, prompt in enumerate(prompts):\n" in text, text
    assert "        vllm_compat.run_steps(self.scheduler, self.executor, RequestStatus.FINISHED_ABORTED)\n" \
           f"        {FETCH}\n" \
           "        rows = vllm_compat.by_request(self.scheduler, self.executor, rows, layer_ids=self.layer_ids, " \
           "unique_reply_rank=0)\n        return rows\n" in text, text
    assert "while" not in text and "finish_requests" not in text


def test_no_finding_plans_nothing(fixing):
    assert FIXER.plan(fixing.context({"pkg/gen.py": PLAIN}, BUILDS, fixers=("capture", "steps"))).empty
