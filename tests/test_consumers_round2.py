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


def test_hasattr_on_self_is_a_test_of_the_build_only_where_the_consumer_does_not_set_it(kunlun):
    """kunlun's GPUModelRunner (over vLLM's model-runner mixins) loads the drafter under ``hasattr(self,
    "drafter")``; its own __init__ sets ``self.drafter`` (gpu_model_runner.py:281-288), so the test is of its own
    state, not of the build: the code under it may run with any build and is judged. Its ``hasattr`` tests of
    names only vLLM's classes define are guards the build answers (tests/unit/probes/test_imports.py)."""
    drafter = [tp for tp in kunlun.touchpoints if tp.location.file == "vllm_kunlun/v1/worker/gpu_model_runner.py"
               and tp.location.line == 2665]
    assert drafter and not any("drafter" in g.text for tp in drafter for g in tp.guards), \
        [g.text for tp in drafter for g in tp.guards]


@pytest.fixture(scope="module")
def mindspore():
    return scan_tree(sources.tree_from_release("vllm-mindspore", "0.5.1"))


def test_what_vllm_mindspore_puts_in_vllm_s_place_is_judged_as_it_runs(mindspore, build):
    """vllm-mindspore 0.5.1 (held out, read against both sources at 0.11.0, the release it was written for, and at
    0.14.0): six of its 14 broken findings at 0.11.0 were false alarms, now gone, while the true ones stay."""
    at_11 = _audit(mindspore, build, "0.11.0")
    by_place = {(f.check, f.consumer_location): f for f in at_11.findings if f.check == "patch"}
    # Five LoRA layer classes assigned into vllm.lora.layers without deriving from vLLM's: vLLM's own
    # *WithShardedLoRA subclasses were made over the originals, so their super().can_replace_layer(...,
    # decorate=False) never reaches the replacements.
    for line in (153, 154, 156, 158, 159):
        lora = by_place[("patch", f"vllm_mindspore/__init__.py:{line}")]
        assert lora.status is not Status.BROKEN, lora.message
    # ``vllm.config.current_platform = ascend_platform`` (__init__.py:55), imported from vllm.config elsewhere.
    (platform,) = [f for f in at_11.findings if f.symbol == "vllm.config.current_platform"
                   and f.consumer_location == "vllm_mindspore/model_executor/layers/logits_processor.py:27"]
    assert platform.status is Status.OK and "defined by the consumer at vllm_mindspore/__init__.py:55" in \
        platform.message, platform.message
    # The true break at the written-for release stays: TensorizerArgs.deserializer_params, renamed in 0.11.0.
    assert any(f.status is Status.BROKEN and f.consumer_location == "vllm_mindspore/lora/models.py:180"
               for f in at_11.findings)

    at_14 = _audit(mindspore, build, "0.14.0", "0.11.0")
    broken = {(f.check, f.consumer_location, f.symbol) for f in at_14.findings if f.status is Status.BROKEN}
    # A hook vLLM calls in a try that falls back where it raises NotImplementedError (gloo then).
    assert not any(check == "inbound" and symbol.endswith(":stateless_init_device_torch_dist_pg")
                   for check, _, symbol in broken), sorted(broken)
    # vLLM's only call of _reshape_kv_cache_tensors sits in initialize_kv_cache_tensors, which the plugin
    # replaces too; but execute_model is wrapped (``wrap(GPUModelRunner.execute_model)``), so vLLM's call of
    # _prepare_inputs in it still reaches the plugin's one-argument replacement: a true break.
    assert not any(symbol.endswith("._reshape_kv_cache_tensors") for _, _, symbol in broken), sorted(broken)
    assert ("patch", "vllm_mindspore/__init__.py:298",
            "vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_inputs") in broken, sorted(broken)


def test_hasattr_on_self_of_what_the_consumer_stores_itself_is_not_a_test_of_the_build(build):
    """arctic-inference 0.2.0's ``has_shift = hasattr(self, "shift_model")`` tests the runner patch's own
    attribute (``self.shift_model = get_model(...)``, model_runner.py:1707): the call it guards at 0.18.0, of a
    method neither vLLM nor arctic defines, is broken, not unknown."""
    scan = scan_tree(sources.tree_from_release("arctic-inference", "0.2.0"))
    result = _audit(scan, build, "0.18.0")
    shift = [f for f in result.findings if f.consumer_location == "arctic_inference/vllm/model_runner.py:1956"]
    assert [f.status for f in shift] == [Status.BROKEN], [f.message for f in shift]


def test_tpu_inference_s_own_scheduler_attribute_and_the_rpcs_of_a_feature_off_by_default(build):
    """tpu-inference 0.32.0 at vLLM 0.34.0: ``_original_scheduler_cls``, which it stores on ``vllm_config.
    scheduler_config`` itself (``vllm_config: Any``), is its own attribute; extend_kv_cache and
    set_kv_cache_reclaimable, which 0.34.0 sends only under ``enable_extensible_kv_cache`` (true by default on
    CUDA only), do not fail its TPU workers for certain: its own platform decides; nor does the x_scale vLLM
    passes to apply_monolithic only on one path. vLLM's dropped ModelRunnerOutput.req_id_to_index stays broken."""
    scan = scan_tree(sources.tree_from_release("tpu-inference", "0.32.0"))
    result = _audit(scan, build, "0.34.0", "0.32.0")
    status = {(f.check, f.consumer_location, f.symbol.rsplit(".", 1)[-1].rsplit(":", 1)[-1]): f.status
              for f in result.findings}
    assert status[("attribute", "tpu_inference/core/sched/dp_scheduler.py:521", "_original_scheduler_cls")] \
        is Status.OK
    for rpc in ("extend_kv_cache", "set_kv_cache_reclaimable"):
        assert status[("inbound", "tpu_inference/worker/tpu_worker.py:178", rpc)] is Status.UNKNOWN, rpc
    assert status[("call", "tpu_inference/runner/tpu_runner.py:1793", "ModelRunnerOutput")] is Status.BROKEN
    # vLLM passes x_scale to apply_monolithic only from ``extra = {} if x_scale is None else {...}``
    # (fused_moe/routed_experts.py:1476-1479): whether it is set at run time is not read.
    monolithic = [f for f in result.findings
                  if f.consumer_location == "tpu_inference/layers/vllm/quantization/fp8.py:529"]
    assert [f.status for f in monolithic] == [Status.UNKNOWN], [f.message for f in monolithic]
    assert "with x_scale only when `not (x_scale is None)`" in monolithic[0].message


