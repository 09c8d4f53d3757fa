"""``self`` in the consumer's own subclass of a concrete vLLM class is an instance of that subclass: a method vLLM
removed from the base is broken there even when the base derives from an ABC (vllm-rbln 0.12.0 @ 0.33.0:
``self._select_waiting_queue_for_scheduling()`` in its ``Scheduler`` subclass), unless a subclass of the
consumer's class defines it. Bases imported from the consumer's other modules count (``from .base import
Mixin``). An override vLLM no longer calls is a change, not a breakage."""

from __future__ import annotations

import pytest

from compat.audit.pipeline import run_probes
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

SCHEDULER = """
    from abc import ABC, abstractmethod


    class SchedulerInterface(ABC):
        @abstractmethod
        def schedule(self):
            raise NotImplementedError


    class Scheduler(SchedulerInterface):
        def schedule(self):
            return self._pick()

        {extra}
"""
OLD_EXTRA = """def _pick(self):
            return 1

        def _legacy_hook(self):
            return 0"""


def _build(root, extra):
    return open_build(str(write_tree(root, {
        "vllm/__init__.py": "", "vllm/_version.py": '__version__ = "9.0.0"\n',
        "vllm/sched.py": SCHEDULER.format(extra=extra)}))).surface


CONSUMER = {
    "plug/__init__.py": "",
    "plug/mixin.py": """
        import vllm


        class PickMixin:
            def _pick(self):
                return 2
    """,
    "plug/sched.py": """
        from vllm.sched import Scheduler
        {imports}


        class MyScheduler({bases}):
            def schedule(self):
                return self._pick()

            def _legacy_hook(self):
                return 1
        {below}
    """,
}
BELOW = """

        class Child(MyScheduler):
            def _pick(self):
                return 3
"""


@pytest.mark.parametrize(("imports", "bases", "below", "status"), [
    ("", "Scheduler", "", Status.BROKEN),
    ("", "Scheduler", BELOW, Status.UNKNOWN),
    ("from .mixin import PickMixin", "PickMixin, Scheduler", "", None),
])
def test_self_in_the_consumers_subclass(tmp_path, monkeypatch, imports, bases, below, status):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    old, new = _build(tmp_path / "old", OLD_EXTRA), _build(tmp_path / "new", "")
    files = dict(CONSUMER, **{"plug/sched.py": CONSUMER["plug/sched.py"].format(imports=imports, bases=bases,
                                                                               below=below)})
    consumer = write_tree(tmp_path / "c", files)
    findings = run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "plug")), new, old))
    pick = [f for f in findings if f.symbol.endswith("._pick") and f.status is not Status.OK]
    assert [f.status for f in pick] == ([status] if status else []), [f.message for f in pick]
    hook = [f for f in findings if f.symbol.endswith("Scheduler._legacy_hook")]
    assert [f.status for f in hook] == [Status.CHANGED], [f.message for f in hook]
