"""compat.extract's own logic without an engine: the workload each check is built on, each check's verdict on
evidence and samples made here (it passes only when its condition happened, says `not run` when it did not, and
fails when the samples are wrong), and the reason a failed reference run gives."""

from __future__ import annotations

import sys

import pytest
import torch

from compat.extract import checks as c
from compat.extract.checks import FAIL, NOT_RUN, PASS, VARIES, Run, root_cause
from compat.extract.native import NOT_HERE
from compat.extract.runner import FAULT
from compat.extract.workload import CHECKS, NEEDS, PRESSURE_PROMPTS, SHORT_CALL, Plan, plan

HIDDEN = 8
LAYERS = (0, 2)


def test_root_cause_is_the_first_error_line_without_the_loggers_prefix():
    log = "\n".join([
        "INFO 11-30 [importing.py:46] Triton is installed but 0 active driver(s) found",
        "(Worker pid=1) ERROR 11-30 [multiproc_executor.py:898] Traceback (most recent call last):",
        "(Worker pid=1) ERROR 11-30 [multiproc_executor.py:898] ValueError: Available memory on node 0 is less",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ])
    assert root_cause(log) == "ValueError: Available memory on node 0 is less"
    said = f"RuntimeError: something\n{NOT_HERE}vLLM 0.11.0 has no hidden-states connector\n"
    assert root_cause(said) == "vLLM 0.11.0 has no hidden-states connector"
    assert root_cause("starting\nKilled\n") == "Killed"


def test_the_workload_makes_each_condition_possible(tmp_path):
    user = [[5] * 7, [6] * 3]
    work = plan(user, 4, vocab=2000, context=1024, layer_ids=[0, 2, 3], num_layers=4, out=tmp_path, seed=0,
                checks=CHECKS)
    main = {j["name"]: j for j in work.engines[0]["jobs"]}
    real = main["realistic"]["calls"]
    lengths = [len(work.prompts[i]) for call in real for i in call]
    spread = [n for call in real if len(call) < SHORT_CALL for n in (len(work.prompts[i]) for i in call)]
    assert work.prompts[:2] == user
    assert len(lengths) >= 150 and len(real) >= 6  # the realistic run: 150 prompts over 6 calls at least
    assert sum(spread) / len(spread) > 1.5 * 8192 / 32  # mean well above a step's budget over its sequences
    assert max(lengths) == 1023 and min(lengths) >= 1
    assert max(sum(len(work.prompts[i]) for i in call) for call in real) > 8192  # a call beyond one step
    assert max(len(call) for call in real) >= SHORT_CALL > 32  # a call beyond the sequence limit
    assert work.sizes["exact_copies"] > 0
    assert len(work.prompts[main["truncation"]["calls"][0][1]]) > 1024
    assert [] in work.prompts and any(max(p, default=0) >= 2000 for p in work.prompts)
    engines = {e["name"]: e for e in work.engines}
    assert engines["pressure"]["kv_tokens"] > 1024 > engines["capacity"]["kv_tokens"]
    assert len([i for call in engines["pressure"]["jobs"][0]["calls"] for i in call]) == PRESSURE_PROMPTS
    assert engines["layers"]["layer_ids"] != sorted(set(engines["layers"]["layer_ids"]))
    for engine in work.engines:
        assert all(0 <= i < len(work.prompts) for job in engine["jobs"] for call in job["calls"] for i in call)


def test_only_the_jobs_the_chosen_checks_judge_are_planned(tmp_path):
    work = plan([[5] * 7], 4, 2000, 1024, [0, 2], 4, tmp_path, 0, checks=("kv-capacity",))
    assert [e["name"] for e in work.engines] == ["main", "capacity"]
    assert [j["name"] for j in work.engines[0]["jobs"]] == ["main"]
    assert set(NEEDS) == set(c.CHECKS)


class Model:
    """A stand-in reference whose state ``j`` of a prompt depends on every earlier token (as a causal model's)."""

    def states(self, ids: torch.Tensor) -> dict:
        x = torch.cumsum(ids.double()[:, None] * torch.arange(1, HIDDEN + 1), dim=0)
        return {j: (x * (j + 1)).sin() for j in range(5)}

    def sample(self, prompt: list[int], layer_ids=LAYERS) -> dict:
        states = self.states(torch.tensor(prompt))
        return {"input_ids": torch.tensor(prompt), "hidden_states": [states[k + 1].float() for k in layer_ids]}


