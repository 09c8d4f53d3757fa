"""compat/facts/streams.py: which outputs of a decoder layer, summed, are the residual stream after it, read from
the layer's code (and the norms, IR ops and custom ops it calls) on small vLLM-shaped trees.

Each row is a decoder layer's ``forward`` (and how the stack calls it); the expected outputs are what summing the
layer's real outputs would give, worked out by hand from the row's code."""

from __future__ import annotations

import json
import textwrap

import pytest

from compat.facts import streams

ARCH = "TestForCausalLM"

NORMS = '''
    import torch

    from vllm.ir.op import register_op
    from vllm.model_executor.custom_op import CustomOp


    @register_op
    def fused_add_rms_norm(x, x_residual, weight, epsilon):
        orig_dtype = x.dtype
        x = x.to(torch.float32)
        x = x + x_residual.to(torch.float32)
        x_residual = x.to(orig_dtype)
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + epsilon)
        if weight is not None:
            x = x.to(weight.dtype) * weight
        return x.to(orig_dtype), x_residual


    @register_op
    def rms_norm(x, weight, epsilon):
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + epsilon)
        if weight is not None:
            x = x * weight
        return x


    class RMSNorm(CustomOp):
        def __init__(self, size, eps=1e-6):
            self.weight = torch.nn.Parameter(torch.ones(size))
            self.eps = eps
            self.has_weight = True

        def forward_native(self, x, residual=None):
            if residual is None:
                return rms_norm(x, self.weight.data if self.has_weight else None, self.eps)
            return fused_add_rms_norm.maybe_inplace(x, residual, self.weight.data, self.eps)

        def forward_cuda(self, x, residual=None):
            return torch.ops._C.fused_add_rms_norm(x, residual)
'''

CUSTOM_OP = '''
    class CustomOp:
        def forward(self, *args, **kwargs):
            return self._forward_method(*args, **kwargs)
'''

IR_OP = '''
    def register_op(f=None, *, name=None):
        """f: the native implementation of the op"""
        return f
'''

MODEL = '''
    import torch

    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.models.utils import make_layers


    def unreadable(x):
        return torch.ops.custom.op(x)


    class TestDecoderLayer:
        def __init__(self, config, prefix=""):
            self.input_layernorm = RMSNorm(8)
            self.post_attention_layernorm = RMSNorm(8)
            self.tp_size = 1
            self.scale = 0.5

        def self_attn(self, positions, hidden_states):
            return torch.tanh(hidden_states)

        def mlp(self, hidden_states):
            return torch.sigmoid(hidden_states)

{forward}


    class TestModel:
        def __init__(self, *, vllm_config, prefix=""):
            self.start_layer, self.end_layer, self.layers = make_layers(
                4, lambda prefix: TestDecoderLayer(vllm_config, prefix=prefix), prefix=f"{{prefix}}.layers")
            self.norm = RMSNorm(8)

        def forward(self, input_ids, positions):
            hidden_states, residual = self.embed(input_ids), None
{loop}
            hidden_states, _ = self.norm(hidden_states, residual)
            return hidden_states


    class TestForCausalLM:
        def __init__(self, *, vllm_config, prefix=""):
            self.model = TestModel(vllm_config=vllm_config, prefix=prefix)
'''

LOOP = '''            for layer in self.layers[self.start_layer:self.end_layer]:
                hidden_states, residual = layer(positions, hidden_states, residual)'''


def tree(forward: str, loop: str = LOOP) -> dict[str, str]:
    body = textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8)
    return {
        "vllm/model_executor/__init__.py": "",
        "vllm/model_executor/custom_op.py": CUSTOM_OP,
        "vllm/ir/__init__.py": "",
        "vllm/ir/op.py": IR_OP,
        "vllm/model_executor/layers/__init__.py": "",
        "vllm/model_executor/layers/layernorm.py": NORMS,
        "vllm/model_executor/models/__init__.py": "",
        "vllm/model_executor/models/registry.py": f'_MODELS = {{"{ARCH}": ("test", "{ARCH}")}}\n',
        "vllm/model_executor/models/utils.py":
            "def make_layers(n, layer_fn, prefix):\n    return 0, n, [layer_fn(prefix=prefix) for _ in range(n)]\n",
        "vllm/model_executor/models/test.py": MODEL.format(forward=body, loop=loop),
    }


