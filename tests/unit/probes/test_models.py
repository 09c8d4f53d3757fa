"""probes/models.py: the consumer's replacement forward of a decoder stack against each architecture's
conventions (registry, path to the stack, members, layer call, forward signature, EAGLE-3 marker)."""

from __future__ import annotations

import pytest
from compat.probes.models import PROBE

from compat.findings import Status

from .llama import ADDED, build, patch

ARCH = "LlamaForCausalLM"
LLAMA = "vllm/model_executor/models/llama.py"
NO_LAYER_LOOP = {**build(), LLAMA: build()[LLAMA].replace("for layer in self.layers[self.start_layer:self.end_layer]:",
                                                          "for layer in self.children():")}


# (consumer, build, the aspect judged, expected status, words the message holds)
CASES = [
    pytest.param(patch(), build(registered=False), "registry", Status.UNKNOWN,
                 ["not in this build's model registry"], id="registry-unknown"),
    pytest.param(patch(), build(stack=False), "stack", Status.UNKNOWN,
                 ["cannot find the decoder stack under vllm.model_executor.models.llama.LlamaForCausalLM"],
                 id="stack-unknown"),
    pytest.param(patch(), build(), "path", Status.OK, ["patches model.model, the decoder stack"], id="path-ok"),
    pytest.param(patch(path="model.language_model"), build(), "path", Status.BROKEN,
                 ["patches model.language_model", "the decoder stack of LlamaForCausalLM is model.model"],
                 id="path-broken"),
    pytest.param(patch(), build(), "member:embed_input_ids", Status.OK,
                 ["LlamaModel.embed_input_ids exists"], id="member-ok"),
    pytest.param(patch(embed="get_input_embeddings"), build(), "member:get_input_embeddings", Status.BROKEN,
                 ["calls self.get_input_embeddings", "does not have", "it has embed_input_ids"], id="member-broken"),
    pytest.param(patch(), build(), "layer-call", Status.OK, ["binds to", "LlamaDecoderLayer.forward"],
                 id="layer-call-ok"),
    pytest.param(patch(layer_args="positions, hidden_states, residual, None"), build(), "layer-call",
                 Status.BROKEN, ["takes at most 3 positional argument(s) but the call passes 4"],
                 id="layer-call-broken"),
    pytest.param(patch(layer_args="positions, hidden_states"), build(residual_default="=None"), "layer-call",
                 Status.CHANGED, ["without residual", "silent change of values"], id="layer-call-changed"),
    pytest.param(patch(layer_args="positions, hidden_states"), build(), "layer-call", Status.BROKEN,
                 ["residual"], id="layer-call-missing-required"),
    pytest.param(patch(), NO_LAYER_LOOP, "layer-call", Status.UNKNOWN,
                 ["cannot tell how vllm.model_executor.models.llama.LlamaModel calls its decoder layers"],
                 id="layer-call-unknown"),
    pytest.param(patch(), build(top_keywords=", extra=1"), "forward", Status.BROKEN,
                 ["extra", "calls self.model(input_ids, positions, intermediate_tensors, inputs_embeds, extra=1)"],
                 id="forward-broken"),
    pytest.param(patch(), build(base_kwargs=", **kwargs", layer_kwargs=", **kwargs"), "forward", Status.CHANGED,
                 ["takes **kwargs", "neither accepts nor forwards them"], id="forward-changed"),
    pytest.param(patch(forward_kwargs=", **kwargs"), build(base_kwargs=", **kwargs"), "forward", Status.OK,
                 ["accepts what the build passes"], id="forward-ok"),
    pytest.param(patch(forward_kwargs=", *args"), build(top_keywords=", 1"), "forward", Status.OK,
                 ["accepts what the build passes"], id="forward-ok-var-args"),
    pytest.param(patch(eagle3_check=True), build(), "eagle3", Status.OK, ["is marked SupportsEagle3"],
                 id="eagle3-ok"),
    pytest.param(patch(eagle3_check=True), build(eagle3=False), "eagle3", Status.BROKEN,
                 ["does not implement SupportsEagle3", "missing supports_eagle3"], id="eagle3-broken"),
    pytest.param(patch(), build(), "capture", Status.OK,
                 ["keeps `hidden_states + residual`, the residual stream after LlamaDecoderLayer",
                  "residual not yet added"], id="capture-ok"),
    pytest.param(patch(), build(layer_body=ADDED), "capture", Status.BROKEN,
                 ["keeps `hidden_states + residual` (output[0] + output[1])", "already added to output[0]",
                  "counts the residual twice"], id="capture-broken"),
    pytest.param(patch(keep="(hidden_states + residual).clone()"), build(layer_body=ADDED), "capture", Status.BROKEN,
                 ["counts the residual twice"], id="capture-broken-cloned"),
    pytest.param(patch(keep="hidden_states"), build(layer_body=ADDED), "capture",
                 Status.OK, ["keeps `hidden_states`, the residual stream"], id="capture-ok-already-added"),
    pytest.param(patch(eagle3_check=True), build(eagle3=False, layer_body=ADDED),
                 "capture", Status.UNKNOWN, ["counts the residual twice", "not reached",
                                             "supports_eagle3 check refuses LlamaForCausalLM"],
                 id="capture-unknown-refused-first"),
    pytest.param(patch(keep="residual * 2"), build(), "capture", Status.UNKNOWN,
                 ["keeps `residual * 2`, which is not a sum of the layer's outputs"], id="capture-unknown-not-a-sum"),
    pytest.param(patch(), build(layer_body="            return torch.ops.x(hidden_states), residual"), "capture",
                 Status.UNKNOWN,
                 ["cannot read how", "returns the residual stream"], id="capture-unknown-unreadable"),
    pytest.param(patch(eagle3_check=True), build(protocol=False, eagle3=False), "eagle3", Status.UNKNOWN,
                 ["cannot read the SupportsEagle3 protocol"], id="eagle3-unknown"),
]


