"""An override vLLM no longer calls is `changed` (what it did is no longer done, which may not matter), unless it
was the only method of the consumer's class to write ``self.x`` after construction and another method the class
still runs reads ``self.x`` (that method now reads a value nothing keeps up to date), or vLLM's class has a new
method in its place that the consumer does not override (a renamed hook: vLLM calls its own): then `broken`."""

from __future__ import annotations

import pytest

from compat.audit.pipeline import run_probes
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

RUNNER = """
    class Runner:
        def prepare_inputs(self, batch):
            return batch
        {extra}
"""
POSTPROCESS = "\n        def postprocess(self, sampled):\n            return sampled\n"
THEN = {"vllm/__init__.py": "", "vllm/_version.py": '__version__ = "1.0.0"\n',
        "vllm/runner.py": RUNNER.format(extra=POSTPROCESS)}
NOW = {"vllm/__init__.py": "", "vllm/_version.py": '__version__ = "2.0.0"\n', "vllm/runner.py": RUNNER.format(extra="")}

CONSUMER = """
    import torch
    from vllm.runner import Runner


    class NpuRunner(Runner):
        def __init__(self):
            self.computed = torch.empty(8)
            self.count = 0

        def postprocess(self, sampled):
            {write}
            self.count += 1

        def prepare_inputs(self, batch):
            {read}
            return batch
"""


@pytest.mark.parametrize(("write", "read", "status"), [
    ("self.computed.copy_(sampled)", "batch.seq_lens = self.computed", Status.BROKEN),
    ("self.computed[0] = sampled", "batch.seq_lens = self.computed[0]", Status.BROKEN),
    ("self.computed = sampled", "batch.seq_lens = self.computed", Status.BROKEN),
    ("self.computed.copy_(sampled)", "batch.seq_lens = None", Status.CHANGED),  # nothing reads what it wrote
    ("print(self.computed)", "batch.seq_lens = self.computed", Status.CHANGED),  # it wrote nothing read
])
def test_an_override_no_longer_called_leaves_stale_state(tmp_path, monkeypatch, write, read, status):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    then = open_build(str(write_tree(tmp_path / "then", THEN))).surface
    now = open_build(str(write_tree(tmp_path / "now", NOW))).surface
    consumer = write_tree(tmp_path / "c", {"c.py": CONSUMER.format(write=write, read=read)})
    findings = [f for f in run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "c.py")), now, then))
                if f.check == "patch" and f.symbol.endswith("Runner.postprocess")]
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    if status is Status.BROKEN:
        assert "self.computed" in findings[0].message and "NpuRunner.prepare_inputs" in findings[0].message