FUSED = '''
def forward(self, positions, hidden_states, residual):
    if residual is None:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
    else:
        hidden_states, residual = self.input_layernorm(hidden_states, residual)
    hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states)
    hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
    hidden_states = self.mlp(hidden_states)
    return hidden_states, residual
'''

ADDED = '''
def forward(self, positions, hidden_states):
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    hidden_states = self.self_attn(positions, hidden_states)
    hidden_states = residual + hidden_states
    residual = hidden_states
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states = self.mlp(hidden_states)
    hidden_states = residual + hidden_states
    return hidden_states, residual
'''

OVERWRITTEN = '''
def forward(self, positions, hidden_states, residual):
    residual = hidden_states
    hidden_states = self.self_attn(positions, hidden_states)
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states = residual + hidden_states
    residual = hidden_states
    hidden_states = self.mlp(hidden_states)
    hidden_states = residual + hidden_states
    return hidden_states, residual
'''

PARALLEL = '''
def forward(self, positions, hidden_states, residual):
    residual = hidden_states
    normed = self.input_layernorm(hidden_states)
    attention = self.self_attn(positions, normed)
    mlp = self.mlp(normed)
    block = attention + mlp
    if self.tp_size > 1:
        block = torch.distributed.all_reduce_out_of_place(block)
    hidden_states = residual + block
    return hidden_states, residual
'''

SINGLE = '''
def forward(self, positions, hidden_states):
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
    hidden_states = self.self_attn(positions, hidden_states)
    hidden_states = residual + hidden_states * self.scale
    residual = hidden_states
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states = residual + self.mlp(hidden_states) * self.scale
    return hidden_states
'''

SCALED = FUSED.replace("    return hidden_states, residual", "    residual = residual * self.scale\n"
                                                               "    return hidden_states, residual")

UNREADABLE = FUSED.replace("    hidden_states = self.mlp(hidden_states)\n",
                           "    hidden_states = self.mlp(hidden_states)\n    unreadable(residual)\n")

CONDITIONAL = FUSED.replace("    hidden_states = self.mlp(hidden_states)\n",
                            "    hidden_states = self.mlp(hidden_states)\n"
                            "    if self.tp_size > 1:\n        residual = unreadable(residual)\n")

DTYPE = FUSED.replace("    hidden_states = self.mlp(hidden_states)\n",
                      "    hidden_states = self.mlp(hidden_states)\n"
                      "    if hidden_states.dtype == torch.float16:\n        residual *= self.scale\n")

ALIASED = '''
def forward(self, positions, hidden_states):
    residual = hidden_states
    hidden_states *= 2.0
    hidden_states = self.mlp(self.input_layernorm(hidden_states))
    return residual + hidden_states, residual
'''

LOOPED = FUSED.replace("    hidden_states = self.mlp(hidden_states)\n",
                       "    for _ in range(2):\n        residual = residual + self.mlp(hidden_states)\n")

ADDED_LOOP = '''            for layer in self.layers[self.start_layer:self.end_layer]:
                hidden_states, residual = layer(positions, hidden_states)'''

SINGLE_LOOP = '''            for layer in self.layers[self.start_layer:self.end_layer]:
                hidden_states = layer(positions, hidden_states)'''

CARRIED = FUSED.replace("def forward(self, positions, hidden_states, residual):",
                        "def forward(self, positions, hidden_states, residual, kv=None):").replace(
    "    return hidden_states, residual", "    kv = self.self_attn(positions, hidden_states)\n"
                                          "    return hidden_states, residual, kv")
CARRIED_LOOP = '''            kv = None
            for layer in self.layers[self.start_layer:self.end_layer]:
                hidden_states, residual, kv = layer(positions, hidden_states, residual, kv)'''


