"""The hidden-state file layouts in use (``--layout`` names) and how to tell them apart by their keys.

- ``speculators-pt``: speculators 0.3.0's ``scripts/data_generation_offline.py`` saves each result of
  ``VllmHiddenStatesGenerator.generate`` with ``torch.save`` as ``data_{idx}.pt``:
  ``{"input_ids": LongTensor[T], "hidden_states": [Tensor[T, H]] * n_layers, "loss_mask": LongTensor[T]}``,
  next to a ``data_config.json`` naming ``hidden_states.layer_ids`` and ``model.hidden_size``.
- ``vllm-safetensors``: vLLM's ``ExampleHiddenStatesConnector`` (speculative method ``extract_hidden_states``)
  writes ``{req_id}.safetensors``, and speculators >= 0.5 caches them as ``hs_{idx}.safetensors``:
  ``{"hidden_states": [T, n_layers, H], "token_ids": [T]}`` (no loss mask; layers in ascending layer id).
- ``eagle``: EAGLE's ``ge_data`` scripts ``torch.save`` ``data_{idx}.ckpt``:
  ``{"input_ids": [T], "hidden_state": [T, H], "loss_mask": [T]}``; the EAGLE-3 variant that speculators
  reads as "v0" stores ``hidden_state`` as ``[T, 3 * H]`` (three layers side by side) plus ``target [T, H]``.

A ``.pt``/``.ckpt`` file may also hold a list of such dicts (a whole ``generate`` batch): each is a sample.
"""

from __future__ import annotations

from collections.abc import Container
from enum import Enum


class Layout(str, Enum):
    SPECULATORS_PT = "speculators-pt"
    VLLM_SAFETENSORS = "vllm-safetensors"
    EAGLE = "eagle"

    @property
    def ids_key(self) -> str:
        """The entry holding the token ids."""
        return "token_ids" if self is Layout.VLLM_SAFETENSORS else "input_ids"

    @property
    def layers_key(self) -> str:
        """The entry holding the layers."""
        return "hidden_state" if self is Layout.EAGLE else "hidden_states"

    @property
    def sorts_layers(self) -> bool:
        """vLLM stores aux layers in ascending layer id, whatever order was asked; the others keep the order."""
        return self is Layout.VLLM_SAFETENSORS


def classify(keys: Container[str]) -> Layout | None:
    """The layout a sample dict with these keys follows; None if it follows none."""
    if "hidden_state" in keys and "input_ids" in keys:
        return Layout.EAGLE
    if "hidden_states" in keys and "token_ids" in keys:
        return Layout.VLLM_SAFETENSORS
    if "hidden_states" in keys and "input_ids" in keys:
        return Layout.SPECULATORS_PT
    return None
