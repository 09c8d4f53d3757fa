"""fixers/protocol.py: ``execute_model`` that may return None in a two-phase build (a ``protocol`` finding): the
call is routed through the shim's ``execute_model``, which completes it with ``sample_tokens(None)``; declined
where the call goes through a local name that cannot name its receiver again, or is not a call the scan knows.

The ``protocol`` findings are given (the probe reads an executor, a worker and a model runner)."""

from __future__ import annotations

import pytest
from compat.fixers.protocol import FIXER

from compat.findings import Evidence

from .conftest import finding

BUILDS = {"0.1.0": {}, "0.2.0": {}}
SYMBOL = "vllm.v1.executor.abstract.Executor.execute_model"
HEAD = "from vllm.v1.executor.abstract import Executor\n\n\ndef step(config, out):\n    executor = Executor(config)\n"
DIRECT = HEAD + "    return executor.execute_model(out)\n"
BOUND = HEAD + "    run = executor.execute_model\n    return run(out)\n"
REBOUND = HEAD + ("    run = executor.execute_model\n    if out:\n        run = executor.execute_model\n"
                  "    return run(out)\n")
ERROR = Evidence(extra=(("error_text", "sample_tokens() must be called"),))


@pytest.mark.parametrize(("source", "line", "edited", "unhandled"), [
    pytest.param(DIRECT, 6, "return vllm_compat.execute_model(executor, out)", "", id="routed with its receiver"),
    pytest.param(BOUND, 7, "return vllm_compat.execute_model(executor, out)", "", id="local name: receiver named"),
    pytest.param(REBOUND, 9, "", "cannot name its receiver again: run is bound more than once",
                 id="receiver not nameable: declined"),
    pytest.param(DIRECT, 5, "", "not a call of execute_model the scan knows", id="not a call: declined"),
])
def test_two_phase_protocol(fixing, source, line, edited, unhandled):
    protocol = finding("protocol", SYMBOL, f"pkg/run.py:{line}", evidence=ERROR)
    ctx = fixing.context({"pkg/run.py": source}, BUILDS, given={"0.2.0": [protocol]})
    plan = FIXER.plan(ctx)
    if unhandled:
        assert len(plan.unhandled) == 1 and unhandled in plan.unhandled[0].reason, plan.unhandled
        assert plan.unhandled[0].finding == protocol and plan.empty is False
        assert not plan.edits and not plan.pieces and not plan.claims
        return
    assert not plan.unhandled and [c.covers(protocol) for c in plan.claims] == [True]
    [piece] = plan.pieces
    assert "sample_tokens() must be called" in piece.why and "sample_tokens(None)" in piece.code
    assert "two-phase in vLLM 0.2.0" in plan.notes[0]
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    assert edited in text and "from pkg._vllm_compat import _vllm_compat as vllm_compat" not in text
    assert "import _vllm_compat as vllm_compat" in text


def test_no_finding_plans_nothing(fixing):
    assert FIXER.plan(fixing.context({"pkg/run.py": DIRECT}, BUILDS)).empty
