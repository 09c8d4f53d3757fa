"""compat.extract's own logic without an engine: the reason a failed native run gives, the jobs the checks
ask for."""

from __future__ import annotations

from compat.extract.checks import jobs, root_cause
from compat.extract.native import NOT_HERE


def test_root_cause_is_the_first_error_line_without_the_loggers_prefix():
    log = "\n".join([
        "INFO 11-30 [importing.py:46] Triton is installed but 0 active driver(s) found",
        "(Worker pid=1) ERROR 11-30 [multiproc_executor.py:898] Traceback (most recent call last):",
        '(Worker pid=1) ERROR 11-30 [multiproc_executor.py:898]   File "x.py", line 71, in __init__',
        "(Worker pid=1) ERROR 11-30 [multiproc_executor.py:898] ValueError: Available memory on node 0 is less",
        "RuntimeError: Engine core initialization failed. See root cause above.",
        "  warnings.warn('resource_tracker: There appear to be %d '",
    ])
    assert root_cause(log) == "ValueError: Available memory on node 0 is less"


def test_root_cause_prefers_what_the_driver_says_and_falls_back_to_the_last_line():
    said = f"RuntimeError: something\n{NOT_HERE}vLLM 0.11.0 has no hidden-states connector\n"
    assert root_cause(said) == "vLLM 0.11.0 has no hidden-states connector"
    assert root_cause("starting\nKilled\n") == "Killed"
    assert root_cause("") == "no output"


def test_the_checks_jobs_cover_every_prompt_they_name(tmp_path):
    prompts = [[5] * n for n in (3, 40, 90, 7, 12, 60, 2, 30)]
    allp, specs = jobs(prompts, vocab=500, max_len=96, max_model_len=512, out=tmp_path, seed=0)
    assert allp[:len(prompts)] == prompts
    names = [s["name"] for s in specs]
    assert names == ["single", "batch", "repeated", "many-calls", "budget"]
    for spec in specs:
        assert all(0 <= i < len(allp) for batch in spec["batches"] for i in batch)
    repeated = {i for batch in specs[2]["batches"] for i in batch}
    assert len(repeated) == 1 and len(allp[repeated.pop()]) == 511  # the model's whole context less one
    budget = [i for batch in specs[4]["batches"] for i in batch]
    assert sum(len(allp[i]) for i in budget) > 8192  # more than one scheduler step takes
