"""probes/reply_shape.py: what collective_rpc returns with and without unique_reply_rank, and how it is used."""

from __future__ import annotations

import pytest
from compat.probes.reply_shape import PROBE

from compat.findings import Status

from .executors import RPC_LIST, RPC_NO_RANK, RPC_SINGLE, build

CALL = '''
from vllm.v1.executor.multiproc_executor import MultiprocExecutor


def run(config):
    executor = MultiprocExecutor(config)
    reply = executor.collective_rpc("get_kv_cache_spec"{rank})
    {use}
'''

RANKED = ", unique_reply_rank=0"
NOT_READ = "        collective_rpc = None\n"
NOT_AN_EXECUTOR = '''
from vllm.v1.executor.multiproc_executor import Gone


def run(config):
    return Gone(config).collective_rpc("get_kv_cache_spec")
'''


@pytest.mark.parametrize(("source", "vllm", "status", "says"), [
    pytest.param(CALL.format(rank=RANKED, use="return reply[0]"), build(RPC_SINGLE), Status.BROKEN,
                 ["returns the chosen rank's value itself", "applies index [0]"], id="single-indexed"),
    pytest.param(CALL.format(rank=RANKED, use="a, b = reply"), build(RPC_SINGLE), Status.BROKEN,
                 ["applies unpack"], id="single-unpacked"),
    pytest.param(CALL.format(rank=RANKED, use="return reply"), build(RPC_SINGLE), Status.OK,
                 ["the chosen rank's value itself", "no index, unpack or iteration"], id="single-used-as-is"),
    pytest.param(CALL.format(rank=RANKED, use="return reply[0]"), build(RPC_LIST), Status.OK,
                 ["a list with one entry per worker", "fits"], id="ranked-list-indexed-0"),
    pytest.param(CALL.format(rank=RANKED, use="return reply[1]"), build(RPC_LIST), Status.BROKEN,
                 ["indexes [1] into a one-entry list"], id="ranked-list-indexed-1"),
    pytest.param(CALL.format(rank="", use="return [r for r in reply]"), build(RPC_SINGLE), Status.OK,
                 ["a list with one entry per worker", "fits"], id="unranked-list-iterated"),
    pytest.param(CALL.format(rank=RANKED, use="return reply"), build(RPC_NO_RANK), Status.BROKEN,
                 ["takes no unique_reply_rank"], id="rank-not-accepted"),
    pytest.param(CALL.format(rank="", use="return reply"), build(NOT_READ), Status.UNKNOWN,
                 ["has no collective_rpc method"], id="collective-rpc-not-a-method"),
    pytest.param(NOT_AN_EXECUTOR, build(), Status.UNKNOWN, ["cannot read collective_rpc"], id="executor-unknown"),
])
def test_the_reply_against_how_the_consumer_uses_it(trees, source, vllm, status, says):
    findings = trees.findings(PROBE, source, vllm)
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


def test_the_build_written_for_goes_into_the_evidence(trees):
    source = CALL.format(rank=RANKED, use="return reply[0]")
    (finding,) = trees.findings(PROBE, source, build(RPC_SINGLE), build(RPC_LIST))
    assert finding.status is Status.BROKEN
    assert "a list with one entry per worker" in finding.evidence.written_for
    assert "the chosen rank's value itself" in finding.evidence.audited


def test_a_worker_s_own_collective_rpc_is_not_judged(trees):
    source = '''
class Extension:
    def run(self):
        return self.collective_rpc("get_kv_cache_spec")[0]


def start():
    from vllm import LLM
    LLM("m", worker_extension_cls="consumer.Extension")
'''
    assert trees.findings(PROBE, source, build()) == []