class Made:
    """An extraction run's results and samples, made here: ``job(...)`` saves samples and records its calls."""

    def __init__(self, tmp_path, prompts):
        self.tmp, self.model = tmp_path, Model()
        self.plan = Plan(prompts, [])
        self.result: dict = {"engines": {}}

    def engine(self, name, layer_ids=LAYERS, **facts):
        base = {"budget": 8192, "max_num_seqs": 4, "chunked_prefill": True, "block_size": 16, "num_blocks": 100,
                "max_model_len": 64, "engine_dtype": "float32", "layer_ids": list(layer_ids)}
        engine = self.result["engines"].setdefault(name, {"facts": {**base, **facts}, "jobs": {}, "applied": []})
        if not any(e["name"] == name for e in self.plan.engines):
            self.plan.engines.append({"name": name, "layer_ids": list(layer_ids), "jobs": []})
        return engine

    def job(self, engine, name, calls, samples=None, **extra):
        """``calls``: per call the prompt indices, with ``extra`` call fields (steps, error, ...) given as lists."""
        out = self.tmp / engine / name
        out.mkdir(parents=True, exist_ok=True)
        files = []
        for number, batch in enumerate(calls):
            for index in batch:
                sample = (samples or {}).get(index, self.model.sample(self.plan.prompts[index],
                                                                    self.engine(engine)["facts"]["layer_ids"]))
                if sample is None:
                    continue
                torch.save(sample, out / f"data_{len(files)}.pt")
                files.append({"file": f"data_{len(files)}.pt", "prompt": index, "call": number})
        records = [{"prompts": batch, "steps": [], "preempted": [], "scheduler_left": 0, "workers_left": 0,
                    "warnings": [], "error": None} for batch in calls]
        for key, values in extra.items():
            for record, value in zip(records, values):
                record[key] = value
        self.engine(engine)["jobs"][name] = {"files": files, "calls": records}
        spec = next(e for e in self.plan.engines if e["name"] == engine)
        spec["jobs"].append({"name": name, "out": str(out), "calls": calls})

    def run(self, native=None) -> Run:
        return Run(self.result, self.plan, "float32", self.model.states, native)


def _prompts(n=6, length=20):
    return [[(7 * i + t) % 50 + 3 for t in range(length + i)] for i in range(n)]


def _steps(*chunks):
    """Steps of a call: each a list of (index in call, start, count, prompt length)."""
    return [{"requests": len(step), "tokens": sum(x[2] for x in step), "chunks": [list(x) for x in step]}
            for step in chunks]


