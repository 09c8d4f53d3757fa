"""compat.extract --arch all: how a family's outcome is read from its run's report (compat/extract/families.py),
and how vLLM's own log-probs are judged against HF's (compat/extract/own.py). Offline: the reports are written
here in the shape ``compat.extract`` writes them."""

from __future__ import annotations

import pytest

from compat.extract import own
from compat.extract.families import NON_FINITE, REFUSAL, SHIM_FILE, Outcome, outcome

PASSED = {"verdict": "pass", "architecture": "LlamaForCausalLM", "seconds": 1.0,
          "checks": [{"name": "realistic", "state": "pass", "message": "every sample equals the reference"}]}
WRONG = {"verdict": "fail", "architecture": "StableLmForCausalLM", "seconds": 1.0,
         "checks": [{"name": "realistic", "state": "fail", "message": "198 wrong: prompt 8: layer 3"}]}


def _own(largest: float, spread: float) -> dict:
    return own.OwnComparison(6, 100, largest, spread, own.MARGIN * spread, 1, 5).as_dict()


def _crash(error: str, where: str, at_start: bool) -> dict:
    run = {"engines": {"main": {"start_error": error}}} if at_start else {"engines": {"main": {"jobs": {}}}}
    return {"verdict": "fail", "architecture": "X", "seconds": 1.0, "run": run,
            "crash": {"error": error, "traceback": f'Traceback:\n  File "{where}", line 3, in f\n{error}'}}


@pytest.mark.parametrize(("report", "expected", "says"), [
    pytest.param(PASSED, Outcome.PASS, "every sample equals", id="pass"),
    pytest.param({**WRONG, "own": _own(1e-6, 4e-7)}, Outcome.FAIL, "vLLM's own engine agrees",
                 id="wrong states, vLLM right: the capture fails"),
    pytest.param({**WRONG, "own": _own(0.04, 4e-7)}, Outcome.VLLM_DIFFERS, "differs from HF transformers",
                 id="vLLM's own computation differs"),
    pytest.param({**WRONG, "own": {"error": "engine died"}}, Outcome.FAIL, "not compared: engine died",
                 id="not compared: fails"),
    pytest.param(_crash(f"RuntimeError: Worker failed with error '{REFUSAL}: cannot capture'", f"/x/{SHIM_FILE}",
                        True), Outcome.REFUSED, "at start", id="the shim refuses at start"),
    pytest.param(_crash("ValueError: Model X does not support hidden state extraction", "/x/custom_worker.py", True),
                 Outcome.REFUSED, "does not support", id="the consumer's own refusal"),
    pytest.param(_crash("TypeError: unexpected keyword", f"/x/{SHIM_FILE}", True), Outcome.FAIL, "at start",
                 id="the shim broke at start: fails"),
    pytest.param(_crash(f"{NON_FINITE}: sample 0: layer 2 holds non-finite values", "/x/y.py", False),
                 Outcome.REFUSED, "at a call", id="non-finite states refused"),
    pytest.param(_crash("RuntimeError: the worker captured 3 forward passes", "/x/y.py", False), Outcome.FAIL,
                 "a call raised", id="another error at a call: fails"),
])
def test_outcome(report, expected, says):
    got = outcome("family", report)
    assert got.outcome == expected, got
    assert says in got.message
    assert got.failed == (expected == Outcome.FAIL)


def test_own_bound_is_the_margin_over_hf_s_own_spread_with_float64_where_hf_runs_it():
    vllm = [[-0.001, -0.002 + 5e-6]]
    eager, sdpa = [[-0.001, -0.002]], [[-0.001, -0.002 + 1e-8]]
    tight = own.compare(vllm, eager, sdpa)
    assert not tight.agrees and tight.spread == pytest.approx(1e-8) and tight.worst_token == 2
    # HF's float32 against its float64 is the larger spread: the same difference is within ten times it
    loose = own.compare(vllm, eager, sdpa, exact=[[-0.001, -0.002 + 1e-6]])
    assert loose.agrees and loose.spread == pytest.approx(1e-6) and loose.bound == pytest.approx(own.MARGIN * 1e-6)


def test_own_spread_is_never_below_the_float32_resolution_of_the_log_probs():
    """Log-probs near -8 are float32 numbers 9.5e-7 apart: HF's implementations agreeing exactly does not make a
    difference of half that measurable."""
    eager = [[-8.0, -7.5]]
    compared = own.compare([[-8.0 + 5e-7, -7.5]], eager, eager, exact=eager)
    assert compared.spread == pytest.approx(own.FLOAT32_EPS * 8.0) and compared.agrees
    assert not own.compare([[-8.0 + 1e-3, -7.5]], eager, eager, exact=eager).agrees


def test_the_longest_prompts_are_compared_first():
    prompts = [[1] * n for n in (1, 5, 40, 3, 900, 12, 7, 2)]
    chosen = own.choose(prompts, 3)
    assert [len(p) for p in chosen][0] == 900 and all(len(p) >= 2 for p in chosen) and len(chosen) == 3
