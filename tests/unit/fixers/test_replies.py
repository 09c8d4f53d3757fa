"""fixers/replies.py: ``collective_rpc(..., unique_reply_rank=r)`` whose reply shape changed (a ``reply-shape``
finding): the call is routed through the shim's ``collective_rpc``, which answers a one-entry list in every build;
declined where the finding is not at a ``collective_rpc`` call the scan knows.

The ``reply-shape`` findings are given; the executors whose ``collective_rpc`` the fixer reads are hand-written.
Not covered: the refusal "collective_rpc without a rank does not answer a list" — ``compat.facts.replies`` never
reads ``without_rank`` as anything but ``list``, so no build can reach it."""

from __future__ import annotations

import pytest
from compat.fixers.replies import FIXER

from .conftest import finding

EXECUTOR = "vllm.v1.executor.multiproc_executor.MultiprocExecutor"
RPC = """
class MultiprocExecutor:
    def collective_rpc(self, method, args=(), unique_reply_rank=None):
        replies = [w(method) for w in self.workers]
        {ret}
"""
BUILDS = {"0.1.0": {"vllm/v1/executor/multiproc_executor.py": RPC.format(
              ret="return replies if unique_reply_rank is None else [replies[unique_reply_rank]]")},
          "0.2.0": {"vllm/v1/executor/multiproc_executor.py": RPC.format(
              ret="return replies if unique_reply_rank is None else replies[unique_reply_rank]")}}
"""0.2.0 answers the chosen rank's value itself, no longer a one-entry list."""
CONSUMER = ("from vllm.v1.executor.multiproc_executor import MultiprocExecutor\n\n\ndef rows(config):\n"
            "    executor = MultiprocExecutor(config)\n"
            "    return executor.collective_rpc(\"captured\", unique_reply_rank=0)[0]\n")


@pytest.mark.parametrize(("line", "unhandled"), [
    pytest.param(6, "", id="routed through the shim"),
    pytest.param(5, "not a collective_rpc call the scan knows", id="not an RPC: declined"),
])
def test_rank_replies(fixing, line, unhandled):
    shape = finding("reply-shape", f"{EXECUTOR}.collective_rpc", f"pkg/run.py:{line}")
    ctx = fixing.context({"pkg/run.py": CONSUMER}, BUILDS, given={"0.2.0": [shape]})
    plan = FIXER.plan(ctx)
    if unhandled:
        assert [(u.finding, u.reason) for u in plan.unhandled] == [(shape, unhandled)]
        assert not plan.edits and not plan.pieces and not plan.claims
        return
    assert not plan.unhandled and [c.covers(shape) for c in plan.claims] == [True]
    [piece] = plan.pieces
    assert piece.key == "replies:collective_rpc" and EXECUTOR in piece.why
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    assert 'return vllm_compat.collective_rpc(executor, "captured", unique_reply_rank=0)[0]' in text


def test_no_finding_plans_nothing(fixing):
    assert FIXER.plan(fixing.context({"pkg/run.py": CONSUMER}, BUILDS)).empty
