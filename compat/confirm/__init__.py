"""Runtime confirmation: run the installed vLLM on a tiny model in child processes and observe what the
static probes predicted (reply shapes with tensor parallel 1 and 2, the execution protocol, block hashing,
model conventions, the start-up sequence). ``probes/confirm.py`` compares the two verdicts.

The work lives in modules named for it: ``checkpoints`` (the tiny models and their dtypes), ``checks`` (one check in
a child process), ``progress`` and ``observation``; the child's side is ``engine``. This package re-exports their
public names.
"""

from __future__ import annotations

from compat.confirm import observation
from compat.confirm.checkpoints import TINY, checkpoint_dtype, dtypes_for, tiny_model, transformers_major
from compat.confirm.checks import DEFAULT_TIMEOUT_S, ENTRY, FAILURES, check_in_dtypes, failed, run_child
from compat.confirm.progress import Progress

__all__ = [
    "DEFAULT_TIMEOUT_S", "ENTRY", "FAILURES", "TINY", "Progress", "check_in_dtypes", "checkpoint_dtype", "dtypes_for",
    "failed", "observe", "run_child", "tiny_model", "transformers_major",
]


def observe(timeout: float = DEFAULT_TIMEOUT_S, tensor_parallel: tuple[int, ...] = (1, 2),
            architectures: tuple[str, ...] = ("LlamaForCausalLM",)) -> dict:
    """Everything the confirmation needs from real engines (``observation.observe``), with this package's
    ``tiny_model`` and ``run_child``, read at the call: a test stands in for the engines by replacing them here."""
    return observation.observe(timeout, tensor_parallel, architectures, tiny_model=tiny_model, run_child=run_child)
