"""Calls the consumer makes without writing ``vllm_thing(...)``: ``super().m(...)`` in a subclass of a vLLM class
calls vLLM's ``m`` (``super().__init__(...)`` builds vLLM's class); ``Process(target=f, args=..., kwargs=...)``
calls ``f`` with those arguments. Each binds to the build's signature like a call written out; a base of the
consumer's own that defines ``m`` (or another library's base that comes first) is not vLLM's."""

from __future__ import annotations

import pytest

from compat.audit.pipeline import run_probes
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

VLLM = {
    "vllm/__init__.py": "",
    "vllm/_version.py": '__version__ = "9.0.0"\n',
    "vllm/proposer.py": """
        import functools

        registry = {}


        class Proposer:
            def __init__(self, vllm_config, device):
                self.device = device

            def propose(self, num_tokens, batch, sampled):
                return []


        class Proc:
            def __init__(self, vllm_config, rank):
                self.rank = rank

            @staticmethod
            def worker_main(*args, **kwargs):
                ready = kwargs.pop("ready_pipe")
                kwargs.pop("death_pipe", None)
                return Proc(*args, **kwargs), ready


        worker_main = Proc.worker_main


        def traced(obj=None, *, name=""):
            return functools.partial(traced, name=name) if obj is None else registry["otel"](obj)


        class Traced:
            @traced(name="init")
            def __init__(self, vllm_config, rank):
                self.rank = rank

            @staticmethod
            def worker_main(*args, **kwargs):
                return Traced(*args, **kwargs)
    """,
}


def _findings(tmp_path, monkeypatch, consumer: str, symbol: str):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = open_build(str(write_tree(tmp_path / "vllm", VLLM))).surface
    tree = write_tree(tmp_path / "c", {"c.py": consumer})
    found = run_probes(ProbeContext(scan_tree(tree_from_path(tree / "c.py")), surface, None))
    return [f for f in found if f.check == "call" and f.symbol.endswith(symbol)]


SUBCLASS = """
    import torch
    from vllm.proposer import Proposer


    class Mixin:
        def propose(self, *args):
            return args


    class Mine({bases}):
        def __init__(self, vllm_config):
            super().__init__({init})

        def propose(self, batch, sampled):
            return super().propose({args})
"""


@pytest.mark.parametrize(("args", "status"), [("batch, sampled", Status.BROKEN), ("3, batch, sampled", Status.OK),
                                              ("batch, sampled=sampled", Status.BROKEN)])
def test_super_calls_bind_to_the_vllm_base(tmp_path, monkeypatch, args, status):
    consumer = SUBCLASS.format(bases="Proposer", init="vllm_config, 'cpu'", args=args)
    findings = _findings(tmp_path, monkeypatch, consumer, "Proposer.propose")
    assert [f.status for f in findings] == [status], [f.message for f in findings]


@pytest.mark.parametrize(("init", "status"), [("vllm_config, 'cpu'", Status.OK), ("vllm_config", Status.BROKEN),
                                              ("vllm_config, device='cpu', extra=1", Status.BROKEN)])
def test_super_init_builds_the_vllm_base(tmp_path, monkeypatch, init, status):
    consumer = SUBCLASS.format(bases="Proposer", init=init, args="3, batch, sampled")
    found = _findings(tmp_path, monkeypatch, consumer, "Proposer")
    findings = [f for f in found if f.consumer_location.endswith(":12")]
    assert [f.status for f in findings] == [status], [f.message for f in findings]


