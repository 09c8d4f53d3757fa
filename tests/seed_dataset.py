"""The seed's failures rebuilt by their mechanism on a tiny model's real hidden states: the batch the extraction
worker captured, and the three files the seed's bugs made of it. ``tests/test_gate_seed.py`` uses the pieces;
``python -m tests.seed_dataset DIR`` writes ``DIR/models/llama`` and ``DIR/seed`` for the docs' sample."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers

from compat.models import build

from .gate_files import speculators_generate_slicing, write_data_config, write_speculators

LAYER_IDS = [0, 1, 2, 3]  # speculators numbering: the output of decoder layer k
PROMPT_LENS = (512, 259)  # the seed's batch: 512 + 259 = 771 tokens
HIDDEN = 768  # wider than the 512-token prompt, as 7168 was in the seed, so the bug's shapes come out alike


def tiny_llama(path: Path) -> Path:
    return build("llama", path, dtype="bfloat16", hidden_size=HIDDEN).path


def captured_batch(model: Path) -> tuple[list[torch.Tensor], list[list[int]]]:
    """What the extraction worker captured for the batch: one [771, H] tensor per layer, plus the prompts."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.bfloat16)
    captured: list[list[torch.Tensor]] = [[] for _ in LAYER_IDS]
    hooks = [hf.model.layers[k].register_forward_hook(
        lambda _m, _i, out, slot=slot: captured[slot].append(out[0] if isinstance(out, tuple) else out))
        for slot, k in enumerate(LAYER_IDS)]
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in PROMPT_LENS]
    with torch.no_grad():
        for ids in prompts:
            hf(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    aux = [torch.cat([c.reshape(-1, c.shape[-1]) for c in per_layer]) for per_layer in captured]
    assert aux[0].shape == (771, HIDDEN) and aux[0].dtype == torch.bfloat16
    return aux, prompts


def write_samples(directory: Path, results: list[dict], layer_ids: list[int] = LAYER_IDS, first: int = 0) -> Path:
    for i, r in enumerate(results, start=first):
        write_speculators(directory / f"data_{i}.pt", r["input_ids"], r["hidden_states"])
    write_data_config(directory, layer_ids, HIDDEN)
    return directory


def seed_files(directory: Path, aux: list[torch.Tensor], prompts: list[list[int]]) -> Path:
    """data_0.pt and data_1.pt: the collective_rpc reply indexed with [0] (771 tensors of [512] and of [259]);
    data_2.pt: a batch not sliced per sample (every layer keeps all 771 rows)."""
    write_samples(directory, speculators_generate_slicing(aux[0], prompts))
    return write_samples(directory, [{"input_ids": torch.tensor(prompts[0]), "hidden_states": aux}], first=2)


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(".")
    model = tiny_llama(root / "models" / "llama")
    seed_files(root / "seed", *captured_batch(model))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
