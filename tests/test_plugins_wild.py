"""The audit on real vLLM plugins (vllm-rbln, vllm-ascend), each against the release it was written for and
later ones: what each certainty and inbound rule changes, on the release where the cause was found. The causes
are tested on small trees in tests/test_stand_ins.py, tests/test_own_subclass.py and tests/test_inbound.py."""

from __future__ import annotations

import pytest

from compat import sources
from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer import visitor
from compat.consumer.scan import cached_scan, scan_tree

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rbln():
    return cached_scan(sources.tree_from_release("vllm-rbln", "0.12.0"))


def _audit(scan, build, vllm: str, written_for: str):
    return Auditor(AuditOptions(confirm="never")).run(scan, build(vllm), written_for=build(written_for).surface)


def _at(result, location: str, check: str | None = None):
    return [f for f in result.findings if f.consumer_location == location and (check is None or f.check == check)]


def test_rbln_at_the_release_it_pins_has_nothing_broken(rbln, build):
    """Its own MoE method and MLA implementation stand in for vLLM's declared classes (4 false alarms before)."""
    result = _audit(rbln, build, "0.30.0", "0.30.0")
    assert not [f for f in result.findings if f.status.value == "broken"], \
        [f.message for f in result.findings if f.status.value == "broken"]
    (apply,) = [f for f in _at(result, "vllm_rbln/model_executor/layers/fused_moe/runner/moe_runner.py:360", "call")]
    assert apply.status.value == "unknown" and "RBLNUnquantizedFusedMoEMethod" in apply.message, apply.message


def test_rbln_three_minors_later(rbln, build):
    result = _audit(rbln, build, "0.33.0", "0.30.0")
    # self in its Scheduler subclass is that subclass: the internals vLLM removed are broken (were unknown).
    (select,) = _at(result, "vllm_rbln/v1/core/optimum_scheduler.py:373", "attribute")
    assert select.status.value == "broken" and "_select_waiting_queue_for_scheduling" in select.message
    # allocate_slots' new keyword is passed only by Scheduler.schedule, which its schedulers replace.
    (allocate,) = _at(result, "vllm_rbln/v1/core/rbln_kv_cache_manager.py:498", "patch")
    assert allocate.status.value == "ok", allocate.message
    # _handle_failed_transfer: vLLM's get_transfer_results passes record_failed_transfer=, and rbln's override of
    # get_transfer_results calls super(), so vLLM's call still reaches rbln's method.
    (failed,) = _at(result, "vllm_rbln/distributed/kv_transfer/kv_connector/v1/rbln_nixl/state.py:261", "patch")
    assert failed.status.value == "broken" and "record_failed_transfer" in failed.message, failed.message
    # An override vLLM no longer calls is a change, not a breakage.
    (prefix,) = _at(result, "vllm_rbln/v1/kv_cache.py:139", "patch")
    assert prefix.status.value == "changed", prefix.message


def test_ascend_inbound_contract(build):
    """The four inbound kinds on vllm-ascend releases, each confirmed by reading vLLM's code: a platform hook
    (``current_platform.manual_seed_all`` in ``set_random_seed``), an RPC's new argument (``profile``), a return
    value read differently (``.language_model`` on ``compile_or_warm_up_model``'s float), an RPC its worker
    lacks (``reset_encoder_cache``)."""
    def inbound(release, vllm):
        scan = cached_scan(sources.tree_from_release("vllm-ascend", release))
        return [f for f in _audit(scan, build, vllm, release).findings
                if f.check == "inbound" and f.status.value == "broken"]

    later = inbound("0.18.0", "0.20.0")
    assert any("manual_seed_all at vllm/utils/torch_utils.py" in f.message for f in later), [f.message for f in later]
    assert any(".language_model on what compile_or_warm_up_model returns" in f.message for f in later)
    mid = inbound("0.13.0", "0.17.0")
    assert any("sends profile" in f.message and "refuses" in f.message for f in mid), [f.message for f in mid]
    assert any("sends reset_encoder_cache" in f.message for f in mid), [f.message for f in mid]


def test_a_scan_failure_in_one_file_of_a_real_consumer_is_one_error_and_the_rest_is_complete(monkeypatch):
    """A function of vllm-tgis-adapter 0.10.0's gRPC server whose walk raises: one problem at that def, every
    touchpoint of the other files as in the clean scan."""
    tree = sources.tree_from_release("vllm-tgis-adapter", "0.10.0")
    clean = scan_tree(tree)
    original = visitor.ModuleVisitor.visit_FunctionDef

    def planted(self, node):
        if node.name == "_get_tokenizer" and self.source.relpath.endswith("grpc_server.py"):
            raise KeyError("planted")
        return original(self, node)

    monkeypatch.setattr(visitor.ModuleVisitor, "visit_AsyncFunctionDef", planted)  # an ``async def``
    scan = scan_tree(tree)
    (problem,) = scan.problems
    assert problem.location.file.endswith("grpc/grpc_server.py") and "KeyError: 'planted'" in problem.message

    def elsewhere(s):
        return {(str(t.location), t.symbol) for t in s.touchpoints if not t.location.file.endswith("grpc_server.py")}

    assert elsewhere(scan) == elsewhere(clean) and elsewhere(clean)
    assert len(scan.touchpoints) < len(clean.touchpoints)


def test_an_architecture_the_release_never_supported_is_not_its_breakage(build):
    """speculators 0.3.0 refuses DeepSeek with its own supports_eagle3() check on 0.11.0, the build it pins, and
    on 0.12.0 alike: unknown (not supported there), not broken; Llama is accepted on both."""
    scan = cached_scan(sources.tree_from_release("speculators", "0.3.0"))
    result = _audit(scan, build, "0.12.0", "0.11.0")
    eagle3 = {f.symbol: f for f in result.findings if f.symbol.endswith(":eagle3")}
    assert eagle3["DeepseekV3ForCausalLM:eagle3"].status.value == "unknown"
    assert "as in the build it was written for" in eagle3["DeepseekV3ForCausalLM:eagle3"].message
    assert eagle3["LlamaForCausalLM:eagle3"].status.value == "ok"