def test_vllm_spyre_s_profiler_helper_runs_only_where_find_spec_finds_the_wrapper(build):
    """vllm-spyre 1.10.0 calls ``self._setup_profiler_wrapper()`` only after ``if importlib.util.find_spec(
    "vllm.profiler.wrapper") is None: return ...`` (spyre_worker.py:330-340); the helper imports that module
    (:347). vLLM 0.11.0 has no vllm/profiler/wrapper.py: the helper's code does not run there (it was judged
    broken, twice); 0.18.0 has it, and the helper is judged."""
    scan = scan_tree(sources.tree_from_release("vllm-spyre", "1.10.0"))
    for vllm, runs in (("0.11.0", False), ("0.18.0", True)):
        found = [f for f in _audit(scan, build, vllm).findings
                 if f.consumer_location == "vllm_spyre/v1/worker/spyre_worker.py:347"]
        assert [f.status for f in found] == [Status.OK], [f.message for f in found]
        assert ("not run with this build" in found[0].message) is not runs, found[0].message


def test_vllm_ascend_s_own_patch_order_and_pydantic_s_dunders_are_not_the_build_s(build):
    """vllm-ascend 0.18.0 at its own build: patch_glm_tool_call_parser raises at import unless OpenAIServingChat has
    ``_make_usage_info`` (:1077), which its usage-accounting patch, imported just before, sets (:118): the build
    does not decide it (unknown, not broken). ``SpeculativeConfig.__pydantic_decorators__`` (patch_minimax_m2_config
    .py:175) is pydantic's, not a vLLM name the build lacks."""
    scan = scan_tree(sources.tree_from_release("vllm-ascend", "0.18.0"))
    result = _audit(scan, build, "0.18.0")
    gate = [f for f in result.findings
            if f.consumer_location == "vllm_ascend/patch/platform/patch_glm_tool_call_parser.py:1078"]
    assert [f.status for f in gate] == [Status.UNKNOWN], [f.message for f in gate]
    pydantic = [f for f in result.findings if "__pydantic_decorators__" in f.symbol and f.status is not Status.OK]
    assert pydantic == [], [f.message for f in pydantic]


def test_ai_dynamo_s_find_spec_flag_and_pass_through_worker_are_judged_as_they_run(build):
    """ai-dynamo 1.6.1 (pins vLLM 0.31.0; the releases nobody had read, found for the causes the corpus lacked):
    ``vllm_protocol.py`` binds ``_HAS_GENERATE_PROTOCOL = find_spec("vllm.entrypoints.generate.base.protocol")
    is not None`` in a ``try`` whose handler sets it False, then imports from the new module or the legacy one
    (:25). The legacy import was judged broken at the build it pins, where the new module exists and the legacy
    branch never runs. ``BenchmarkWorker(Worker).execute_model`` passes ``scheduler_output`` on to
    ``super().execute_model`` (benchmark_worker.py:133): vLLM's engine loop, not the consumer's."""
    scan = scan_tree(sources.tree_from_release("ai-dynamo", "1.6.1"))
    for vllm in ("0.31.0", "0.34.0"):
        findings = _audit(scan, build, vllm, "0.31.0").findings
        legacy = [f for f in findings if f.consumer_location == "dynamo/frontend/vllm_protocol.py:25"]
        assert legacy and all(f.status is Status.OK and "not run with this build" in f.message for f in legacy), \
            [f.message for f in legacy]
        loop = [f for f in findings if f.check == "protocol"
                and f.consumer_location == "dynamo/vllm/benchmark_worker.py:133"]
        assert [f.status for f in loop] == [Status.OK], [f.message for f in loop]
        assert "vLLM's own engine calls it and drives the steps" in loop[0].message, loop[0].message


def test_vllm_rbln_s_own_assert_on_vllm_s_version_breaks_its_import_at_the_next_release(build):
    """vllm-rbln 0.12.0 (pins vLLM 0.30.0) asserts at the top of patches/harmony.py, which its patches package
    imports: ``assert Version(version("vllm")) < Version("0.31.0"), ...`` (:38). At 0.31.0 the import raises
    AssertionError; an ``assert`` was not read as a raise, so nothing was reported."""
    scan = scan_tree(sources.tree_from_release("vllm-rbln", "0.12.0"))
    for vllm, status in (("0.30.0", Status.OK), ("0.31.0", Status.BROKEN)):
        gate = [f for f in _audit(scan, build, vllm, "0.30.0").findings
                if f.check == "gate" and f.consumer_location == "vllm_rbln/patches/harmony.py:38"]
        assert [f.status for f in gate] == [status], [f.message for f in gate]
    assert f"raises for vLLM {vllm}" in gate[0].message and "if version >= 0.31.0" in gate[0].message, \
        gate[0].message
