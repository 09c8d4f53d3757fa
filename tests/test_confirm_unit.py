"""The confirmation probe's comparison: agreement is ok, disagreement is an error finding with both verdicts."""

import pytest

from compat.audit.pipeline import annotate_runtime
from compat.confirm import check_in_dtypes, run_child
from compat.facts.observed import parse_check
from compat.findings import Finding, Status
from probes.confirm import PROBE


def test_agreement_and_disagreement():
    ok = PROBE._compare("replies", "reply shape", "single", "single")
    bad = PROBE._compare("replies", "reply shape", "list", "single")
    assert ok.status is Status.OK and bad.status is Status.ERROR
    assert "static 'list'" in bad.message and "runtime 'single'" in bad.message
    assert [f.confirmation.probes for f in (ok, bad)] == [("reply-shape",), ("reply-shape",)]
    assert [f.confirmation.agree for f in (ok, bad)] == [True, False]


def crash(end: str, timeout: float = 60) -> dict:
    return run_child({"check": "engine", "end": end}, timeout, entry="tests.confirm_crasher")


def in_dtypes(**end_by_dtype: str) -> dict:
    spec = {"check": "model", "end_by_dtype": end_by_dtype}
    return check_in_dtypes(spec, tuple(end_by_dtype), entry="tests.confirm_crasher")


def test_the_next_dtype_is_tried_only_when_one_observed_nothing():
    first = in_dtypes(float32="ok", bfloat16="SIGILL")
    assert first["observed"] and first["dtype"] == "float32" and first["attempts"] == ["float32: ran"]
    refused = in_dtypes(float32="raise", bfloat16="ok")
    assert refused["observed"] and refused["dtype"] == "bfloat16"
    assert refused["attempts"][0].startswith("float32: RuntimeError: expect weight to be bfloat16")
    assert refused["attempts"][1] == "bfloat16: ran"


def test_when_every_dtype_fails_a_signal_makes_it_unconfirmed_naming_each_attempt():
    result = in_dtypes(float32="raise", bfloat16="SIGILL")
    assert "error" not in result and result["dtype"] == "bfloat16"
    assert result["unconfirmed"].startswith("the model check died by SIGILL")
    assert "earlier in float32: RuntimeError: expect weight" in result["unconfirmed"]
    both_raise = in_dtypes(float32="raise", bfloat16="raise")
    assert "unconfirmed" not in both_raise and "earlier in float32" in both_raise["error"]


@pytest.mark.parametrize("name", ["SIGILL", "SIGSEGV", "SIGKILL"])
def test_a_child_killed_by_a_signal_is_unconfirmed_with_the_signal_its_last_step_and_its_log(name):
    result = crash(name)
    assert "error" not in result
    assert result["signal"] == name and name in result["unconfirmed"]
    assert result["last_step"] == "executor.execute_model (first call)"
    assert "during step 'executor.execute_model (first call)'" in result["unconfirmed"]
    assert "about to run the kernel" in result["log"]
    if name == "SIGKILL":
        assert "OOM killer" in result["unconfirmed"]


def test_a_child_past_its_timeout_is_killed_and_unconfirmed():
    result = crash("hang", timeout=3)
    assert "ran past 3 s during step 'executor.execute_model (first call)'" in result["unconfirmed"]


def test_a_child_that_exits_without_a_result_is_an_error():
    result = crash("exit")
    assert "exited with status 3 without a result" in result["error"]
    assert result["last_step"] == "executor.execute_model (first call)"


def test_an_unconfirmed_check_is_unknown_and_marks_its_concerns_unconfirmed():
    finding = PROBE._failed("engine", parse_check(crash("SIGILL"), "engine").run, ("protocol", "model"))
    assert finding.status is Status.UNKNOWN
    assert finding.message.startswith("could not confirm engine on a real engine: the engine check died by SIGILL")
    assert "about to run the kernel" in finding.evidence.traceback
    assert dict(finding.evidence.extra)["last_step"] == "executor.execute_model (first call)"
    # The semantic findings of those concerns say they were not confirmed; the others are left alone.
    semantic = [Finding("protocol", Status.BROKEN, "s", "f.py:1", None, "two-phase"),
                Finding("reply-shape", Status.BROKEN, "s", "f.py:2", None, "[0] on a value")]
    annotated = annotate_runtime(semantic + [finding])
    runtime = dict(annotated[0].evidence.extra)["runtime"]
    assert runtime.startswith("not confirmed on a real engine: could not confirm: the engine check died by SIGILL")
    assert "runtime" not in dict(annotated[1].evidence.extra)
