"""Run vLLM's own hidden-state extraction on CPU and list what it wrote (the reference for ``compat.extract
--check`` and a driver for the engine tests).

    python -m compat.extract.native MODEL OUT_DIR --layer-ids 3,0,2 --dtype float32 --prompts prompts.json

Speculative method ``extract_hidden_states`` with vLLM's ``ExampleHiddenStatesConnector``; where that connector
copies on a CUDA stream and writes later, ``compat.cpu_connector.SyncHiddenStatesConnector`` (the same minus
its CUDA-only copy), loaded through ``kv_connector_module_path``, and each output's file is awaited with vLLM's
own ``load_hidden_states`` (it sleeps on the writer's lock), its lock file removed with
``cleanup_hidden_states(keep_hidden_states=True)``; ``OUT_DIR/manifest.json`` lists
``{"path", "prompt_token_ids"}`` per request. Runs in its own process: vLLM spawns workers and must be
started under ``if __name__ == "__main__"``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.inputs import TokensPrompt

NOT_HERE = "compat.extract.native: "
"""Starts the line that says this build has no such path (the check reads it as the reason)."""


def _requests(prompts: list[list[int]]) -> list[TokensPrompt]:
    """Each prompt given as its token ids (no tokenizer round trip)."""
    return [{"prompt_token_ids": ids} for ids in prompts]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("out", type=Path)
    p.add_argument("--layer-ids", required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--prompts", type=Path, required=True, help="JSON list of token-id lists")
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--seconds", type=Path, help="write {seconds, tokens} of the batched run here (from the call "
                                                 "until the last file is written)")
    p.add_argument("--alone", type=int, default=0, help="then run the first N prompts one at a time too "
                                                        "(alone.json): how much the build's own path varies with "
                                                        "the batch")
    args = p.parse_args()

    import vllm
    from vllm import LLM, SamplingParams

    try:
        from vllm.distributed.kv_transfer.kv_connector.v1 import example_hidden_states_connector as stock
    except ImportError as exc:
        sys.exit(f"{NOT_HERE}vLLM {vllm.__version__} has no hidden-states connector, so no extract_hidden_states "
                 f"path ({type(exc).__name__}: {exc})")

    import torch

    # Without CUDA, builds whose connector copies on a CUDA stream and writes from a thread pool (it has
    # PendingSave) get the synchronous CPU subclass; earlier ones (0.17.0 ...) write each file in save_kv_layer,
    # on CPU too. With CUDA the stock connector runs.
    writes_later = hasattr(stock, "PendingSave") and not torch.cuda.is_available()
    connector = ({"kv_connector": "SyncHiddenStatesConnector", "kv_connector_module_path": "compat.cpu_connector"}
                 if writes_later else {"kv_connector": "ExampleHiddenStatesConnector"})
    layer_ids = [int(x) for x in args.layer_ids.split(",")]
    extra = {"max_num_batched_tokens": args.max_num_batched_tokens} if args.max_num_batched_tokens else {}
    # On CPU builds this fraction is of the host's memory, and some refuse to start when less is free.
    llm = LLM(model=args.model, dtype=args.dtype, enforce_eager=True, max_model_len=args.max_model_len, seed=0,
              gpu_memory_utilization=0.3,
              speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                  "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layer_ids}}},
              kv_transfer_config={**connector, "kv_role": "kv_producer",
                                  "kv_connector_extra_config": {"shared_storage_path": str(args.out)}},
              **extra)
    prompts = json.loads(args.prompts.read_text())
    greedy = SamplingParams(max_tokens=1, temperature=0.0)

    def written(outputs) -> list[dict]:
        records = []
        for out in outputs:
            path = out.kv_transfer_params["hidden_states_path"]
            if hasattr(stock, "load_hidden_states"):
                stock.load_hidden_states(path)  # waits on the writer's lock
                stock.cleanup_hidden_states(path, keep_hidden_states=True)
            records.append({"path": path, "prompt_token_ids": list(out.prompt_token_ids)})
        return records

    if args.seconds:  # timed: warm up first (its file is not in the manifest)
        written(llm.generate(_requests(prompts[:1]), greedy, use_tqdm=False))
    began = time.perf_counter()
    batched = written(llm.generate(_requests(prompts), greedy))
    if args.seconds:
        args.seconds.write_text(json.dumps({"seconds": time.perf_counter() - began,
                                            "tokens": sum(len(ids) for ids in prompts)}))
    (args.out / "manifest.json").write_text(json.dumps(batched))
    alone = [written(llm.generate(_requests([ids]), greedy, use_tqdm=False))[0]
             for ids in prompts[:args.alone]]
    (args.out / "alone.json").write_text(json.dumps(alone))


if __name__ == "__main__":
    main()