def reading(trees, forward: str, loop: str = LOOP) -> streams.StreamFacts:
    surface = trees.vllm(tree(forward, loop))
    return surface.fact(streams.FACT, ARCH)


# (layer forward, stack loop, the outputs summed, words the description or reason holds)
CASES = [
    pytest.param(FUSED, LOOP, (0, 1), ["residual not yet added"], id="fused-add-norm"),
    pytest.param(ADDED, ADDED_LOOP, (0,), ["residual already added"], id="residual-added"),
    pytest.param(OVERWRITTEN, LOOP, (0,), ["residual already added"], id="residual-parameter-overwritten"),
    pytest.param(PARALLEL, LOOP, (0,), ["residual already added"], id="parallel-attention-and-mlp"),
    pytest.param(SINGLE, SINGLE_LOOP, (), ["stream itself"], id="one-tensor-scaled-deltas"),
    pytest.param(CARRIED, CARRIED_LOOP, (0, 1), ["residual not yet added"], id="carried-kv-is-not-the-stream"),
    pytest.param(SCALED, LOOP, None, ["scaled by a factor the code does not fix"], id="stream-scaled"),
    pytest.param(UNREADABLE, LOOP, None, ["torch.ops.custom.op(...)", "receives the stream"],
                 id="unreadable-call-on-stream"),
    pytest.param(ALIASED, ADDED_LOOP, None, ["input hidden_states reaches its outputs scaled by 2"],
                 id="in-place-on-an-alias"),
    pytest.param(LOOPED, LOOP, None, ["a for at line"], id="loop-over-the-stream"),
]


@pytest.mark.parametrize("forward, loop, outputs, words", CASES)
def test_convention(trees, forward, loop, outputs, words):
    facts = reading(trees, forward, loop)
    assert facts.outputs == outputs, (facts.reason, facts.description)
    said = facts.description if outputs is not None else facts.reason or ""
    for word in words:
        assert word in said, said


def test_a_condition_the_code_does_not_decide_is_kept_for_the_shim(trees):
    facts = reading(trees, CONDITIONAL)
    assert facts.outputs == (0, 1)
    assert len(facts.unless) == 1 and "self.tp_size > 1" in facts.unless_text[0]
    [assumed] = [json.loads(u) for u in facts.unless]
    assert assumed == [[["atom", "self", "self.tp_size > 1", "vllm.model_executor.models.test"], True]]


def test_a_dtype_condition_names_the_dtype(trees):
    facts = reading(trees, DTYPE)
    assert facts.outputs == (0, 1)
    assert any("the model's dtype is float16" in u for u in facts.unless_text), facts.unless_text


def test_the_defs_read_are_fingerprinted(trees):
    facts = reading(trees, FUSED)
    read = {(r.module, r.qualname) for r in facts.read}
    assert read == {("vllm.model_executor.models.test", "TestDecoderLayer.forward"),
                    ("vllm.model_executor.layers.layernorm", "RMSNorm.forward_native"),
                    ("vllm.model_executor.layers.layernorm", "fused_add_rms_norm"),
                    ("vllm.model_executor.layers.layernorm", "rms_norm")}
    other = reading(trees, FUSED.replace("self.mlp(hidden_states)", "self.mlp(hidden_states)  # changed"))
    prints = {r.qualname: r.fingerprint for r in facts.read}
    assert {r.qualname: r.fingerprint for r in other.read}["TestDecoderLayer.forward"] != \
        prints["TestDecoderLayer.forward"]
    assert {r.qualname: r.fingerprint for r in other.read}["rms_norm"] == prints["rms_norm"]


def test_an_architecture_without_a_layer_class_is_refused_with_why(trees):
    surface = trees.vllm({**tree(FUSED), "vllm/model_executor/models/registry.py": "_MODELS = {}\n"})
    facts = surface.fact(streams.FACT, ARCH)
    assert facts.outputs is None and "registry" in (facts.reason or "")
