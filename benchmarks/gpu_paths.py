"""The paths ``benchmarks/gpu_extract.py`` compares, each run in a process of its own (so that each starts with
the device's memory free):

    python benchmarks/gpu_paths.py build SPEC.json RESULT.json     # a random-weight model of a named shape
    python benchmarks/gpu_paths.py prefill SPEC.json RESULT.json   # plain vLLM prefill (max_tokens=1)
    python benchmarks/gpu_paths.py hf SPEC.json RESULT.json        # HF transformers, output_hidden_states=True
    python benchmarks/gpu_paths.py baseline SPEC.json RESULT.json  # HF in the run's dtype against HF float32

SPEC holds ``model``, ``dtype``, ``prompts`` (token-id lists) and what the path needs; RESULT gets ``seconds``
(the timed part only: after the engine or model is up, until the last tensor is ready) and ``tokens``. vLLM's
own extraction is ``compat.extract.native``, the patched consumer ``compat.extract.runner``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Llama-3.1-8B's shape, and a DeepSeek-V3-shaped model (its hidden size, attention (MLA) and router; fewer
# layers and experts, so that its bf16 weights, 14 GB, and a float32 copy for the reference fit one H200).
SHAPES = {
    "llama-8b": ("LlamaConfig", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5)),
    "deepseek-v3-6l": ("DeepseekV3Config", dict(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=6, num_attention_heads=128,
        num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
        v_head_dim=128, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=8, moe_intermediate_size=2048,
        n_group=8, topk_group=4, first_k_dense_replace=1, routed_scaling_factor=2.5, max_position_embeddings=163840,
        num_mtp_layers=0)),
    # For trying the benchmark on a CPU: the tiny Llama of the test suite.
    "tiny": ("LlamaConfig", dict(
        vocab_size=2000, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096)),
}


def _device(spec: dict) -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and spec.get("device", "auto") != "cpu" else "cpu"


def build(spec: dict) -> dict:
    """Random weights (HF's own initialisation, seeded) in ``spec["dtype"]``, saved as safetensors with a small
    local tokenizer (the consumer reads only its end-of-sequence id; prompts are token ids)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from compat.models.tokenizer import build_tokenizer

    class_name, values = SHAPES[spec["shape"]]
    config = getattr(transformers, class_name)(bos_token_id=0, eos_token_id=1, pad_token_id=2,
                                               tie_word_embeddings=False, **values)
    target = Path(spec["model"])
    began = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(_device(spec)):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, spec["dtype"]))
    model.save_pretrained(str(target), safe_serialization=True)
    data = json.loads((target / "config.json").read_text())
    if data.get("model_type") == "deepseek_v3":
        # V3's own routing (transformers leaves these out; vLLM then builds no e_score_correction_bias).
        data.update(topk_method="noaux_tc", scoring_func="sigmoid")
    data["dtype"] = spec["dtype"]
    (target / "config.json").write_text(json.dumps(data, indent=2))
    build_tokenizer(target, 1000, 4096)
    return {"seconds": time.perf_counter() - began, "parameters": sum(p.numel() for p in model.parameters())}


def prefill(spec: dict) -> dict:
    """vLLM's ``LLM.generate`` with ``max_tokens=1`` over every prompt at once, on the engine settings the
    consumer's generator uses (eager, prefix caching off, its token budget and sequence limit)."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=spec["model"], dtype=spec["dtype"], enforce_eager=True, max_model_len=spec["max_model_len"],
              max_num_batched_tokens=spec["budget"], max_num_seqs=spec["max_num_seqs"], enable_prefix_caching=False,
              gpu_memory_utilization=spec.get("gpu_memory_utilization", 0.8), seed=0, skip_tokenizer_init=True)
    params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
    prompts = [{"prompt_token_ids": ids} for ids in spec["prompts"]]
    llm.generate(prompts[:spec.get("warmup", 4)], params, use_tqdm=False)
    began = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    return {"seconds": time.perf_counter() - began, "tokens": sum(len(p) for p in spec["prompts"])}


def _batches(prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """Prompt indices, longest first, in batches of about ``tokens`` padded tokens."""
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    batches, current = [], []
    for i in order:
        if current and len(prompts[current[0]]) * (len(current) + 1) > tokens:
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current] if current else batches


def _hf_model(spec: dict, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=getattr(torch, dtype),
                                                 attn_implementation="sdpa")
    return model.to(_device(spec)).eval()


def hf(spec: dict) -> dict:
    """HF transformers' forward with ``output_hidden_states=True`` in batches of about 16k padded tokens (right
    padding, attention mask), the captured layers' states of every real token kept on the device."""
    import torch

    model = _hf_model(spec, spec["dtype"])
    device = model.device
    prompts = spec["prompts"]
    states = [k + 1 for k in spec["layer_ids"]]  # speculators' layer k: HF hidden_states[k + 1]

    def run(batch: list[int]) -> list:
        width = len(prompts[batch[0]])
        ids = torch.zeros(len(batch), width, dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(batch):
            ids[row, :len(prompts[i])] = torch.tensor(prompts[i], device=device)
            mask[row, :len(prompts[i])] = 1
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1)
        return [torch.stack([out.hidden_states[s][row, :len(prompts[i])] for s in states], 1)
                for row, i in enumerate(batch)]

    batches = _batches(prompts, spec.get("batch_tokens", 16384))
    run(batches[-1])
    if device.type == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    kept = []
    for batch in batches:
        kept += run(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - began, "tokens": sum(len(p) for p in prompts), "batches": len(batches)}