def test_split_is_not_run_without_a_split_and_fails_on_a_wrong_split_prompt(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("main")
    whole = _steps([(0, 0, 20, 20), (1, 0, 21, 21)])
    made.job("main", "realistic", [[0, 1]], steps=[whole])
    assert c.split(made.run()).state == NOT_RUN
    made = Made(tmp_path / "b", _prompts())
    made.engine("main")
    cut = _steps([(0, 0, 20, 20), (1, 0, 5, 21)], [(1, 5, 16, 21)])
    made.job("main", "realistic", [[0, 1]], steps=[cut])
    assert c.split(made.run()).state == PASS
    made = Made(tmp_path / "c", _prompts())
    made.engine("main")
    wrong = made.model.sample(made.plan.prompts[1])
    wrong["hidden_states"][0] = wrong["hidden_states"][0].roll(3, dims=0)  # rows of the wrong positions
    made.job("main", "realistic", [[0, 1]], samples={1: wrong}, steps=[cut])
    check = c.split(made.run())
    assert check.state == FAIL and "prompt 1" in check.message and "layer 0" in check.message


def test_seq_limit_needs_a_full_step(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("main", max_num_seqs=2)
    made.job("main", "realistic", [[0, 1, 2]], steps=[_steps([(0, 0, 20, 20)], [(1, 0, 21, 21), (2, 0, 22, 22)])])
    assert c.seq_limit(made.run()).state == PASS
    made.engine("main")["facts"]["max_num_seqs"] = 3
    assert c.seq_limit(made.run()).state == NOT_RUN


def test_preempt_says_whether_the_scheduler_preempted(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("main")
    made.result["engines"]["pressure"] = {"skipped": "no earlier engine of this run started"}
    assert c.preempt(made.run()).state == NOT_RUN
    del made.result["engines"]["pressure"]
    made.engine("pressure")
    made.job("pressure", "pressure", [[0, 1]], preempted=[[]])
    assert c.preempt(made.run()).state == NOT_RUN
    made.result["engines"]["pressure"]["jobs"]["pressure"]["calls"][0]["preempted"] = [1]
    assert c.preempt(made.run()).state == PASS
    made.result["engines"]["pressure"]["start_error"] = "ValueError: too small"
    assert c.preempt(made.run()).state == FAIL


def test_realistic_is_not_run_when_steps_cannot_fill_by_tokens(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("main", budget=8192, max_num_seqs=32)  # 256 tokens a sequence: prompts of ~20 never fill a step
    made.job("main", "realistic", [[0, 1, 2]])
    assert c.realistic(made.run()).state == NOT_RUN
    made.engine("main")["facts"]["budget"] = 64  # 2 tokens a sequence
    assert c.realistic(made.run()).state == PASS
    made.job("main", "realistic", [[0, 1, 2]], samples={2: None})  # a prompt without a sample
    assert c.realistic(made.run()).state == FAIL


def test_leftovers_counts_what_the_workers_still_hold(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("main")
    made.job("main", "realistic", [[0], [1]], workers_left=[None, None])
    assert c.leftovers(made.run()).state == NOT_RUN
    made.job("main", "realistic", [[0], [1]], workers_left=[1, 2])
    check = c.leftovers(made.run())
    assert check.state == FAIL and "workers 2" in check.message
    made.job("main", "realistic", [[0], [1]])
    assert c.leftovers(made.run()).state == PASS


def test_truncation_must_be_said(tmp_path):
    prompts = _prompts(2) + [[5] * 80]
    made = Made(tmp_path, prompts)
    made.engine("main", max_model_len=64)
    cut = made.model.sample(prompts[2][:63])
    made.job("main", "truncation", [[0, 2]], samples={2: cut})
    check = c.truncation(made.run())
    assert check.state == FAIL and "said nothing" in check.message
    made.job("main", "truncation", [[0, 2]], samples={2: cut}, warnings=[["1 prompt(s) longer than 63 are cut"]])
    assert c.truncation(made.run()).state == PASS
    made.engine("main")["facts"]["max_model_len"] = 128
    assert c.truncation(made.run()).state == NOT_RUN


@pytest.mark.parametrize("name, error, returned, state", [
    ("empty", None, True, FAIL),
    ("empty", "AssertionError: ", False, FAIL),
    ("empty", "RuntimeError: Failed to capture hidden states", False, FAIL),
    ("empty", "ValueError: prompt 1 is empty", False, PASS),
    ("oov", "ValueError: prompt 1 has token id 2007 outside the vocabulary", False, PASS),
])
def test_refusals_must_be_clear_and_leave_the_engine_usable(tmp_path, name, error, returned, state):
    made = Made(tmp_path, _prompts())
    made.engine("main")
    made.job("main", name, [[0, 1]], samples=None if returned else {0: None, 1: None}, error=[error])
    made.job("main", f"after-{name}", [[0]])
    assert getattr(c, name)(made.run()).state == state


def test_after_failure_needs_the_injected_fault(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("main")
    made.job("main", "fault", [[0]], samples={0: None}, error=[None])
    made.job("main", "after-fault", [[1]])
    assert c.after_failure(made.run()).state == NOT_RUN
    made.job("main", "fault", [[0]], samples={0: None}, error=["AssertionError: "])
    assert c.after_failure(made.run()).state == FAIL
    made.job("main", "fault", [[0]], samples={0: None}, error=[f"RuntimeError: {FAULT} 1"])
    assert c.after_failure(made.run()).state == PASS
    made.job("main", "after-fault", [[1]], workers_left=[4])
    assert c.after_failure(made.run()).state == FAIL


def test_kv_capacity_passes_only_on_a_refusal_that_says_why(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("capacity")
    made.job("capacity", "capacity", [[0]], samples={0: {"input_ids": torch.tensor(made.plan.prompts[0]),
                                                         "hidden_states": [torch.zeros(0, HIDDEN)] * 2}})
    check = c.capacity(made.run())
    assert check.state == FAIL and "0 rows" in check.message
    made.result["engines"]["capacity"] = {"start_error": "ValueError: the KV cache cannot hold one request"}
    assert c.capacity(made.run()).state == PASS
    made.result["engines"]["capacity"] = {"start_error": "AssertionError: "}
    assert c.capacity(made.run()).state == FAIL


def test_layer_order_compares_each_slot_with_the_layer_asked(tmp_path):
    asked = [3, 0, 2, 0]
    made = Made(tmp_path, _prompts())
    made.engine("layers", layer_ids=asked)
    made.plan.engines[0]["layer_ids"] = asked
    made.job("layers", "layers", [[0, 1]])
    assert c.layer_order(made.run()).state == PASS
    sorted_ids = sorted(set(asked))
    made.job("layers", "layers", [[0, 1]], samples={i: made.model.sample(made.plan.prompts[i], sorted_ids)
                                                    for i in (0, 1)})
    check = c.layer_order(made.run())
    assert check.state == FAIL and "3 layers" in check.message


def test_a_build_whose_own_path_varies_with_the_batch_gets_varies_not_pass(tmp_path):
    made = Made(tmp_path, _prompts())
    made.engine("main")
    made.job("main", "realistic", [[0, 1, 2]], steps=[_steps([(0, 0, 20, 20), (1, 0, 21, 21)])])
    made.job("main", "single", [[0], [1]])
    same = {p: {k: made.model.sample(made.plan.prompts[p])["hidden_states"][slot] for slot, k in enumerate(LAYERS)}
            for p in (0, 1, 2)}
    steady = made.run({"states": same, "spread": 1e-7})
    assert c.batch(steady).state == PASS and c.native(steady).state == PASS
    shaky = made.run({"states": same, "spread": 0.02})
    assert c.batch(shaky).state == VARIES and c.native(shaky).state == VARIES
    assert "0.02" in c.native(shaky).message
    assert c.native(made.run({"error": "vLLM 0.11.0 has no hidden-states connector"})).state == NOT_RUN


def test_samples_beyond_the_dtype_bound_vary_only_within_what_the_builds_own_path_does(tmp_path):
    """Where vLLM's own extraction of a prompt differs batched and alone beyond the dtype's bound, a sample that
    differs from the reference about as much as vLLM's own path does is `varies` (with the measured sizes), not
    `pass`; one off by more than twice that is `fail`; without that measurement it is `fail`."""
    made = Made(tmp_path, _prompts())
    made.engine("main", budget=8, max_num_seqs=4)
    model = made.model
    near = model.sample(made.plan.prompts[1])
    near["hidden_states"][0] = near["hidden_states"][0] * 1.02
    far = model.sample(made.plan.prompts[2])
    far["hidden_states"][0] = far["hidden_states"][0] * 1.5
    theirs = {p: {k: model.sample(made.plan.prompts[p])["hidden_states"][slot] * 1.015 for slot, k in
                  enumerate(LAYERS)} for p in (0, 1, 2)}
    shaky = {"states": theirs, "spread": 0.04}
    made.job("main", "realistic", [[0, 1]], samples={1: near})
    check = c.realistic(made.run(shaky))
    assert check.state == VARIES and "0.015" in check.message and "0.04" in check.message
    assert c.realistic(made.run()).state == FAIL  # not measured: the dtype's bound stands
    made.job("main", "realistic", [[0, 1, 2]], samples={1: near, 2: far})
    assert c.realistic(made.run(shaky)).state == FAIL


def test_realistic_says_how_the_scheduler_split_and_reordered_the_calls(tmp_path):
    """vLLM 0.11.0 without chunked prefill leaves a prompt that does not fit a step for later and runs the next
    first: the evidence counts it, read from the steps (prompt 1 first computed in step 0, prompt 0 in step 1)."""
    made = Made(tmp_path, _prompts())
    made.engine("main", budget=25, max_num_seqs=4)
    steps = _steps([(1, 0, 21, 21)], [(0, 0, 20, 20), (2, 0, 5, 22)], [(2, 5, 17, 22)])
    made.job("main", "realistic", [[0, 1, 2]], steps=[steps])
    check = c.realistic(made.run())
    assert check.evidence["run_ahead"] == 1 and check.evidence["split_prompts"] == 1
    assert "ran 1 ahead" in check.message and check.state == PASS


def test_the_writer_saves_from_threads_and_raises_what_a_write_met(tmp_path):
    import torch

    from compat.extract.runner import Writer

    writer = Writer(threads=2)
    samples = [{"input_ids": torch.arange(n), "hidden_states": [torch.ones(n, 4)], "loss_mask": None} for n in (3, 5)]
    for number, sample in enumerate(samples):
        writer.save(sample, tmp_path / f"data_{number}.pt")
    writer.wait()
    loaded = torch.load(tmp_path / "data_1.pt")
    assert loaded["input_ids"].tolist() == list(range(5)) and loaded["loss_mask"].tolist() == [1] * 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data_0.pt", "data_1.pt"]  # no .tmp left
    writer.save(samples[0], tmp_path / "missing" / "data_2.pt")
    with pytest.raises(RuntimeError, match="does not exist"):
        writer.close()


def test_the_profile_splits_time_by_the_module_s_functions_and_puts_them_back(monkeypatch):
    import types

    from compat.extract.runner import Profile

    module = types.ModuleType("compat_profiled_under_test")
    module.run_steps = lambda n: sum(range(n))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    original = module.run_steps
    profile = Profile(module.__name__, ("run_steps", "absent"))
    assert module.run_steps(1000) == sum(range(1000)) and module.run_steps is not original
    taken = profile.take()
    assert set(taken) == {"run_steps"} and taken["run_steps"] >= 0 and profile.take() == {}
    profile.remove()
    assert module.run_steps is original