def test_super_reaching_another_base_first_is_not_vllms(tmp_path, monkeypatch):
    # Mixin defines propose: super().propose is the consumer's own. It has no __init__: super().__init__() is
    # vLLM's, called without the arguments it requires.
    consumer = SUBCLASS.format(bases="Mixin, Proposer", init="", args="batch, sampled")
    assert not _findings(tmp_path, monkeypatch, consumer, "Proposer.propose")
    built = [f for f in _findings(tmp_path, monkeypatch, consumer, "Proposer") if f.consumer_location.endswith(":12")]
    assert [f.status for f in built] == [Status.BROKEN]
    # torch.nn.Module comes first and may define either: neither is judged.
    consumer = SUBCLASS.format(bases="torch.nn.Module, Proposer", init="", args="batch, sampled")
    assert not [f for f in _findings(tmp_path, monkeypatch, consumer, "Proposer") if f.consumer_location.endswith(
        (":12", ":15"))]


def test_super_past_another_class_is_not_judged(tmp_path, monkeypatch):
    """``super(Proposer, self).__init__(...)`` starts past vLLM's Proposer (at its base, which the scan does not
    read): not Proposer's own constructor, so not bound to it."""
    consumer = """
        from vllm.proposer import Proposer


        class Mine(Proposer):
            def __init__(self, vllm_config):
                super(Proposer, self).__init__()
                super(Mine, self).__init__(vllm_config)
    """
    found = [f for f in _findings(tmp_path, monkeypatch, consumer, "Proposer") if f.check == "call"]
    assert [(f.consumer_location, f.status) for f in found] == [("c.py:7", Status.BROKEN)], [f.message for f in found]


def test_super_in_a_class_made_inside_a_method_is_not_the_outer_classes(tmp_path, monkeypatch):
    """vllm-ascend's ``_create_optimized_custom_model`` defines ``class Inner(AscendQwen2Model)`` inside a method of
    its subclass of a vLLM class: ``super().forward(...)`` there is Inner's base's, not vLLM's."""
    consumer = """
        from vllm.proposer import Proposer


        class Mine(Proposer):
            def make(self, other_base):
                class Inner(other_base):
                    def propose(self, batch):
                        return super().propose(batch)
                return Inner()
    """
    assert not _findings(tmp_path, monkeypatch, consumer, "Proposer.propose")


PROCESS = """
    import multiprocessing
    from vllm.proposer import worker_main


    def start(cfg):
        kwargs = {kwargs}
        return multiprocessing.Process(target=worker_main, args=(cfg,), kwargs=kwargs, daemon=True)
"""


@pytest.mark.parametrize(("kwargs", "status"), [
    ('{"rank": 0, "ready_pipe": None}', Status.OK),
    ('{"rank": 0, "ready_pipe": None, "death_pipe": None}', Status.OK),  # popped before Proc is built
    ('{"rank": 0}', Status.BROKEN),  # worker_main pops ready_pipe without a default
    ('{"ready_pipe": None}', Status.BROKEN),  # Proc requires rank
    ('{"rank": 0, "ready_pipe": None, "device": "cpu"}', Status.BROKEN),  # Proc takes no device
])
def test_a_process_target_is_called_with_its_args_and_kwargs(tmp_path, monkeypatch, kwargs, status):
    """worker_main takes (*args, **kwargs) and passes them on to Proc: a call binds to Proc's parameters and the
    keys worker_main pops."""
    findings = _findings(tmp_path, monkeypatch, PROCESS.format(kwargs=kwargs), "worker_main")
    assert [f.status for f in findings] == [status], [f.message for f in findings]


def test_passing_on_to_a_callable_the_reading_cannot_follow_is_unknown(tmp_path, monkeypatch):
    consumer = PROCESS.format(kwargs='{"rank": 0, "device": "cpu"}').replace("worker_main", "Traced")
    consumer = consumer.replace("target=Traced", "target=Traced.worker_main")
    findings = _findings(tmp_path, monkeypatch, consumer, "Traced.worker_main")
    assert [f.status for f in findings] == [Status.UNKNOWN], [f.message for f in findings]
    assert "passes its arguments on to vllm.proposer.Traced" in findings[0].message