def baseline(spec: dict) -> dict:
    """How far HF's own forward in the run's dtype is from HF float32 on the same prompts (the largest relative
    error over each prompt's captured layers): the deviation the dtype alone gives, beside what the gate measured."""
    import torch

    from compat.gate.recompute import compare

    def states(model, ids) -> list:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=True,
                        logits_to_keep=1)
        return [out.hidden_states[k + 1][0].float().cpu() for k in spec["layer_ids"]]

    low = _hf_model(spec, spec["dtype"])
    made = [states(low, ids) for ids in spec["prompts"]]
    del low
    if _device(spec) == "cuda":
        torch.cuda.empty_cache()
    reference = _hf_model(spec, "float32")
    errors = [max(compare(x, r)[0] for x, r in zip(found, states(reference, ids)))
              for found, ids in zip(made, spec["prompts"])]
    return {"max_rel": max(errors), "per_prompt": errors}


def transfer(spec: dict) -> dict:
    """What moving one call's captured states to the host costs, by way (no engine): ``spec["rows"]`` rows of
    ``len(layer_ids)`` layers of ``hidden`` in the run's dtype, cut into ``spec["batch"]`` prompts. ``per_prompt``
    is the consumer's own loop (``h[a:b].clone().cpu()`` per prompt and layer); ``whole_pageable`` one copy per
    layer into fresh host memory; ``pinned`` one copy per layer into a page-locked buffer made beforehand, and
    ``pinned_then_split`` that plus the per-prompt host copies the consumer's samples need."""
    import torch

    if _device(spec) != "cuda":
        return {"error": "no CUDA device"}
    dtype = getattr(torch, spec["dtype"])
    rows, batch = spec["rows"], spec["batch"]
    layers = [torch.randn(rows, spec["hidden"], device="cuda", dtype=dtype) for _ in spec["layer_ids"]]
    bounds = [round(i * rows / batch) for i in range(batch + 1)]
    pinned = [torch.empty(rows, spec["hidden"], dtype=dtype, pin_memory=True) for _ in layers]

    def per_prompt():
        return [[h[a:b].clone().cpu() for h in layers] for a, b in zip(bounds, bounds[1:])]

    def whole_pageable():
        return [h.cpu() for h in layers]

    def pinned_copy():
        for buffer, h in zip(pinned, layers):
            buffer.copy_(h, non_blocking=True)
        torch.cuda.synchronize()
        return pinned

    def pinned_then_split():
        pinned_copy()
        return [[buffer[a:b].clone() for buffer in pinned] for a, b in zip(bounds, bounds[1:])]

    out = {"rows": rows, "bytes": sum(h.numel() * h.element_size() for h in layers)}
    for name, run in (("per_prompt", per_prompt), ("whole_pageable", whole_pageable), ("pinned", pinned_copy),
                      ("pinned_then_split", pinned_then_split)):
        run()
        torch.cuda.synchronize()
        times = []
        for _ in range(3):
            began = time.perf_counter()
            run()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - began)
        out[name] = min(times)
    return out


PATHS = {"build": build, "prefill": prefill, "hf": hf, "baseline": baseline, "transfer": transfer}

if __name__ == "__main__":  # vLLM spawns its engine core and workers
    name, spec_path, result_path = sys.argv[1:4]
    result = PATHS[name](json.loads(Path(spec_path).read_text()))
    Path(result_path).write_text(json.dumps(result))
