"""fixers/capture.py: a replacement forward that captures decoder-layer outputs (``model`` findings) is replaced
by the shim's forward hooks on the layers, the consumer's own expressions kept (layer ids, store, runner) and
each layer's stream read as its build's code returns it (the shim's ``_STREAMS``, one entry per reading);
``if not supports_eagle3(...)`` keeps refusing, with the consumer's words, all but models whose capture the shim
proves (``capture_proven``), and the architectures that newly run are listed; declined where the forward or its
installation is not written in the shape the fixer reads, or where what it keeps is not a sum of the layer's
outputs.

The ``model`` findings are given (the probe reads a model's forward across builds); the consumer is hand-written."""

from __future__ import annotations

import pytest
from compat.fixers.capture import FIXER

from ..facts.test_streams import ADDED, ADDED_LOOP, FUSED, tree
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
            captured.append({value})
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
SUM = "(hidden_states + residual).clone()"
PLAIN = FORWARD.format(layers="layers", base="model.model", value=SUM)
NO_LOOP = FORWARD.format(layers="blocks", base="model.model", value=SUM)
NOT_ATTRIBUTE = FORWARD.format(layers="layers", base="unwrap(model)", value=SUM)
NOT_A_SUM = FORWARD.format(layers="layers", base="model.model", value="residual * 2")
INTERFACES = {"vllm/model_executor/models/interfaces.py": (
    "from typing import Protocol, runtime_checkable\n\n\n@runtime_checkable\nclass SupportsEagle3(Protocol):\n"
    "    def set_aux_hidden_state_layers(self, layers):\n        ...\n")}
BUILDS = {"0.1.0": {**tree(FUSED), **INTERFACES}, "0.2.0": {**tree(ADDED, ADDED_LOOP), **INTERFACES}}
"""A layer that returns its residual unadded in one build and added in the next (neither marked SupportsEagle3)."""
LAYER = "vllm.model_executor.models.test.TestDecoderLayer"
HOOKS = ("        vllm_compat.capture_layers(\n            model,\n            layer_ids=self.layer_ids,\n"
         "            store=self.store,\n            when=lambda: True,\n"
         "            runner=self.model_runner,\n        )\n")
GUARD = ("        if not supports_eagle3(model) and not vllm_compat.capture_proven(model):\n"
         "            raise ValueError(\"no eagle3\")\n")


@pytest.mark.parametrize(("source", "unhandled"), [
    pytest.param(PLAIN, "", id="forward replaced by hooks"),
    pytest.param(NO_LOOP, "does not loop over self.layers", id="no layer loop: declined"),
    pytest.param(NOT_ATTRIBUTE, "base is not assigned from an attribute of the model",
                 id="installation not read: declined"),
    pytest.param(NOT_A_SUM, "captures `residual * 2`, which is not a sum of the layer's outputs",
                 id="not the residual stream: declined"),
])
def test_layer_hooks(fixing, source, unhandled):
    findings = [finding("model", "TestForCausalLM:layers", "pkg/run.py:27")]
    ctx = fixing.context({"pkg/run.py": source}, BUILDS, given={"0.2.0": findings})
    plan = FIXER.plan(ctx)
    if unhandled:
        assert [u.finding for u in plan.unhandled] == findings
        assert all(unhandled in u.reason for u in plan.unhandled), plan.unhandled
        assert not plan.edits and not plan.pieces and not plan.claims
        return
    assert not plan.unhandled and all(any(c.covers(f) for c in plan.claims) for f in findings)
    assert [p.key for p in plan.pieces] == ["capture:layers"]
    assert plan.notes[0].startswith("pkg/run.py:27: the replacement forward _forward is replaced by forward hooks")
    assert f"where it kept `{SUM}`" in plan.notes[0]
    assert plan.notes[1] == ("1 architectures the release's supports_eagle3 check refuses now run where the stream of "
                             "their decoder layers was read from the build's code (capture_proven): TestForCausalLM")
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    assert HOOKS in text, text
    assert GUARD in text, text
    assert "base.forward" not in text and "base._ext" not in text and "value=" not in text


def test_each_builds_reading_is_in_the_shim(fixing):
    """The two builds' layers return the stream differently: the shim holds both readings, each with the
    fingerprints of the code it was read from, the first build's (residual unadded: both outputs) first."""
    ctx = fixing.context({"pkg/run.py": PLAIN}, BUILDS,
                         given={"0.2.0": [finding("model", "TestForCausalLM:layers", "pkg/run.py:27")]})
    plan = FIXER.plan(ctx)
    [piece] = plan.pieces
    namespace: dict = {}
    exec(piece.code.split("\n\n" + "def decoder_stack", 1)[0], namespace)  # noqa: S102 - the table's own literal
    entries = namespace["_STREAMS"][LAYER]
    assert [e[0] for e in entries] == [(0, 1), (0,)]
    codes = namespace["_CODES"]
    forward = [{codes[i][1]: codes[i][2] for i in e[2]}["TestDecoderLayer.forward"] for e in entries]
    assert forward[0] != forward[1]
    assert namespace["_STACK_PATHS"] == (("model",),)


def test_no_finding_plans_nothing(fixing):
    assert FIXER.plan(fixing.context({"pkg/run.py": PLAIN}, BUILDS)).empty
