"""The pytest plugin, run inside a throwaway project with pytester: the audit's findings are test cases, and
collecting them reads no vLLM."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

CONSUMER = """
from vllm.v1.request import Request


def make(sampling_params):
    return Request("id", [1, 2], sampling_params, None, eos_token_id=2)
"""


@pytest.fixture()
def project(pytester):
    pytester.makepyfile(**{"mypkg/__init__": "", "mypkg/engine": textwrap.dedent(CONSUMER)})
    pytester.makepyfile(test_nothing="def test_plain():\n    assert True\n")
    return pytester


@pytest.mark.slow
def test_findings_are_test_cases(project):
    result = project.runpytest("--vllm-compat=0.11.0", "--vllm-compat=0.17.0",
                               "--vllm-compat-consumer=mypkg", "-rA")
    outcomes = result.parseoutcomes()
    # Request(..., eos_token_id=...) binds in 0.11.0 and not in 0.17.0, which dropped the parameter
    result.stdout.fnmatch_lines(["PASSED *vllm-compat[[]0.11.0[]]::mypkg/engine.py:5 vllm.v1.request.Request*",
                                 "FAILED *vllm-compat[[]0.17.0[]]::mypkg/engine.py:5 vllm.v1.request.Request*"])
    assert "no longer accepts keyword 'eos_token_id'" in result.stdout.str()
    assert outcomes["failed"] == 1 and outcomes["passed"] >= 4


def test_collection_reads_no_vllm(project):
    project.makeconftest(textwrap.dedent("""
        import sys

        def pytest_collection_finish(session):
            assert not [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")], "vllm imported"
            print("COLLECTED", len(session.items))
        """))
    # in a fresh process: this test session itself may have imported vLLM already
    result = project.runpytest_subprocess("--vllm-compat=0.12.0", "--vllm-compat-consumer=mypkg",
                                          "--collect-only", "-s")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*vllm-compat[[]0.12.0[]]::mypkg/engine.py:5 vllm.v1.request.Request*"])


def test_without_the_option_nothing_is_added(project):
    result = project.runpytest("--collect-only", "-q")
    assert "vllm-compat" not in result.stdout.str()


def test_an_unknown_build_is_a_failing_test(project):
    result = project.runpytest("--vllm-compat=99.0.0",
                               "--vllm-compat-consumer=mypkg")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*cannot be used*"])
