"""Semantic probes over real releases: each seed breakage at the first release where it appears.

First releases established by reading each release's code:
- collective_rpc(..., unique_reply_rank=r) returns `responses[0] if output_rank is not None else responses`
  from 0.11.1 (vllm/v1/executor/multiproc_executor.py); 0.11.0 returns the list of responses;
- the model runner's execute_model returns None and raises "State error: sample_tokens() must be called after
  execute_model() returns None." from 0.11.1 (vllm/v1/worker/gpu_model_runner.py);
- CacheConfig.enable_prefix_caching defaults to True from 0.12.0 (None before; vllm/config/cache.py), so a
  Request without a block hasher fails in BlockPool.cache_full_blocks;
- base models have embed_input_ids, not get_input_embeddings, from 0.11.1 (e.g. vllm/model_executor/models/llama.py);
- DeepseekV2Model calls layer(positions, hidden_states, residual, llama_4_scaling) from 0.12.0;
- LlamaModel.forward takes and passes **extra_layer_kwargs from 0.15.0;
- KimiK25ForConditionalGeneration is registered from 0.15.0, its decoder stack at language_model.model.
"""

from __future__ import annotations

import pytest

from compat.findings import Status
from compat.sources import index

pytestmark = [pytest.mark.network]


EXPECTED_FIRST = {
    ("reply-shape", "vllm.v1.executor.multiproc_executor.MultiprocExecutor.collective_rpc", "broken"): "0.11.1",
    ("protocol", "vllm.v1.executor.multiproc_executor.MultiprocExecutor.execute_model", "broken"): "0.11.1",
    ("block-hashing", "vllm.v1.request.Request", "broken"): "0.12.0",
    ("model", "LlamaForCausalLM:member:get_input_embeddings", "broken"): "0.11.1",
    ("model", "DeepseekV2ForCausalLM:member:get_input_embeddings", "broken"): "0.11.1",
    ("model", "DeepseekV3ForCausalLM:layer-call", "changed"): "0.12.0",
    ("model", "LlamaForCausalLM:layer-call", "changed"): "0.15.0",
    ("model", "KimiK25ForConditionalGeneration:path", "broken"): "0.15.0",
}


def _rpc_line(scan, method: str) -> int:
    return next(tp.location.line for tp in scan.touchpoints if tp.rpc_method == method)


@pytest.mark.slow
def test_each_semantic_breakage_first_appears_where_the_code_changed(audit, speculators_scan):
    first, found = {}, {}
    for version in index.resolve_range("vllm", ">=0.11.0"):
        for f in audit(str(version)).findings:
            key = (f.check, f.symbol, f.status.value)
            if key in EXPECTED_FIRST and key not in first:
                first[key] = str(version)
                found[key] = f
    assert first == EXPECTED_FIRST
    for f in found.values():
        assert f.vllm_location and ".py:" in f.vllm_location  # evidence in the audited build's code
        assert f.consumer_location.startswith(("speculators/data_generation/",))


def test_reply_index_is_ok_on_the_pinned_release_and_broken_when_the_reply_changes(audit, speculators_scan):
    line = _rpc_line(speculators_scan, "_get_captured_states")
    before = [f for f in audit("0.11.0").findings if f.check == "reply-shape" and f.consumer_location.endswith(
        f":{line}")]
    after = [f for f in audit("0.11.1").findings if f.check == "reply-shape" and f.consumer_location.endswith(
        f":{line}")]
    assert [f.status for f in before] == [Status.OK] and "list" in before[0].message
    assert [f.status for f in after] == [Status.BROKEN]
    assert "[0]" in after[0].message and "captured_states_list[0]" in after[0].message
    assert after[0].vllm_location.startswith("vllm/v1/executor/multiproc_executor.py:")


def test_two_phase_protocol_names_the_error_the_build_raises(audit):
    f = next(f for f in audit("0.32.0").findings if f.check == "protocol")
    assert f.status is Status.BROKEN
    assert "sample_tokens() must be called after execute_model() returns None" in f.message
    assert f.vllm_location.startswith("vllm/v1/worker/gpu_model_runner.py:")


