"""The consumer scan on small consumers written here (unit tests of our own parsing)."""

from __future__ import annotations

import textwrap

from compat.consumer.guards import Imports, Not, VersionCmp, evaluate
from compat.consumer.result import Kind
from compat.consumer.scan import scan_tree
from compat.sources import tree_from_path


def scan_source(tmp_path, source: str, name: str = "consumer.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return scan_tree(tree_from_path(path))


def by_kind(scan, kind):
    return [tp for tp in scan.touchpoints if tp.kind == kind]


def test_imports_in_every_form(tmp_path):
    scan = scan_source(tmp_path, """
        import vllm.v1.request
        import vllm.config as cfg
        from vllm.v1.core.sched.scheduler import Scheduler as S
        def later():
            from vllm.sequence import IntermediateTensors
    """)
    assert [tp.symbol for tp in by_kind(scan, Kind.IMPORT)] == [
        "vllm.v1.request", "vllm.config", "vllm.v1.core.sched.scheduler.Scheduler",
        "vllm.sequence.IntermediateTensors"]


def test_call_shapes_and_aliases(tmp_path):
    scan = scan_source(tmp_path, """
        import vllm.config as cfg
        from vllm.v1.request import Request as R
        R("id", [1], *rest, eos_token_id=2, **more)
        cfg.SchedulerConfig(max_num_seqs=1)
    """)
    calls = {tp.symbol: tp.call for tp in by_kind(scan, Kind.CALL)}
    request = calls["vllm.v1.request.Request"]
    assert (request.positional, request.keywords, request.star_args, request.star_kwargs) == (2, ("eos_token_id",),
                                                                                             True, True)
    assert calls["vllm.config.SchedulerConfig"].keywords == ("max_num_seqs",)


def test_attributes_follow_objects_across_methods(tmp_path):
    scan = scan_source(tmp_path, """
        from vllm.v1.executor.multiproc_executor import MultiprocExecutor
        from vllm.config import VllmConfig

        class Gen:
            def __init__(self, config):
                self.executor = MultiprocExecutor(vllm_config=config)
                self.config = self._make()

            def _make(self) -> VllmConfig:
                return VllmConfig()

            def run(self):
                out = self.executor.collective_rpc("get_kv_cache_spec", unique_reply_rank=0)
                self.config.cache_config.num_gpu_blocks = 3
                return out
    """)
    attrs = {(tp.receiver.render(), tp.attribute, tp.store) for tp in by_kind(scan, Kind.ATTRIBUTE)}
    assert ("vllm.v1.executor.multiproc_executor.MultiprocExecutor(...)", "collective_rpc", False) in attrs
    assert ("vllm.config.VllmConfig(...)", "cache_config", False) in attrs
    assert ("vllm.config.VllmConfig(...).cache_config", "num_gpu_blocks", True) in attrs
    rpc = by_kind(scan, Kind.RPC)
    assert [tp.rpc_method for tp in rpc] == ["get_kv_cache_spec"]
    assert rpc[0].call.keywords == ("unique_reply_rank",)


def test_worker_extension_self_reads_are_worker_attributes(tmp_path):
    scan = scan_source(tmp_path, """
        from vllm.config import ParallelConfig
        ParallelConfig(worker_extension_cls="consumer.Ext")

        class Ext:
            def setup(self):
                self.mine = 1
                model = self.model_runner.model
                return self.mine
    """)
    assert scan.worker_extensions[0][0] == "consumer.Ext"
    worker_reads = [tp for tp in by_kind(scan, Kind.ATTRIBUTE) if tp.receiver.kind == "worker"]
    assert [tp.attribute for tp in worker_reads] == ["model_runner"]


def test_version_guards_and_helpers(tmp_path):
    scan = scan_source(tmp_path, """
        import vllm
        from packaging.version import Version
        from vllm.v1.request import Request

        def at_least(v):
            return Version(vllm.__version__) >= Version(v)

        NEW = at_least("0.17")
        if NEW:
            Request("a")
        else:
            Request("b", eos_token_id=1)
        if vllm.__version_tuple__ < (0, 12):
            Request("c")
        if vllm.__version__.startswith("0.11"):
            Request("d")
    """)
    calls = by_kind(scan, Kind.CALL)
    guards = [(tp.guards[0].expr, tp.guards[0].branch) for tp in calls]
    assert guards[0] == (VersionCmp(">=", "0.17", "version"), True)
    assert guards[1] == (VersionCmp(">=", "0.17", "version"), False)
    assert guards[2] == (VersionCmp("<", "0.12", "tuple"), True)
    assert guards[3] == (VersionCmp("==", "0.11", "prefix"), True)
    assert evaluate(guards[0][0], "0.16.0") is False and evaluate(guards[0][0], "0.17.0") is True
    assert evaluate(guards[2][0], "0.11.2") is True and evaluate(guards[2][0], "0.12.0") is False
    assert evaluate(guards[3][0], "0.11.2") is True and evaluate(guards[3][0], None) is None


def test_try_except_import_marks_fallback(tmp_path):
    scan = scan_source(tmp_path, """
        try:
            from vllm.new_place import thing
        except ImportError:
            from vllm.old_place import thing
    """)
    primary, fallback = by_kind(scan, Kind.IMPORT)
    assert primary.fallback is not None and primary.fallback.handler_imports == ("thing",)
    assert fallback.guards[0].expr == Not(Imports(("vllm.new_place.thing",)))


def test_syntax_error_is_reported_and_rest_scanned(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "bad.py").write_text("import vllm\ndef broken(:\n")
    (tmp_path / "pkg" / "good.py").write_text("from vllm.config import CacheConfig\n")
    scan = scan_tree(tree_from_path(tmp_path / "pkg"))
    assert [str(p.location) for p in scan.problems] == ["pkg/bad.py:2"]
    assert [tp.symbol for tp in scan.touchpoints] == ["vllm.config.CacheConfig"]


def test_written_for_reads_metadata_pins():
    from compat.consumer.scan import written_for

    assert written_for(("torch", 'vllm==0.11.0; extra == "datagen"'), "vllm") == "0.11.0"
    assert written_for(("vllm>=0.10",), "vllm") is None
