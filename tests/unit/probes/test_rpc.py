"""probes/rpc.py: a method the consumer asks workers to run by name exists on the worker or its extension."""

from __future__ import annotations

import pytest
from compat.probes.rpc import PROBE

from compat.findings import Status

from .executors import WORKER, build

CALL = '''
from vllm.v1.executor.multiproc_executor import MultiprocExecutor


def run(config):
    executor = MultiprocExecutor(config)
    return executor.collective_rpc({method})
'''

EXTENSION = '''
from vllm import LLM


class Base:
    def from_base(self):
        return 1


class Extension(Base):
    def update_weights(self):
        return 1


def run():
    llm = LLM("m", worker_extension_cls="consumer.Extension")
    llm.collective_rpc({method})
'''

ELSEWHERE = '''
from vllm import LLM


def run():
    llm = LLM("m", worker_extension_cls="other_package.Extension")
    llm.collective_rpc("update_weights")
'''

UNINSTALLED = '''
from vllm.v1.executor.multiproc_executor import MultiprocExecutor


class Extension:
    def update_weights(self):
        return 1


def run(config):
    MultiprocExecutor(config).collective_rpc("update_weights")
'''

LLM = {"vllm/__init__.py": "from vllm.entrypoints.llm import LLM\n", "vllm/entrypoints/__init__.py": "",
       "vllm/entrypoints/llm.py": "class LLM:\n    def collective_rpc(self, method, args=()):\n        pass\n"}
LAZY_WORKER = WORKER.replace("class Worker:",
                             "class Worker:\n        def __getattr__(self, name):\n            return 1\n")


@pytest.mark.parametrize(("source", "vllm", "status", "says"), [
    pytest.param(CALL.format(method='"get_kv_cache_spec"'), build(), Status.OK,
                 ["'get_kv_cache_spec' exists on vllm.v1.worker.gpu_worker.Worker"], id="on-the-worker"),
    pytest.param(CALL.format(method='"init_device"'), build(wrapper="    def init_device(self):\n        pass\n"),
                 Status.OK, ["run by vllm.v1.worker.worker_base.WorkerWrapperBase"], id="on-the-wrapper"),
    pytest.param(EXTENSION.format(method='"update_weights"'), {**build(), **LLM}, Status.OK,
                 ["provided by the consumer's worker extension consumer.Extension"], id="on-the-extension"),
    pytest.param(EXTENSION.format(method='"from_base"'), {**build(), **LLM}, Status.OK,
                 ["worker extension consumer.Extension"], id="on-the-extension-s-base"),
    pytest.param(CALL.format(method='"gone"'), build(), Status.BROKEN,
                 ["workers have no method 'gone'", "none declared"], id="nowhere"),
    pytest.param(EXTENSION.format(method='"gone"'), {**build(), **LLM}, Status.BROKEN,
                 ["workers have no method 'gone'", "consumer.Extension"], id="not-on-the-extension-either"),
    pytest.param(CALL.format(method="name"), build(), Status.UNKNOWN, ["method name is computed"], id="computed"),
    pytest.param(CALL.format(method='"gone"'), build(worker=None), Status.UNKNOWN,
                 ["worker class vllm.v1.worker.gpu_worker.Worker cannot be read"], id="no-worker-class"),
    pytest.param(CALL.format(method='"gone"'), build(worker=LAZY_WORKER), Status.UNKNOWN,
                 ["cannot tell whether workers have 'gone'", "__getattr__"], id="worker-getattr"),
    pytest.param(ELSEWHERE, {**build(), **LLM}, Status.UNKNOWN,
                 ["the worker extension other_package.Extension is not in the consumer's code"],
                 id="extension-outside-the-consumer"),
    pytest.param(UNINSTALLED, build(), Status.UNKNOWN,
                 ["consumer.Extension defines it, but the scan did not see it installed"],
                 id="extension-not-installed"),
])
def test_a_worker_rpc_is_judged_against_worker_and_extension(trees, source, vllm, status, says):
    findings = trees.findings(PROBE, source, vllm)
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


def test_a_callable_sent_to_the_workers_is_not_judged(trees):
    assert trees.findings(PROBE, CALL.format(method="lambda worker: 1"), build()) == []