def test_block_hashing_failure_mode_is_read_from_each_build(audit):
    old = next(f for f in audit("0.12.0").findings if f.check == "block-hashing")
    new = next(f for f in audit("0.32.0").findings if f.check == "block-hashing")
    assert old.status is new.status is Status.BROKEN
    assert "AssertionError" in old.message and "IndexError" in new.message
    pinned = next(f for f in audit("0.11.0").findings if f.check == "block-hashing")
    assert pinned.status is Status.OK and "off" in pinned.message


def test_model_conventions_for_kimi_and_deepseek(audit):
    findings = {f.symbol: f for f in audit("0.32.0").findings if f.check == "model"}
    kimi = findings["KimiK25ForConditionalGeneration:path"]
    assert kimi.status is Status.BROKEN and "model.language_model.model" in kimi.message
    layer = findings["DeepseekV3ForCausalLM:layer-call"]
    assert layer.status is Status.CHANGED and "llama_4_scaling" in layer.message
    embed = findings["DeepseekV3ForCausalLM:member:get_input_embeddings"]
    assert embed.status is Status.BROKEN and embed.fix == "use self.embed_input_ids"


def test_startup_steps_new_since_the_written_for_build(speculators_scan, build):
    """The KV cache layout steps are broken at 0.32.0 on every platform: they write CacheConfig.kv_cache_layout,
    which the consumer's own path reads (get_kv_cache_config_from_groups -> get_resolved_kv_cache_layout, which
    raises while it is None); a step it does itself is ok."""
    from compat.audit.pipeline import AuditOptions, Auditor

    result = Auditor(AuditOptions()).run(speculators_scan, build("0.32.0"))
    startup = {f.touchpoint: f for f in result.findings if f.check == "startup"}
    finding = startup["startup:resolve_kv_cache_layout"]
    assert finding.status is Status.BROKEN, finding.message
    assert "CacheConfig.kv_cache_layout" in finding.message and "get_resolved_kv_cache_layout" in finding.message
    assert "on CUDA: broken" in finding.message and "on CPU: broken" in finding.message
    # Publishing the layout to the workers: Worker.initialize_from_config, which the consumer calls, records the
    # layout the KV cache config carries with the same statement (record_kv_cache_layout).
    published = startup["startup:set_kv_cache_layout"]
    assert published.status is Status.OK, published.message
    assert "runs the statements that write its state itself (CacheConfig.kv_cache_layout at " \
           "vllm/v1/attention/backends/utils.py:" in published.message
    assert startup["startup:initialize_from_config"].status is Status.OK


def test_startup_steps_the_pipeline_does_not_need_are_ok_with_the_state_that_says_so(speculators_scan, build):
    """Every skipped step is judged by what it writes (no list of accepted steps): ok where nothing on the
    consumer's path reads it, where it writes nothing the consumer's objects hold, or where the path runs the same
    statements itself (the spec registry fills itself on first use); steps under prefix caching, which
    speculators leaves to the build, are not ok: the scheduler it builds reads the switch they run under."""
    from compat.audit.pipeline import AuditOptions, Auditor

    result = Auditor(AuditOptions()).run(speculators_scan, build("0.32.0"), written_for=build("0.11.0").surface)
    startup = {f.touchpoint.removeprefix("startup:"): f for f in result.findings if f.check == "startup"}
    said = {"update_kv_cache_capacity": "nothing on the consumer's path reads what it writes",
            "compile_or_warm_up_model": "nothing on the consumer's path reads what it writes (CompilationConfig.",
            "get_kv_connector_handshake_metadata": "it writes no state the consumer's objects hold",
            "is_full_attention_spec": "it writes no state the consumer's objects hold",
            "register_all_kvcache_specs": "runs the statements that write its state itself (the module global "
                                          "kv_cache_spec_registry._REGISTRY_KVCACHESPEC_LIST at "}
    for name, reason in said.items():
        assert startup[name].status is Status.OK and reason in startup[name].message, startup[name].message
    for name in ("init_none_hash", "get_request_block_hasher"):
        # whether the build leaves prefix caching on for the consumer's model is the model's to say
        # (VllmConfig.__post_init__): not decided here, so unknown (having skipped it with 0.11.0 decides nothing)
        assert startup[name].status is Status.UNKNOWN, startup[name].message
        assert "CacheConfig.enable_prefix_caching is unknown" in startup[name].message, startup[name].message
    # A step writing an object's attribute that the consumer's path passes on to a def testing it first
    # (execute_model -> collective_rpc(kv_output_aggregator=...), ``if kv_output_aggregator is not None``).
    for name in ("init_kv_output_aggregator", "init_ec_output_aggregator"):
        assert startup[name].status is Status.OK, startup[name].message
        assert "output_aggregator of the object it runs on) but to test whether it is set" in startup[name].message
    # max_model_len_after != max_model_len_before: nothing on the consumer's path changes it after the configs
    assert startup["update_max_model_len"].status is Status.OK, startup["update_max_model_len"].message
    assert "changed between two of its own reads" in startup["update_max_model_len"].message


