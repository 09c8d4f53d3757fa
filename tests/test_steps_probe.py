"""The ``steps`` probe (and the scheduling facts it reads) on small vLLM-shaped trees and a speculators-shaped
loop, one row per thing a build's scheduler may do to a prompt between the loop's steps. Offline: no release,
no engine."""

from __future__ import annotations

import pytest
from compat.probes.steps import PROBE

from compat.consumer.scan import scan_tree
from compat.facts import scheduling
from compat.findings import Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

CONFIG = '''
    from dataclasses import dataclass


    @dataclass
    class SchedulerConfig:
        max_num_batched_tokens: int = 8192
        enable_chunked_prefill: bool | None = {default}
'''

SCHEDULER = '''
    class Scheduler:
        def __init__(self, vllm_config):
            self.scheduler_config = vllm_config.scheduler_config

        def schedule(self):
            token_budget = self.scheduler_config.max_num_batched_tokens
            for request in self.waiting:
                {stale}
                num_new_tokens = request.num_tokens
                if not self.scheduler_config.enable_chunked_prefill and num_new_tokens > token_budget:
                    {exit}
                token_budget -= num_new_tokens
            return token_budget

        {update}
'''

STALE = '''if request.is_stale_output:
                    continue'''
UPDATE = '''def update_from_output(self, scheduler_output, model_runner_output):
            return {}'''

CONSUMER = '''
    from vllm.config import SchedulerConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import RequestStatus


    class Generator:
        def __init__(self, config, executor):
            self.scheduler_config = SchedulerConfig(max_num_batched_tokens=8192{chunked})
            self.scheduler = Scheduler(vllm_config=config)
            self.executor = executor

        def generate(self):
            while (scheduler_output := self.scheduler.schedule()).total_num_scheduled_tokens > 0:
                self.executor.execute_model(scheduler_output)
                for req_id in scheduler_output.num_scheduled_tokens:
                    self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)
'''


def scheduler_tree(default: str = "True", exit: str = "break", stale: bool = False) -> dict[str, str]:
    """A vLLM-shaped build: its ``SchedulerConfig`` (chunked prefill ``default``) and a ``schedule()`` that does
    ``exit`` with a prompt over the budget, holding requests with stale output back when ``stale``."""
    return {
        "vllm/config/__init__.py": "from vllm.config.scheduler import SchedulerConfig\n",
        "vllm/config/scheduler.py": CONFIG.format(default=default),
        "vllm/v1/__init__.py": "",
        "vllm/v1/request.py": "class RequestStatus:\n    FINISHED_ABORTED = 1\n",
        "vllm/v1/core/__init__.py": "",
        "vllm/v1/core/sched/__init__.py": "",
        "vllm/v1/core/sched/scheduler.py": SCHEDULER.format(
            exit=exit, stale=STALE if stale else "pass", update=UPDATE if stale else ""),
    }


def _build(root, default: str, exit: str, stale: bool = False):
    files = {"vllm/__init__.py": "", "vllm/_version.py": '__version__ = "9.0.0"\n',
             **scheduler_tree(default, exit, stale)}
    return open_build(str(write_tree(root, files))).surface


# (chunked prefill default, what schedule() does with a prompt over the budget, the loop's own config,
#  stale-output hold, expected status, words the message holds)
CASES = [
    ("True", "break", "", False, Status.BROKEN, "splits a prompt at the step's token budget"),
    ("None", "continue", "", False, Status.BROKEN, "runs the prompts after it first"),
    ("None", "break", "", False, Status.OK, "computes whole prompts"),
    ("True", "break", ", enable_chunked_prefill=False", False, Status.OK, "enable_chunked_prefill=False"),
    ("True", "break", "", True, Status.BROKEN, "never hands a step's output back"),
]


@pytest.mark.parametrize(("default", "exit", "chunked", "stale", "status", "words"), CASES)
def test_the_loop_against_the_build_s_scheduler(tmp_path, monkeypatch, default, exit, chunked, stale, status, words):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = _build(tmp_path / "vllm", default, exit, stale)
    consumer = write_tree(tmp_path / "c", {"gen.py": CONSUMER.format(chunked=chunked)})
    scan = scan_tree(tree_from_path(consumer / "gen.py"))
    (loop,) = scan.step_loops
    assert loop.finishes == "scheduled" and not loop.updates
    (finding,) = PROBE.run(ProbeContext(scan, surface, None))
    assert finding.status is status and words in finding.message, finding.message


def test_the_facts_say_where(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = _build(tmp_path / "vllm", "None", "continue", stale=True)
    facts = surface.fact(scheduling.FACT, "vllm.v1.core.sched.scheduler.Scheduler", "vllm.config.SchedulerConfig")
    assert facts.chunked_prefill_default == "None" and facts.chunked_prefill_at.startswith("vllm/config/scheduler.py")
    assert facts.skips_ahead_at.startswith("vllm/v1/core/sched/scheduler.py") and "continue" in facts.skips_ahead_text
    assert facts.holds_preempted_at and facts.update_from_output_at and facts.preempts_at is None
