"""The tiny-model builder: random weights (or known ones), a local tokenizer, nothing downloaded.

``build(arch, directory)`` writes a Hugging Face model directory (``config.json``, ``model.safetensors``,
``tokenizer.json`` ...) that both ``transformers`` and vLLM load. Architectures:

- ``llama``: LlamaForCausalLM, hidden 128, 4 layers, 4 heads / 2 KV heads, vocab 2000, 2048 positions.
- ``qwen3``: Qwen3ForCausalLM of the same size (head_dim 32, q/k norms).
- ``deepseek_v3``: DeepseekV3ForCausalLM (MLA + MoE): 4 routed experts, 1 shared, first layer dense. The MLA
  latent is 576 (``kv_lora_rank=512``, ``qk_rope_head_dim=64``), the only size vLLM's CPU MLA backend runs.
- ``predictable``: a standard Llama whose attention and MLP weights are zero and whose MLP ``down_proj``
  bias is 1, with embedding row ``t`` equal to ``t`` in coordinate 0 and 0 elsewhere. Every decoder layer
  therefore adds exactly 1 to every coordinate of the residual stream: the hidden state AFTER decoder layer
  ``k`` (speculators' ``layer_ids=k``, HF ``hidden_states[k+1]``) is ``k + 1`` in coordinates 1.., and
  ``token_id + k + 1`` in coordinate 0; the state ENTERING layer ``k`` (vLLM's
  ``eagle_aux_hidden_state_layer_ids=k``, HF ``hidden_states[k]``) is ``k`` (and ``token_id + k``). Layer
  order and per-sample slicing can thus be checked exactly (coordinate 0 is exact for token ids below 2048
  in float32/float16, below 256 in bfloat16).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat.errors import CompatError

ARCHITECTURES = ("llama", "qwen3", "deepseek_v3", "predictable")
DTYPES = ("float32", "bfloat16", "float16")
MANIFEST = "compat_model.json"
"""Written next to config.json: what was built, and for ``predictable`` the values to expect."""


@dataclass(frozen=True)
class ModelSpec:
    """The size of a tiny model; the defaults run on a 2-core CPU in seconds."""

    arch: str = "llama"
    dtype: str = "float32"
    hidden_size: int = 128
    num_layers: int = 4
    vocab_size: int = 2000
    max_positions: int = 2048
    seed: int = 0


@dataclass(frozen=True)
class BuiltModel:
    path: Path
    spec: ModelSpec
    architecture: str
    """The ``architectures[0]`` in config.json (what vLLM dispatches on)."""
    tokenizer_vocab: int
    parameters: int

    def expected_after_layer(self, k: int) -> float:
        """``predictable`` only: the value of coordinates 1.. after decoder layer ``k``."""
        if self.spec.arch != "predictable":
            raise ValueError(f"{self.spec.arch} has random weights; only 'predictable' has known values")
        return float(k + 1)


def _config(spec: ModelSpec):
    from transformers import DeepseekV3Config, LlamaConfig, Qwen3Config

    heads = 4
    common: dict[str, Any] = dict(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=2 * spec.hidden_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=heads, max_position_embeddings=spec.max_positions,
        bos_token_id=0, eos_token_id=1, pad_token_id=2, tie_word_embeddings=False)
    if spec.arch == "llama":
        return LlamaConfig(num_key_value_heads=2, **common)
    if spec.arch == "predictable":
        return LlamaConfig(num_key_value_heads=2, mlp_bias=True, **common)
    if spec.arch == "qwen3":
        return Qwen3Config(num_key_value_heads=2, head_dim=spec.hidden_size // heads, **common)
    if spec.arch == "deepseek_v3":
        # vLLM's CPU MLA backend only runs a 576 latent (512 + 64); one group so the CPU router's
        # grouped top-k has nothing to group; no MTP module (vLLM would try to load its weights).
        return DeepseekV3Config(num_key_value_heads=heads, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
                                qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=4, n_shared_experts=1,
                                num_experts_per_tok=2, moe_intermediate_size=spec.hidden_size // 2, n_group=1,
                                topk_group=1, first_k_dense_replace=1, num_mtp_layers=0, **common)
    raise CompatError(f"unknown architecture {spec.arch!r}; choose one of {', '.join(ARCHITECTURES)}")


def _make_predictable(model) -> None:
    """Zero attention and MLP contributions; each layer adds its down_proj bias (1) to the residual stream."""
    import torch

    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb.zero_()
        emb[:, 0] = torch.arange(emb.shape[0], dtype=emb.dtype)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
            layer.mlp.down_proj.bias.fill_(1.0)


def _patch_config_json(path: Path, spec: ModelSpec) -> None:
    data = json.loads(path.read_text())
    if spec.arch == "deepseek_v3":
        # transformers leaves these out of a V3 config; vLLM then builds no e_score_correction_bias
        # parameter and fails loading the checkpoint (KeyError), so state V3's real routing here.
        data.update(topk_method="noaux_tc", scoring_func="sigmoid")
    data["dtype"] = spec.dtype
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def build(arch: str, directory: str | os.PathLike, *, dtype: str = "float32", hidden_size: int = 128,
          num_layers: int = 4, seed: int = 0, force: bool = False, max_positions: int = 2048) -> BuiltModel:
    """Build a tiny ``arch`` model with random (or, for ``predictable``, known) weights into ``directory``.

    The directory appears whole or not at all (built beside it, then renamed). An existing non-empty
    directory is refused unless ``force``.
    """
    if arch not in ARCHITECTURES:
        raise CompatError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    if dtype not in DTYPES:
        raise CompatError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if hidden_size % 4 or hidden_size < 32:
        raise CompatError(f"--hidden-size {hidden_size}: must be a multiple of 4 heads, at least 32")
    if num_layers < 1:
        raise CompatError(f"--layers {num_layers}: need at least one decoder layer")
    if max_positions < 16:
        raise CompatError(f"--max-positions {max_positions}: need at least 16")
    target = Path(directory)
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not force)):
        raise CompatError(f"{target} exists and is not an empty directory (use --force to replace it)")
    # Imported only now: bad input is refused in milliseconds, before torch and transformers load.
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    spec = ModelSpec(arch, dtype, hidden_size, num_layers, max_positions=max_positions, seed=seed)
    config = _config(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a one-shard save needs no progress bar on the user's terminal
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        if arch == "predictable":
            _make_predictable(model)
        model = model.to(getattr(torch, dtype))
        model.save_pretrained(str(staging), safe_serialization=True)
        _patch_config_json(staging / "config.json", spec)
        from compat.models.tokenizer import build_tokenizer

        tok_vocab = build_tokenizer(staging, min(spec.vocab_size, 1000), spec.max_positions, seed)
        built = BuiltModel(target, spec, type(model).__name__, tok_vocab, sum(p.numel() for p in model.parameters()))
        manifest = {"builder": "compat.models", "arch": arch, "architecture": built.architecture, "dtype": dtype,
                    "hidden_size": hidden_size, "num_layers": num_layers, "vocab_size": spec.vocab_size,
                    "tokenizer_vocab": tok_vocab, "max_positions": max_positions, "seed": seed,
                    "parameters": built.parameters}
        if arch == "predictable":
            manifest["values"] = {"after_layer_k": "k + 1 (coordinates 1..); token_id + k + 1 (coordinate 0)",
                                  "entering_layer_k": "k (coordinates 1..); token_id + k (coordinate 0)"}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return built