def test_the_extensible_kv_cache_is_broken_on_cuda_and_skipped_on_cpu(speculators_scan, build):
    """vLLM 0.34.0 resolves CacheConfig.enable_extensible_kv_cache (declared None) to True on CUDA, False on CPU
    (VllmConfig._resolve_extensible_kv_cache); the engine core's steps under it are broken on CUDA, where the
    workers the consumer starts read the switch, and ok on CPU, where the engine core skips them too."""
    from compat.audit.pipeline import AuditOptions, Auditor

    result = Auditor(AuditOptions()).run(speculators_scan, build("0.34.0"))
    startup = {f.touchpoint.removeprefix("startup:"): f for f in result.findings if f.check == "startup"}
    for name in ("extensible_kv_cache_unsupported_reason", "finalize_extensible_kv_cache", "extend_kv_cache"):
        finding = startup[name]
        assert finding.status is Status.BROKEN, finding.message
        assert "on CUDA: broken" in finding.message and "on CPU: ok, the engine core skips it too" in finding.message
        assert "CacheConfig.enable_extensible_kv_cache is True (vllm/config/vllm.py:" in finding.message
        assert "Worker.initialize_from_config" in finding.message
    assert startup["resolve_kv_cache_layout"].status is Status.BROKEN


@pytest.mark.parametrize(("passed", "expected"), [
    ("enable_prefix_caching=False", Status.OK), ("enable_prefix_caching=True", Status.UNKNOWN)])
def test_a_start_up_step_under_prefix_caching_follows_the_consumers_cache_config(build, tmp_path, passed, expected):
    """init_none_hash runs under ``if vllm_config.cache_config.enable_prefix_caching or <a KV connector>``: with
    the switch passed off nothing on the consumer's path reads what it writes; on, the build may still turn it off
    for the model (VllmConfig.__post_init__), which the scheduler the consumer builds reads: unknown, never ok."""
    from compat.audit.pipeline import run_probes
    from compat.consumer.scan import scan_tree
    from compat.probe import ProbeContext
    from compat.sources import tree_from_path

    (tmp_path / "c.py").write_text(
        "from vllm.config import CacheConfig, VllmConfig\n"
        "from vllm.v1.core.sched.scheduler import Scheduler\n"
        "from vllm.v1.executor.multiproc_executor import MultiprocExecutor\n\n\n"
        "def start(specs):\n"
        f"    config = VllmConfig(cache_config=CacheConfig({passed}))\n"
        "    executor = MultiprocExecutor(vllm_config=config)\n"
        "    return Scheduler(vllm_config=config, kv_cache_config=specs, structured_output_manager=None, "
        "block_size=16)\n")
    ctx = ProbeContext(scan_tree(tree_from_path(tmp_path / "c.py")), build("0.32.0").surface, None)
    from compat.probes import startup

    found = {f.touchpoint: f for f in run_probes(ctx, [startup.PROBE])}
    hashing = found["startup:init_none_hash"]
    assert hashing.status is expected, hashing.message
    assert expected is Status.OK or "CacheConfig.enable_prefix_caching is unknown" in hashing.message
