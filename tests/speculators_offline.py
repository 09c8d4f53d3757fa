"""The steps of speculators 0.3.0's own ``scripts/data_generation_offline.py`` (in its repository at tag v0.3.0, not
in the released package, so not at hand on the index), run on the released library's own functions: preprocess a
local conversation file (``load_and_preprocess_dataset``), build ``VllmHiddenStatesGenerator`` with the script's
arguments, save each result as the script does (``data_<n>.pt`` of ``input_ids``, ``hidden_states``, the loss mask
cut to the prompt) and write ``data_config.json`` with ``DataGenerationConfig.from_generator``.

    python tests/speculators_offline.py MODEL DATA.jsonl OUT_DIR [--max-samples N]

Run with the patched consumer first on the path (``compat.extract.stage.child_env``); prints ``RESULT`` and what
it saved.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULT = "speculators_offline: "
"""Starts the line that says what was written (vLLM logs to standard output too)."""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("out", type=Path)
    p.add_argument("--max-samples", type=int, default=24)
    p.add_argument("--seq-length", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()

    import torch
    from speculators.data_generation.config_generator import DataGenerationConfig
    from speculators.data_generation.preprocessing import load_and_preprocess_dataset
    from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

    args.out.mkdir(parents=True, exist_ok=True)
    dataset, _ = load_and_preprocess_dataset(
        target_model_path=args.model, train_data_path=args.data, seq_length=args.seq_length,
        build_dataset_num_proc=1, seed=0, max_samples=args.max_samples,
        token_freq_path=str(args.out.parent / "token_freq.pt"), cache_dir=str(args.out.parent / "hf-cache"))
    # The script's defaults: layer ids auto-selected, one GPU's share of memory (here, the host's).
    generator = VllmHiddenStatesGenerator(model_path=args.model, layer_ids=None, max_model_len=args.seq_length,
                                          gpu_memory_utilization=0.3, tensor_parallel_size=1)
    index = 0
    for start in range(0, len(dataset), args.batch_size):
        batch = dataset[start:start + args.batch_size]
        for j, result in enumerate(generator.generate(batch["input_ids"])):
            length = len(result["input_ids"])
            torch.save({"input_ids": result["input_ids"],
                        "hidden_states": [h.contiguous() for h in result["hidden_states"]],
                        "loss_mask": batch["loss_mask"][j][:length]}, args.out / f"data_{index}.pt")
            index += 1
    config = DataGenerationConfig.from_generator(generator=generator, train_data_path=args.data,
                                                 seq_length=args.seq_length, cache_dir=str(args.out.parent),
                                                 num_samples=len(dataset), max_samples=args.max_samples, seed=0)
    (args.out / "data_config.json").write_text(json.dumps(config.to_dict(), indent=2))
    print(RESULT + json.dumps({"saved": index, "layer_ids": list(generator.layer_ids)}), flush=True)


if __name__ == "__main__":
    main()
