"""The inbound contract, on two small builds (the one a plugin was written for, and the next): how vLLM calls
the consumer's platform, worker and KV cache manager, read from the build's own calls.

Each kind fails on a plugin broken its way and passes on one that follows the build: a platform hook vLLM now
calls (``current_platform.manual_seed_all``) the plugin lacks; an RPC vLLM now sends with an argument the
worker's method refuses; an attribute vLLM now reads on what an override returns (a float where vLLM reads
``.language_model``); an RPC vLLM now sends to a worker that has no such method. The patch probe judges an
override by the build's real calls: a keyword passed only inside a method the consumer overrides (without
``super()``) breaks nothing."""

from __future__ import annotations

import pytest

from compat.audit.pipeline import run_probes
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

BUILD = {
    "vllm/__init__.py": "",
    "vllm/_version.py": '__version__ = "{version}"\n',
    "vllm/platforms/__init__.py": "from vllm.platforms.interface import Platform\ncurrent_platform = Platform()\n",
    "vllm/platforms/interface.py": """
        class Platform:
            device_name = "base"

            @classmethod
            def get_device_name(cls):
                raise NotImplementedError
            {platform}
    """,
    "vllm/utils.py": """
        from vllm.platforms import current_platform


        def set_random_seed(seed):
            {seed}
    """,
    "vllm/worker_base.py": """
        class CompilationTimes:
            def __init__(self, language_model, encoder):
                self.language_model = language_model
                self.encoder = encoder


        class WorkerBase:
            def compile_or_warm_up_model(self) -> {returns}:
                raise NotImplementedError

            def load_model(self):
                raise NotImplementedError
    """,
    "vllm/v1/__init__.py": "",
    "vllm/v1/executor/__init__.py": "",
    "vllm/v1/executor/abstract.py": """
        class Executor:
            def compile_or_warm_up_model(self):
                times = self.collective_rpc("compile_or_warm_up_model")
                {reads}

            def profile(self, is_start, prefix):
                self.collective_rpc("profile", args={profile_args})

            {extra_rpc}

            def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
                return []
    """,
    "vllm/kv.py": """
        class KVCacheManager:
            def allocate_slots(self, request, num_new_tokens, {allocate}
                return None


        class Scheduler:
            def __init__(self):
                self.kv_cache_manager: KVCacheManager = KVCacheManager()

            def schedule(self):
                return self.kv_cache_manager.allocate_slots(1, 2{allocate_call})
    """,
}
OLD = dict(version="1.0.0", platform="", seed="return seed", returns="float",
           reads="return max(times)", profile_args="(is_start,)", extra_rpc="", allocate="num_lookahead_tokens=0):",
           allocate_call="")
NEW = dict(version="2.0.0", platform="""
            @classmethod
            def manual_seed_all(cls, seed):
                raise NotImplementedError""", seed="current_platform.manual_seed_all(seed)",
           returns="CompilationTimes", reads="return max(t.language_model for t in times)",
           profile_args="(is_start, prefix)", extra_rpc="""def discard(self):
                self.collective_rpc("discard")""", allocate="num_lookahead_tokens=0, skip_zeroing=None):",
           allocate_call=", skip_zeroing=[]")

BROKEN_PLUGIN = """
    from vllm.kv import KVCacheManager, Scheduler
    from vllm.platforms import Platform
    from vllm.worker_base import WorkerBase


    class MyPlatform(Platform):
        @classmethod
        def get_device_name(cls):
            return "mine"


    class MyWorker(WorkerBase):
        def compile_or_warm_up_model(self) -> float:
            return 0.0

        def load_model(self):
            return None

        def profile(self, is_start=True):
            return is_start


    class MyManager(KVCacheManager):
        def allocate_slots(self, request, num_new_tokens, num_lookahead_tokens=0):
            return None
    {scheduler}
"""
FOLLOWS = BROKEN_PLUGIN.replace("""    class MyWorker(WorkerBase):""", """    class MyWorker(WorkerBase):
        def discard(self):
            return None
""").replace("def compile_or_warm_up_model(self) -> float:\n            return 0.0",
             "def compile_or_warm_up_model(self):\n            return super().compile_or_warm_up_model()").replace(
    "def profile(self, is_start=True):", "def profile(self, is_start=True, prefix=None):").replace(
    """        @classmethod
        def get_device_name(cls):
            return "mine\"""", """        @classmethod
        def get_device_name(cls):
            return "mine"

        @classmethod
        def manual_seed_all(cls, seed):
            return seed""")
OWN_SCHEDULER = """

    class MyScheduler(Scheduler):
        def schedule(self):
            return self.kv_cache_manager.allocate_slots(1, 2)
"""


def _audit(tmp_path, monkeypatch, plugin):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    old = open_build(str(write_tree(tmp_path / "old", {k: v.format(**OLD) for k, v in BUILD.items()}))).surface
    new = open_build(str(write_tree(tmp_path / "new", {k: v.format(**NEW) for k, v in BUILD.items()}))).surface
    consumer = write_tree(tmp_path / "c", {"plugin.py": plugin})
    scan = scan_tree(tree_from_path(consumer / "plugin.py"))
    pinned = run_probes(ProbeContext(scan, old, old))
    assert not [f for f in pinned if f.status is not Status.OK and f.check in ("inbound", "patch")], \
        [f.message for f in pinned if f.status is not Status.OK]
    return [f for f in run_probes(ProbeContext(scan, new, old)) if f.check in ("inbound", "patch")]


KINDS = {
    "missing hook": ("manual_seed_all", "vllm/utils.py"),
    "refused arguments": ("profile", "vllm/v1/executor/abstract.py"),
    "return value": (".language_model", "vllm/v1/executor/abstract.py"),
    "duck-typed": ("sends discard", "vllm/v1/executor/abstract.py"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_inbound_kind_fails_a_plugin_broken_its_way_and_passes_one_that_follows(tmp_path, monkeypatch, kind):
    needle, where = KINDS[kind]
    broken = [f for f in _audit(tmp_path, monkeypatch, BROKEN_PLUGIN.format(scheduler=""))
              if f.status is Status.BROKEN and needle in f.message]
    assert len(broken) == 1 and f"at {where}" in broken[0].message, [f.message for f in broken]
    fixed = [f for f in _audit(tmp_path / "fixed", monkeypatch, FOLLOWS.format(scheduler=""))
             if f.status is not Status.OK and needle in f.message]
    assert not fixed, [f.message for f in fixed]


def test_an_override_is_judged_by_the_builds_real_calls(tmp_path, monkeypatch):
    """``allocate_slots`` gained ``skip_zeroing``, passed only by ``Scheduler.schedule``: broken while vLLM's
    scheduler calls the plugin's manager, fine once the plugin's own scheduler replaces ``schedule``."""
    def allocate(plugin):
        return [f for f in _audit(tmp_path / str(len(plugin)), monkeypatch, plugin)
                if f.symbol.endswith("allocate_slots") and f.check == "patch"]
    alone = allocate(BROKEN_PLUGIN.format(scheduler=""))
    assert [f.status for f in alone] == [Status.BROKEN] and "vllm/kv.py" in alone[0].message, \
        [f.message for f in alone]
    replaced = allocate(BROKEN_PLUGIN.format(scheduler=OWN_SCHEDULER))
    assert [f.status for f in replaced] == [Status.OK], [f.message for f in replaced]
