"""Writers of hidden-state files in each layout, as the real tools write them (for the gate's tests).

- ``write_speculators``: speculators 0.3.0's ``scripts/data_generation_offline.py``: ``torch.save`` of
  ``{"input_ids", "hidden_states": [h.contiguous() for h in layers], "loss_mask"}`` as ``data_{idx}.pt``,
  and ``data_config.json`` as ``DataGenerationConfig.to_dict()`` lays it out.
- ``write_vllm``: ``safetensors.torch.save_file({"hidden_states": [T, L, H], "token_ids": [T]})``, what
  vLLM's ``ExampleHiddenStatesConnector._write_tensors`` calls.
- ``write_eagle``: EAGLE's ``ge_data`` ``torch.save({"input_ids", "hidden_state", "loss_mask"})``.

``speculators_generate_slicing`` is the per-sample slicing of ``VllmHiddenStatesGenerator.generate``
(0.3.0), used to rebuild the seed's failures by their mechanism rather than by typing shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def layered(tokens: int, hidden: int, layers: int, dtype=torch.bfloat16, seed: int = 0) -> list[torch.Tensor]:
    """Per-layer states whose RMS grows with depth, like a real residual stream."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(tokens, hidden, generator=g) * (1.5 ** k)).to(dtype) for k in range(layers)]


def write_speculators(path: Path, input_ids: torch.Tensor, layers: list[torch.Tensor],
                      loss_mask: torch.Tensor | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    mask = loss_mask if loss_mask is not None else torch.ones(len(input_ids), dtype=torch.long)
    torch.save({"input_ids": input_ids, "hidden_states": [h.contiguous() for h in layers], "loss_mask": mask},
               path)
    return path


def write_data_config(directory: Path, layer_ids: list[int], hidden_size: int, model: str = "tiny") -> Path:
    """The keys of speculators 0.3.0's data_config.json that the gate reads (others abridged)."""
    config = {"version": "2.0", "speculators_version": "0.3.0",
              "model": {"target_model_path": model, "tensor_parallel_size": 1, "gpu_memory_utilization": 0.8,
                        "hidden_size": hidden_size},
              "hidden_states": {"layer_ids": layer_ids, "description": "Layers selected for EAGLE3"},
              "format": {"file_pattern": "data_{idx}.pt", "data_format_version": 1}}
    path = directory / "data_config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def write_vllm(path: Path, token_ids: torch.Tensor, layers: list[torch.Tensor] | torch.Tensor) -> Path:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    stacked = torch.stack(layers, dim=1) if isinstance(layers, list) else layers
    save_file({"hidden_states": stacked.contiguous(), "token_ids": token_ids.contiguous()}, str(path))
    return path


def write_eagle(path: Path, input_ids: torch.Tensor, hidden_state: torch.Tensor,
                loss_mask: torch.Tensor | None = None, target: torch.Tensor | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"input_ids": input_ids, "hidden_state": hidden_state,
            "loss_mask": loss_mask if loss_mask is not None else torch.ones(len(input_ids), dtype=torch.long)}
    if target is not None:
        data["target"] = target
    torch.save(data, path)
    return path


def speculators_generate_slicing(aux_hidden_states, input_ids_list: list[list[int]]) -> list[dict]:
    """``VllmHiddenStatesGenerator.generate``'s per-sample slicing (speculators 0.3.0), verbatim in effect.

    ``aux_hidden_states`` is what the worker RPC returned: a list with one ``[total_tokens, H]`` tensor per
    layer when ``collective_rpc(...)[0]`` picks rank 0's reply, or (the seed's bug, where the reply is already
    rank 0's list) a single layer tensor.
    """
    seq_lens = [len(ids) for ids in input_ids_list]
    results, offset = [], 0
    for i, seq_len in enumerate(seq_lens):
        layer_states = [h[offset: offset + seq_len].clone().cpu() for h in aux_hidden_states]
        results.append({"input_ids": torch.as_tensor(input_ids_list[i], dtype=torch.long),
                        "hidden_states": layer_states, "loss_mask": None})
        offset += seq_len
    return results


def markdown_tokens(text: str) -> list:
    """A Markdown report parsed as GitHub reads it (CommonMark and tables), by markdown-it-py (rich's own)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").parse(text)


def markdown_text(text: str) -> str:
    """What a reader sees of a Markdown report, as text: its text and inline code, in order."""
    inline = [child for t in markdown_tokens(text) if t.type == "inline" for child in t.children or ()]
    return " ".join(child.content for child in inline if child.type in ("text", "code_inline"))
