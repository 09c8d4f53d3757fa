"""The audit on the second round of real consumers nobody had tuned it for (benchmarks/consumers.py --round 2):
each cause of a false alarm or a miss found there, on the release that shows it. The fixtures of each cause are in
tests/unit/probes/ (test_models, test_protocol, test_imports, test_patches, test_gates)."""

from __future__ import annotations

import pytest

from compat import sources
from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer.result import Kind
from compat.consumer.scan import scan_tree
from compat.findings import Status

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def kunlun():
    return scan_tree(sources.tree_from_release("vllm-kunlun", "0.11.1"))


def _audit(scan, build, vllm: str, written_for: str | None = None):
    return Auditor(AuditOptions(confirm="never")).run(scan, build(vllm),
                                                      written_for=build(written_for).surface if written_for else None)


def test_forwards_ms_swift_replaces_on_hugging_face_models_are_not_judged_as_vllm_s(build):
    """ms-swift 4.6.0 replaces the forward of Hugging Face models it trains (qwen.py: ``model.forward =
    MethodType(forward, model)`` on a parameter): 79 broken findings at 0.31.0 judged them against vLLM's Llama,
    Qwen3 and DeepSeek models. Nothing traces those objects to vLLM's model: one unknown per patch."""
    scan = scan_tree(sources.tree_from_release("ms-swift", "4.6.0"))
    result = _audit(scan, build, "0.31.0")
    models = [f for f in result.findings if f.check == "model"]
    assert models and all(f.status is Status.UNKNOWN and f.symbol == "*:path" for f in models), \
        [(f.status, f.symbol, f.message[:120]) for f in models if f.status is not Status.UNKNOWN]
    assert len(models) == len(scan.model_patches)
    assert all("not trace to vLLM's model" in f.message for f in models)


def test_a_setattr_patch_of_a_vllm_module_is_a_patch(kunlun):
    """vllm-kunlun 0.11.1 puts its Kimi-K2.5 configs into vLLM's config package with ``setattr(configs_module,
    "KimiK25Config", KimiK25Config)`` (vllm_kunlun/__init__.py:59-60): before, the scan did not see it at all."""
    patched = [tp for tp in kunlun.touchpoints
               if tp.kind == Kind.PATCH and tp.location.file == "vllm_kunlun/__init__.py"
               and tp.symbol.startswith("vllm.transformers_utils.configs.KimiK25")]
    assert sorted((tp.location.line, tp.symbol.rsplit(".", 1)[1]) for tp in patched) == [
        (59, "KimiK25Config"), (60, "KimiK25VisionConfig")], [str(tp.location) for tp in patched]
    assert all(tp.replacement is not None and tp.replacement.patcher.endswith(tp.symbol.rsplit(".", 1)[1])
               for tp in patched)


def test_overrides_are_judged_by_the_calls_that_reach_them_on_kunlun(kunlun, build):
    """vllm-kunlun's dummy-input builders override vLLM's BaseDummyInputsBuilder; at 0.14.0 the calls the audit
    held against them were vLLM's own sibling builders' (InternVL's super() call, ERNIE's _get_dummy_videos), which
    never reach a kunlun object. _get_dummy_videos, which only siblings call, is ok; get_dummy_mm_data is judged
    by the call that does reach it (the profiler's, on the base class), not InternVL's."""
    result = _audit(kunlun, build, "0.14.0", "0.11.0")
    by_place = {(f.consumer_location, f.symbol.rsplit(".", 1)[-1]): f for f in result.findings if f.check == "patch"}
    videos = by_place[("vllm_kunlun/models/qwen3_vl.py:782", "_get_dummy_videos")]
    assert videos.status is Status.OK and "calls it only on other classes" in videos.message, videos.message
    dummy = by_place[("vllm_kunlun/models/internvl.py:753", "get_dummy_mm_data")]
    assert "vllm/model_executor/models/internvl.py" not in dummy.message, dummy.message
    assert "vllm/multimodal/profiling.py" in dummy.message, dummy.message
    # the same audit still finds what breaks for real: the import of the removed _Backend
    assert any(f.status is Status.BROKEN and f.symbol == "vllm.platforms.interface._Backend" for f in result.findings)


def test_hasattr_on_self_in_a_subclass_of_a_vllm_class_is_a_guard_the_build_answers(kunlun, build):
    """kunlun's GPUModelRunner (over vLLM's model-runner mixins) loads the drafter under ``hasattr(self,
    "drafter")``: a guard on the vLLM base that the build answers (present: runs; absent: not known, since the
    instance may be given it), no longer code judged as if it always ran."""
    drafter = [tp for tp in kunlun.touchpoints if tp.location.file == "vllm_kunlun/v1/worker/gpu_model_runner.py"
               and tp.location.line == 2665]
    assert drafter and all(any(g.text == "hasattr(self, 'drafter')" for g in tp.guards) for tp in drafter)