def test_another_writer_keeps_the_state_up_to_date(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    then = open_build(str(write_tree(tmp_path / "then", THEN))).surface
    now = open_build(str(write_tree(tmp_path / "now", NOW))).surface
    consumer = CONSUMER.format(write="self.computed.copy_(sampled)", read="batch.seq_lens = self.computed") + \
        "\n        def sync(self, sampled):\n            self.computed.fill_(0)\n"
    tree = write_tree(tmp_path / "c", {"c.py": consumer})
    findings = [f for f in run_probes(ProbeContext(scan_tree(tree_from_path(tree / "c.py")), now, then))
                if f.check == "patch" and f.symbol.endswith("Runner.postprocess")]
    assert [f.status for f in findings] == [Status.CHANGED], [f.message for f in findings]


@pytest.mark.parametrize(("now_has", "consumer_has", "status"), [
    ("postprocess_sampled", "", Status.BROKEN),  # the hook renamed: vLLM runs its own
    ("_postprocess", "", Status.BROKEN),
    ("postprocess_sampled", "postprocess_sampled", Status.CHANGED),  # the consumer overrides the new one too
    ("sample_after", "", Status.CHANGED),  # nothing in its place
    ("postprocess_a", "", Status.BROKEN),
])
def test_a_renamed_hook_the_consumer_does_not_override_is_broken(tmp_path, monkeypatch, now_has, consumer_has,
                                                                 status):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    then = open_build(str(write_tree(tmp_path / "then", THEN))).surface
    extra = f"\n        def {now_has}(self, sampled):\n            return sampled\n"
    now = open_build(str(write_tree(tmp_path / "now", dict(NOW, **{"vllm/runner.py": RUNNER.format(extra=extra)}))))
    consumer = CONSUMER.format(write="print(sampled)", read="pass")
    if consumer_has:
        consumer += f"\n        def {consumer_has}(self, sampled):\n            return sampled\n"
    tree = write_tree(tmp_path / "c", {"c.py": consumer})
    findings = [f for f in run_probes(ProbeContext(scan_tree(tree_from_path(tree / "c.py")), now.surface, then))
                if f.check == "patch" and f.symbol.endswith("Runner.postprocess")]
    assert [f.status for f in findings] == [status], [f.message for f in findings]


def test_two_candidates_for_a_renamed_hook_are_not_guessed(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    then = open_build(str(write_tree(tmp_path / "then", THEN))).surface
    extra = "".join(f"\n        def {n}(self, sampled):\n            return sampled\n"
                    for n in ("postprocess_a", "postprocess_b"))
    now = open_build(str(write_tree(tmp_path / "now", dict(NOW, **{"vllm/runner.py": RUNNER.format(extra=extra)}))))
    tree = write_tree(tmp_path / "c", {"c.py": CONSUMER.format(write="print(sampled)", read="pass")})
    findings = [f for f in run_probes(ProbeContext(scan_tree(tree_from_path(tree / "c.py")), now.surface, then))
                if f.check == "patch" and f.symbol.endswith("Runner.postprocess")]
    assert [f.status for f in findings] == [Status.CHANGED], [f.message for f in findings]


@pytest.mark.slow
@pytest.mark.network
def test_vllm_ascend_postprocess_no_longer_writes_num_computed_tokens_cpu():
    """vllm-ascend 0.18.0's V2 NPUModelRunner.postprocess (worker/v2/model_runner.py) is the only method to write
    ``self.num_computed_tokens_cpu`` (``.copy_`` from the GPU) after ``__init__`` made it with ``torch.empty``;
    its ``_update_seq_lens_cpu`` reads it into the request states. vLLM 0.26.0's GPUModelRunner no longer has or
    calls ``postprocess`` (sample_tokens uses postprocess_sampled and postprocess_num_computed_tokens), while it
    still calls ascend's prepare_inputs, which runs _update_seq_lens_cpu."""
    from compat import sources
    from compat.audit.pipeline import AuditOptions, Auditor

    scan = scan_tree(sources.tree_from_release("vllm-ascend", "0.18.0"))
    result = Auditor(AuditOptions()).run(scan, open_build("0.26.0"), written_for=open_build("0.18.0").surface)
    found = [f for f in result.findings if f.check == "patch" and f.symbol.endswith("GPUModelRunner.postprocess")]
    assert [f.status for f in found] == [Status.BROKEN], [f.message for f in found]
    assert "self.num_computed_tokens_cpu" in found[0].message and "_update_seq_lens_cpu" in found[0].message
    # AscendModelSlimConfig.get_cache_scale renamed C8 KV-cache scales (quantization/modelslim_config.py); 0.26.0
    # loaders call quant_config.get_cache_scale_mapper (model_executor/models/utils.py), new since 0.18.0, which
    # ascend does not override: vLLM's default runs and the renaming is lost.
    scale = [f for f in result.findings
             if f.check == "patch" and f.symbol.endswith("QuantizationConfig.get_cache_scale")]
    assert [f.status for f in scale] == [Status.BROKEN], [f.message for f in scale]
    assert "get_cache_scale_mapper" in scale[0].message