@pytest.mark.slow
@pytest.mark.network
def test_super_propose_of_vllm_ascend_is_broken_by_vllm_0_26():
    """vllm-ascend 0.18.0's suffix proposer forwards
    ``super().propose(self.runner.input_batch, valid_sampled_token_ids)`` (spec_decode/suffix_proposer.py);
    vLLM 0.26.0's SuffixDecodingProposer.propose takes (num_speculative_tokens, input_batch, sampled_token_ids,
    slot_mappings=None), so sampled_token_ids is left unbound. At 0.18.0, the release it was written for, the
    same call binds."""
    from compat import sources
    from compat.audit.pipeline import AuditOptions, Auditor

    scan = scan_tree(sources.tree_from_release("vllm-ascend", "0.18.0"))
    statuses = {}
    for version in ("0.18.0", "0.26.0"):
        result = Auditor(AuditOptions()).run(scan, open_build(version))
        statuses[version] = {f.status for f in result.findings if f.check == "call" and "suffix_proposer" in
                             f.consumer_location and f.symbol.endswith("SuffixDecodingProposer.propose")}
    assert statuses == {"0.18.0": {Status.OK}, "0.26.0": {Status.BROKEN}}, statuses


@pytest.mark.slow
@pytest.mark.network
def test_vllm_ascend_starts_workers_without_an_argument_vllm_0_18_requires():
    """vllm-ascend 0.13.0 starts each worker with ``context.Process(target=WorkerProc.worker_main,
    kwargs=process_kwargs)`` (patch/platform/patch_multiproc_executor.py), the dict written out just above.
    vLLM's ``worker_main(*args, **kwargs)`` pops ``ready_pipe``/``death_pipe`` and builds ``WorkerProc(*args,
    **kwargs)``; 0.18.0's ``WorkerProc.__init__`` (behind ``@instrument``, which keeps the signature) requires
    ``is_driver_worker``, which the dict lacks. At 0.13.0, the release it was written for, the call binds."""
    from compat import sources
    from compat.audit.pipeline import AuditOptions, Auditor

    scan = scan_tree(sources.tree_from_release("vllm-ascend", "0.13.0"))
    found = {}
    for version in ("0.13.0", "0.18.0"):
        result = Auditor(AuditOptions()).run(scan, open_build(version))
        found[version] = [f for f in result.findings if f.check == "call" and f.symbol.endswith(
            "WorkerProc.worker_main") and "patch_multiproc_executor" in f.consumer_location]
    assert [f.status for f in found["0.13.0"]] == [Status.OK], [f.message for f in found["0.13.0"]]
    assert [f.status for f in found["0.18.0"]] == [Status.BROKEN], [f.message for f in found["0.18.0"]]
    assert "is_driver_worker" in found["0.18.0"][0].message


def test_super_of_a_method_vllm_dropped_in_its_own_override_is_changed_not_broken(tmp_path, monkeypatch):
    """``super().gone(...)`` in the consumer's override of ``gone``, which vLLM's class no longer has: it fails only
    where the override still runs, and vLLM no longer calls it. The same call from another method is broken."""
    consumer = """
        from vllm.proposer import Proposer


        class Mine(Proposer):
            def gone(self, x):
                return super().gone(x)

            def other(self, x):
                return super().gone(x)
    """
    findings = _findings_of(tmp_path, monkeypatch, consumer, "attribute")
    by_line = {f.consumer_location.rsplit(":", 1)[1]: f.status for f in findings if f.symbol.endswith(".gone")}
    assert by_line == {"6": Status.CHANGED, "9": Status.BROKEN}, [f.message for f in findings]


def _findings_of(tmp_path, monkeypatch, consumer: str, check: str):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = open_build(str(write_tree(tmp_path / "vllm", VLLM))).surface
    tree = write_tree(tmp_path / "c", {"c.py": consumer})
    return [f for f in run_probes(ProbeContext(scan_tree(tree_from_path(tree / "c.py")), surface, None))
            if f.check == check]
