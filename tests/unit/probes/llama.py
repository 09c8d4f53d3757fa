"""A vLLM-shaped Llama (registry entry, top model, decoder stack, decoder layer, SupportsEagle3) and a consumer that
installs its own forward on the decoder stack from a worker extension: the model and block-hashing tables share
them."""

from __future__ import annotations

FUSED = """
            if residual is None:
                residual = hidden_states
            else:
                residual = hidden_states + residual
            hidden_states = torch.sigmoid(torch.tanh(residual))
            return hidden_states, residual"""
"""Llama's convention: the residual returned apart, not yet added (the stream is the sum of both outputs)."""
ADDED = """
            if residual is None:
                residual = hidden_states
            else:
                residual = hidden_states + residual
            hidden_states = residual + torch.sigmoid(residual)
            return hidden_states, residual"""
"""StableLM's: the residual already added to the first output (the stream is that output alone)."""

REGISTRY = '_MODELS = {"LlamaForCausalLM": ("llama", "LlamaForCausalLM")}\n'

UTILS = "def make_layers(n, layer_fn, prefix):\n    return 0, n, [layer_fn(prefix=prefix) for _ in range(n)]\n"

INTERFACES = '''
    from typing import ClassVar, Protocol, runtime_checkable


    @runtime_checkable
    class SupportsEagle3(Protocol):
        supports_eagle3: ClassVar[bool] = True

        def set_aux_hidden_state_layers(self, layers):
            ...
'''

LLAMA = '''
    import torch

    from vllm.model_executor.models.utils import make_layers


    class LlamaDecoderLayer:
        def forward(self, positions, hidden_states, residual{residual_default}):
{layer_body}


    class LlamaModel:
        def __init__(self, *, vllm_config, prefix=""):
            self.embed_tokens = None
            self.start_layer, self.end_layer, self.layers = make_layers(
                4, lambda prefix: LlamaDecoderLayer(config=vllm_config, prefix=prefix), prefix=f"{{prefix}}.layers")

        def {embed}(self, input_ids):
            return self.embed_tokens(input_ids)

        def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None{base_kwargs}):
            hidden_states, residual = self.{embed}(input_ids), None
            for layer in self.layers[self.start_layer:self.end_layer]:
                hidden_states, residual = layer(positions, hidden_states, residual{layer_kwargs})
            hidden_states, _ = self.norm(hidden_states, residual)
            return hidden_states


    class LlamaForCausalLM{eagle3}:
        def __init__(self, *, vllm_config, prefix=""):
            self.model = LlamaModel(vllm_config=vllm_config, prefix=prefix)

        def set_aux_hidden_state_layers(self, layers):
            self.aux = layers

        def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
            return self.model(input_ids, positions, intermediate_tensors, inputs_embeds{top_keywords})
'''


def build(*, residual_default: str = "", embed: str = "embed_input_ids", base_kwargs: str = "",
          layer_kwargs: str = "", eagle3: bool = True, top_keywords: str = "", protocol: bool = True,
          registered: bool = True, stack: bool = True, layer_body: str = FUSED) -> dict[str, str]:
    """``layer_body``: the decoder layer's forward body (``FUSED``, ``ADDED``)."""
    llama = LLAMA.format(residual_default=residual_default, embed=embed, base_kwargs=base_kwargs,
                         layer_body=layer_body.strip("\n"),
                         layer_kwargs=layer_kwargs, eagle3="(SupportsEagle3)" if eagle3 else "",
                         top_keywords=top_keywords)
    if eagle3:
        llama = "\n    from vllm.model_executor.models.interfaces import SupportsEagle3\n" + llama
    if not stack:
        llama = llama.replace("self.layers =", "self.blocks =").replace("self.layers[", "self.blocks[")
    files = {
        "vllm/model_executor/__init__.py": "",
        "vllm/model_executor/models/__init__.py": "",
        "vllm/model_executor/models/registry.py": REGISTRY if registered else "_MODELS = {}\n",
        "vllm/model_executor/models/utils.py": UTILS,
        "vllm/model_executor/models/llama.py": llama,
    }
    if protocol:
        files["vllm/model_executor/models/interfaces.py"] = INTERFACES
    return files


PATCH = '''
import types

from vllm import LLM
{imports}

def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None{forward_kwargs}):
    hidden_states = self.{embed}(input_ids)
    residual = None
    captured = []
    for layer in self.layers:
        hidden_states, residual = layer({layer_args})
        captured.append({keep})
    return hidden_states


class Extension:
    def install(self):
        model = self.model_runner.{path}
        model.forward = types.MethodType(forward, model)
{body}

def start():
    LLM("m", worker_extension_cls="consumer.Extension")
'''


def patch(*, embed: str = "embed_input_ids", layer_args: str = "positions, hidden_states, residual",
          path: str = "model.model", forward_kwargs: str = "", eagle3_check: bool = False, body: str = "",
          keep: str = "hidden_states + residual") -> str:
    """The consumer: a worker extension that replaces the decoder stack's forward."""
    imports = "from vllm.model_executor.models.interfaces import supports_eagle3\n" if eagle3_check else ""
    if eagle3_check:
        body += "\n    def check(self):\n        return supports_eagle3(self.model_runner.model)\n"
    return PATCH.format(imports=imports, forward_kwargs=forward_kwargs, embed=embed, layer_args=layer_args,
                        path=path, body=body, keep=keep)
