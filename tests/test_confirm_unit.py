"""The confirmation probe's comparison: agreement is ok, disagreement is an error finding with both verdicts."""

import pytest
from compat.probes.confirm import PROBE

from compat.audit.pipeline import annotate_runtime
from compat.confirm import check_in_dtypes, run_child
from compat.confirm.engine import refusal
from compat.facts.observed import parse_check
from compat.findings import Finding, Status


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


def test_a_model_the_engine_refuses_in_every_dtype_is_unsupported_with_its_reason():
    refused = in_dtypes(float32="unsupported", bfloat16="unsupported")
    assert "error" not in refused and "unconfirmed" not in refused
    assert refused["unsupported"].startswith("NotImplementedError: MLA is not supported on CPU. (in bfloat16; "
                                             "earlier in float32: NotImplementedError: MLA")
    # A refusal in one dtype still tries the next; a real error in any attempt stays an error.
    assert in_dtypes(float32="unsupported", bfloat16="ok")["dtype"] == "bfloat16"
    mixed = in_dtypes(float32="raise", bfloat16="unsupported")
    assert "unsupported" not in mixed and "earlier in float32: RuntimeError" in mixed["error"]


def test_an_unsupported_model_is_unknown_with_the_engines_reason():
    run = parse_check(in_dtypes(float32="unsupported", bfloat16="unsupported"), "model").run
    assert run.failed and run.unsupported
    finding = PROBE._failed("model DeepseekV3ForCausalLM", run, ("model",))
    assert finding.status is Status.UNKNOWN
    assert finding.message.startswith("could not confirm model DeepseekV3ForCausalLM on a real engine: the engine "
                                      "cannot run it here: NotImplementedError: MLA is not supported on CPU.")
    assert finding.confirmation.agree is None


def _raised_in(filename: str, source: str) -> BaseException:
    try:
        exec(compile(source, filename, "exec"), {})
    except BaseException as exc:  # noqa: BLE001 - the exception is the test's subject
        return exc
    raise AssertionError("nothing raised")


def test_only_vllms_own_not_implemented_error_is_a_refusal():
    mla = _raised_in("/site-packages/vllm/platforms/cpu.py", "raise NotImplementedError('MLA is not supported')")
    assert refusal(mla) is mla
    wrapped = _raised_in("/site-packages/vllm/v1/engine/core.py", "try:\n    raise NotImplementedError('MLA')\n"
                         "except NotImplementedError as e:\n    raise RuntimeError('Engine core failed') from e")
    assert isinstance(refusal(wrapped), NotImplementedError)
    assert refusal(_raised_in("/work/compat/confirm/engine.py", "raise NotImplementedError('ours')")) is None
    assert refusal(_raised_in("/site-packages/vllm/config.py", "raise ValueError('bad')")) is None
