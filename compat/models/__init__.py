"""Tiny models for tests and for users without a GPU: random weights, a local tokenizer, nothing downloaded.

``build(arch, directory)`` writes a Hugging Face model directory that both ``transformers`` and vLLM load; the
architectures and what ``predictable`` guarantees are described in ``builder``, the tokenizer in ``tokenizer``.
This package re-exports the builder's public names.
"""

from __future__ import annotations

from compat.models.builder import ARCHITECTURES, DTYPES, MANIFEST, BuiltModel, ModelSpec, build

__all__ = ["ARCHITECTURES", "DTYPES", "MANIFEST", "BuiltModel", "ModelSpec", "build"]