def _judged(findings, aspect):
    return [f for f in findings if f.symbol == f"{ARCH}:{aspect}"]


@pytest.mark.parametrize(("source", "vllm", "aspect", "status", "says"), CASES)
def test_the_replacement_forward_against_the_architecture(trees, source, vllm, aspect, status, says):
    findings = trees.findings(PROBE, source, vllm, architectures=(ARCH,))
    judged = _judged(findings, aspect)
    assert [f.status for f in judged] == [status], [(f.symbol, f.message) for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message


UNTRACED = """
import types

from vllm import LLM


def _forward(self, input_ids, positions):
    x = self.embed_tokens(input_ids)
    for layer in self.layers:
        x = layer(positions, x)
    return self.lm_head(x)


def patch_model(model):
    model.forward = types.MethodType(_forward, model)
"""


@pytest.mark.parametrize("source", [patch(path="engine"), UNTRACED], ids=["worker-attribute", "a-parameter"])
def test_a_forward_replaced_on_an_object_not_traced_to_vllm_s_model_is_one_unknown(trees, source):
    """ms-swift replaces the forward of Hugging Face models (``model.forward = MethodType(forward, model)`` on a
    parameter): nothing says the object is vLLM's model, so no architecture judges its members (each was broken)."""
    findings = trees.findings(PROBE, source, build(), architectures=(ARCH, "Qwen3ForCausalLM"))
    assert [(f.symbol, f.status) for f in findings] == [("*:path", Status.UNKNOWN)], \
        [(f.symbol, f.message) for f in findings]
    assert "cannot tell which object the consumer patches" in findings[0].message


def test_an_unregistered_architecture_is_judged_no_further(trees):
    findings = trees.findings(PROBE, patch(), build(registered=False), architectures=(ARCH,))
    assert [f.symbol for f in findings] == [f"{ARCH}:registry"]


def test_no_eagle3_finding_without_the_consumer_s_check(trees):
    findings = trees.findings(PROBE, patch(), build(eagle3=False), architectures=(ARCH,))
    assert _judged(findings, "eagle3") == [] and _judged(findings, "path")


def test_eagle3_missing_where_it_was_written_for_too_is_the_release_s_not_a_breakage(trees):
    findings = trees.findings(PROBE, patch(eagle3_check=True), build(eagle3=False), build(eagle3=False),
                              architectures=(ARCH,))
    (eagle3,) = _judged(findings, "eagle3")
    assert eagle3.status is Status.UNKNOWN and "as in the build it was written for" in eagle3.message


def test_a_consumer_without_a_model_patch_gets_nothing(trees):
    assert trees.findings(PROBE, "from vllm import LLM\n", build(), architectures=(ARCH,)) == []


def test_every_architecture_asked_for_is_judged(trees):
    findings = trees.findings(PROBE, patch(), build(), architectures=(ARCH, "Qwen3ForCausalLM"))
    assert [f.status for f in findings if f.symbol.startswith("Qwen3ForCausalLM:")] == [Status.UNKNOWN]
