"""fixers/capture.py: a replacement forward that captures decoder-layer outputs (``model`` findings) is replaced
by the shim's forward hooks on the layers, the consumer's own expressions kept (layer ids, store, value, runner);
``if not supports_eagle3(...)`` becomes a check of the decoder stack where a build lacks the EAGLE-3 marker;
declined where the forward or its installation is not written in the shape the fixer reads.

The ``model`` findings are given (the probe reads a model's forward across builds); the consumer is hand-written."""

from __future__ import annotations

import pytest
from compat.fixers.capture import FIXER

from .conftest import finding

FORWARD = '''import types

from vllm.model_executor.models.interfaces import supports_eagle3


def _forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
    ext = self._ext
    ids = ext.layer_ids
    captured = []
    hidden_states = self.get_input_embeddings(input_ids)
    residual = None
    for idx, layer in enumerate(self.{layers}):
        hidden_states, residual = layer(positions, hidden_states, residual)
        if idx in ids:
            captured.append(hidden_states + residual)
    ext.store(captured)
    return hidden_states


class Extension:
    def install(self):
        model = self.model_runner.model
        if not supports_eagle3(model):
            raise ValueError("no eagle3")
        base = {base}
        base._ext = self
        base.forward = types.MethodType(_forward, base)
'''
PLAIN = FORWARD.format(layers="layers", base="model.model")
NO_LOOP = FORWARD.format(layers="blocks", base="model.model")
NOT_ATTRIBUTE = FORWARD.format(layers="layers", base="unwrap(model)")
BUILDS = {"0.1.0": {}, "0.2.0": {}}
HOOKS = ("        vllm_compat.capture_layers(\n            model,\n            layer_ids=self.layer_ids,\n"
         "            store=self.store,\n            when=lambda: True,\n"
         "            value=lambda hidden_states, residual: hidden_states + residual,\n"
         "            runner=self.model_runner,\n        )\n")


@pytest.mark.parametrize(("source", "symbols", "unhandled", "eagle3"), [
    pytest.param(PLAIN, ["LlamaForCausalLM:layers"], "", False, id="forward replaced by hooks"),
    pytest.param(PLAIN, ["LlamaForCausalLM:layers", "LlamaForCausalLM:eagle3"], "", True,
                 id="eagle3 marker check replaced"),
    pytest.param(NO_LOOP, ["LlamaForCausalLM:layers"], "does not loop over self.layers", False,
                 id="no layer loop: declined"),
    pytest.param(NOT_ATTRIBUTE, ["LlamaForCausalLM:layers"], "base is not assigned from an attribute of the model",
                 False, id="installation not read: declined"),
])
def test_layer_hooks(fixing, source, symbols, unhandled, eagle3):
    findings = [finding("model", s, "pkg/run.py:27") for s in symbols]
    ctx = fixing.context({"pkg/run.py": source}, BUILDS, given={"0.2.0": findings})
    plan = FIXER.plan(ctx)
    if unhandled:
        assert [u.finding for u in plan.unhandled] == findings
        assert all(unhandled in u.reason for u in plan.unhandled), plan.unhandled
        assert not plan.edits and not plan.pieces and not plan.claims
        return
    assert not plan.unhandled and all(any(c.covers(f) for c in plan.claims) for f in findings)
    assert [p.key for p in plan.pieces] == ["capture:layers"]
    assert plan.notes == ["pkg/run.py:27: the replacement forward _forward is replaced by forward hooks on the "
                          "decoder layers (the build's own forward runs)"]
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    assert HOOKS in text, text
    assert "base.forward" not in text and "base._ext" not in text
    assert ("vllm_compat.decoder_stack(model)" in text) == eagle3
    assert ("if not supports_eagle3(model)" in text) != eagle3


def test_no_finding_plans_nothing(fixing):
    assert FIXER.plan(fixing.context({"pkg/run.py": PLAIN}, BUILDS)).empty
