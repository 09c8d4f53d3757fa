"""Loading ``torch.save`` files without unpickling arbitrary objects: the archive's structure when it is plain
tensors (``torch_header``), else ``torch.load(weights_only=True)``, memory-mapped."""

from __future__ import annotations

import os
from typing import Any


class FormatError(Exception):
    """Not a torch.save file at all."""


def load_torch(path: str | os.PathLike) -> Any:
    """``torch.load`` that never unpickles arbitrary objects, and maps (does not read) tensor data."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc):
            raise
        # Legacy (pre-zip) torch.save files cannot be memory-mapped; they are small enough to read.
        return torch.load(path, map_location="cpu", weights_only=True)


def load_structure(path: str) -> Any:
    """The stored object: tensor stubs from the archive's pickle (fast), else torch.load's answer.

    Raises ``FormatError`` for a file that is neither a zip archive nor a pickle stream.
    """
    from compat.gate.read.torch_header import NotPlain, read_structure

    try:
        return read_structure(path)
    except NotPlain:
        pass  # not a plain tensor archive: torch.load (weights only) decides, and says why not
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic[:2] != b"PK" and magic[:1] != b"\x80":
        # torch.save writes a zip archive (or, before 1.6, a pickle stream): anything else is another format.
        raise FormatError(f"not a torch.save file (a zip archive or pickle stream): it starts with {magic!r}")
    return load_torch(path)


def load_error(exc: Exception) -> str:
    """The informative sentence of torch.load's long error texts."""
    text = str(exc)
    if "WeightsUnpickler error:" in text:
        reason = text.split("WeightsUnpickler error:", 1)[1].strip().split("\n")[0].split(". Please")[0]
        return f"torch.load(weights_only=True) refused to unpickle it: {reason}"
    first = " ".join(text.split()).split(". ")[0][:240] or "(no message)"
    return f"torch.load(weights_only=True) failed: {first}"
