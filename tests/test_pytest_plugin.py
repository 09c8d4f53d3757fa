"""The pytest plugin, run inside a throwaway project with pytester: the audit's findings are test cases, and
collecting them reads no vLLM."""

from __future__ import annotations

import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .trees import write_tree

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
REQUEST = """
    class Request:
        def __init__(self, request_id, prompt_token_ids, sampling_params, pooling_params{eos}):
            self.request_id = request_id
"""

CONSUMER = """
from vllm.v1.request import Request


def make(sampling_params):
    return Request("id", [1, 2], sampling_params, None, eos_token_id=2)
"""


@pytest.fixture()
def project(pytester, monkeypatch):
    # a pytest run in a subprocess imports this checkout's compat, not another one installed
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(**{"mypkg/__init__": "", "mypkg/engine": textwrap.dedent(CONSUMER)})
    pytester.makepyfile(test_nothing="def test_plain():\n    assert True\n")
    return pytester


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> list[str]:
    """Two vLLM-shaped trees written here: Request takes `eos_token_id` in the first, not in the second."""
    root = tmp_path_factory.mktemp("plugin_builds")
    out = []
    for n, eos in ((1, ", eos_token_id=None"), (2, "")):
        write_tree(root / f"vllm{n}", {"vllm/__init__.py": "", "vllm/v1/__init__.py": "",
                                      "vllm/v1/request.py": REQUEST.format(eos=eos),
                                      "vllm/_version.py": f'__version__ = "9.{n}.0"\n'})
        out.append(str(root / f"vllm{n}"))
    return out


def _args(builds: list[str]) -> list[str]:
    return [f"--vllm-compat={b}" for b in builds] + ["--vllm-compat-consumer=mypkg", "-rA", "-p", "no:cacheprovider"]


def _ran(result) -> dict[str, str]:
    """Each test's id, as printed in the short summary (-rA), and its outcome."""
    found = re.findall(r"^(PASSED|FAILED|SKIPPED|ERROR) (\S.*?)(?: - .*)?$", result.stdout.str(), re.M)
    return {test_id: outcome for outcome, test_id in found}


@pytest.mark.slow
def test_findings_are_test_cases(project):
    result = project.runpytest("--vllm-compat=0.11.0", "--vllm-compat=0.17.0",
                               "--vllm-compat-consumer=mypkg", "-rA")
    outcomes = result.parseoutcomes()
    # Request(..., eos_token_id=...) binds in 0.11.0 and not in 0.17.0, which dropped the parameter
    result.stdout.fnmatch_lines(["PASSED vllm-compat::mypkg/engine.py:5 vllm.v1.request.Request[[]0.11.0[]]*",
                                 "FAILED vllm-compat::mypkg/engine.py:5 vllm.v1.request.Request[[]0.17.0[]]*"])
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
    result.stdout.fnmatch_lines(["*<BuildItem mypkg/engine.py:5 vllm.v1.request.Request[[]0.12.0[]]>"])


def test_without_the_option_nothing_is_added(project):
    result = project.runpytest("--collect-only", "-q")
    assert "vllm-compat" not in result.stdout.str()


def test_an_unknown_build_is_a_failing_test(project):
    result = project.runpytest("--vllm-compat=99.0.0",
                               "--vllm-compat-consumer=mypkg")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*cannot be used*"])


def test_each_test_that_runs_is_collected(project, builds):
    result = project.runpytest(*_args(builds))
    collected = int(re.search(r"collected (\d+) items?", result.stdout.str()).group(1))
    outcomes = result.parseoutcomes()
    ran = sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped", "error"))
    assert outcomes["failed"] == 1 and ran > 2
    assert collected == ran == len(_ran(result))


def test_a_printed_test_id_selects_that_test_alone(project, builds):
    """Ids taken from a real run's output, passed back to pytest one at a time (the failing one in a fresh
    process, as a user would)."""
    ran = _ran(project.runpytest(*_args(builds)))
    failed = [i for i, outcome in ran.items() if outcome == "FAILED"]
    assert len(failed) == 1 and "vllm.v1.request.Request" in failed[0] and builds[1] in failed[0], ran
    passed = [i for i, outcome in ran.items() if outcome == "PASSED" and i != "test_nothing.py::test_plain"]
    for test_id, run in ((failed[0], project.runpytest_subprocess), (passed[0], project.runpytest)):
        again = run(*_args(builds), test_id)
        assert _ran(again) == {test_id: ran[test_id]}, again.stdout.str()
        assert sum(again.parseoutcomes().get(k, 0) for k in ("passed", "failed", "skipped")) == 1


def test_an_id_that_names_no_test_is_an_error(project, builds):
    result = project.runpytest(*_args(builds), "vllm-compat::mypkg/engine.py:99 nothing[x]")
    assert result.ret not in (0, 1)
    assert "no vllm-compat test is named vllm-compat::mypkg/engine.py:99 nothing[x]" in result.stdout.str()


def test_junit_names_are_well_formed(project, builds):
    result = project.runpytest(*_args(builds), "--junitxml=out.xml")
    ran = _ran(result)
    cases = ET.parse(project.path / "out.xml").getroot().iter("testcase")
    compat = [(c.get("classname"), c.get("name")) for c in cases if c.get("classname") != "test_nothing"]
    assert len(compat) == len(ran) - 1 > 2
    for classname, name in compat:
        assert not set("[]:") & set(classname), classname
        assert "::" not in name and name.count("[") == name.count("]") == 1 and name.endswith("]"), name
        assert f"{classname}::{name}" in ran  # the test's own id, cut where pytest cuts it
