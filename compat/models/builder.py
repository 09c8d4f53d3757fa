"""The tiny-model builder: random weights (or known ones), a local tokenizer, nothing downloaded.

``build(arch, directory)`` writes a Hugging Face model directory (``config.json``, ``model.safetensors``,
``tokenizer.json`` ...) that both ``transformers`` and vLLM load. Architectures (``FAMILIES``): one decoder family
each, hidden 128, 4 layers, 4 heads / 2 KV heads, vocab 2000, 2048 positions, MoE families with 4 experts of
which 2 are routed to:

- ``llama``, ``qwen2``, ``qwen3`` (head_dim 32, q/k norms), ``mistral``, ``phi3``, ``glm4``, ``olmo2``,
  ``gemma2`` and ``gemma3`` (tied embeddings), ``stablelm``, ``exaone4`` (post-norm), ``cohere`` and ``cohere2``
  (parallel attention and MLP), ``granite`` (residual and embedding multipliers);
- MoE: ``mixtral``, ``phimoe``, ``qwen2_moe``, ``qwen3_moe``, ``olmoe``, ``granitemoe``, ``gpt_oss``;
- MLA + MoE: ``deepseek_v2``, ``deepseek_v3`` (4 routed experts, 1 shared, first layer dense; the MLA latent is 576,
  ``kv_lora_rank=512`` and ``qk_rope_head_dim=64``, the only size vLLM's CPU MLA backend runs).

Which of them an engine runs, and how its layers return the residual stream, is for the build to say
(``compat.extract --arch all``).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.errors import CompatError


@dataclass(frozen=True)
class Family:
    """A decoder family as transformers builds it: its config class, what the tiny size needs beyond the common
    fields, and what its config.json must say for vLLM to build the same model."""

    config: str
    extra: dict[str, Any] = field(default_factory=dict)
    json: dict[str, Any] = field(default_factory=dict)
    """Written into config.json after ``save_pretrained``."""
    kv_heads: int = 2

    @property
    def architecture(self) -> str:
        """The ``architectures[0]`` transformers writes for it (``LlamaConfig`` -> ``LlamaForCausalLM``)."""
        return self.config.removesuffix("TextConfig").removesuffix("Config") + "ForCausalLM"


_MLA = dict(kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=32,
            n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=64, n_group=1,
            topk_group=1, first_k_dense_replace=1)
"""vLLM's CPU MLA backend only runs a 576 latent (512 + 64); one group so the CPU router's grouped top-k has nothing
to group."""
_MOE = dict(num_local_experts=4, num_experts_per_tok=2)

FAMILIES: dict[str, Family] = {
    "llama": Family("LlamaConfig"),
    "qwen2": Family("Qwen2Config"),
    "qwen3": Family("Qwen3Config", {"head_dim": 32}),
    "mistral": Family("MistralConfig"),
    "mixtral": Family("MixtralConfig", _MOE),
    "qwen2_moe": Family("Qwen2MoeConfig", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                                           "shared_expert_intermediate_size": 64}),
    "qwen3_moe": Family("Qwen3MoeConfig", {"head_dim": 32, "num_experts": 4, "num_experts_per_tok": 2,
                                           "moe_intermediate_size": 64, "decoder_sparse_step": 1}),
    "gemma2": Family("Gemma2Config", {"head_dim": 32, "tie_word_embeddings": True}),
    "gemma3": Family("Gemma3TextConfig", {"head_dim": 32, "tie_word_embeddings": True}),
    "phi3": Family("Phi3Config"),
    "phimoe": Family("PhimoeConfig", _MOE),
    "stablelm": Family("StableLmConfig"),
    "exaone4": Family("Exaone4Config"),
    "cohere": Family("CohereConfig", {"tie_word_embeddings": True}),
    "cohere2": Family("Cohere2Config", {"tie_word_embeddings": True}),
    "granite": Family("GraniteConfig", {"residual_multiplier": 0.5, "embedding_multiplier": 2.0,
                                        "attention_multiplier": 0.1, "logits_scaling": 2.0}),
    "granitemoe": Family("GraniteMoeConfig", {**_MOE, "residual_multiplier": 0.5, "embedding_multiplier": 2.0,
                                              "attention_multiplier": 0.1, "logits_scaling": 2.0}),
    "olmo2": Family("Olmo2Config"),
    "olmoe": Family("OlmoeConfig", {"num_experts": 4, "num_experts_per_tok": 2}),
    "glm4": Family("Glm4Config", {"head_dim": 32}),
    "deepseek_v2": Family("DeepseekV2Config", _MLA, kv_heads=4),
    # transformers leaves these out of a V3 config; vLLM then builds no e_score_correction_bias parameter and fails
    # loading the checkpoint (KeyError), so state V3's real routing here. No MTP module (vLLM would load it).
    "deepseek_v3": Family("DeepseekV3Config", {**_MLA, "num_mtp_layers": 0},
                          {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}, kv_heads=4),
    "gpt_oss": Family("GptOssConfig", {**_MOE, "head_dim": 32}),
}
ARCHITECTURES = (*FAMILIES, "predictable")
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
    import transformers

    heads = 4
    family = FAMILIES["llama"] if spec.arch == "predictable" else FAMILIES.get(spec.arch)
    if family is None:
        raise CompatError(f"unknown architecture {spec.arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    common: dict[str, Any] = dict(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=2 * spec.hidden_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=heads, num_key_value_heads=family.kv_heads,
        max_position_embeddings=spec.max_positions, bos_token_id=0, eos_token_id=1, pad_token_id=2,
        tie_word_embeddings=False)
    if spec.arch == "predictable":
        common["mlp_bias"] = True
    return getattr(transformers, family.config)(**{**common, **family.extra})


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
    if spec.arch in FAMILIES:
        data.update(FAMILIES[spec.arch].json)
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
