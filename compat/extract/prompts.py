"""Prompts for an extraction run: token-id lists, generated (deterministic, mixed lengths) or read from JSONL."""

from __future__ import annotations

import json
import random
from pathlib import Path

from compat.errors import CompatError


def generated(count: int, vocab: int, max_len: int, seed: int = 0, min_len: int = 4) -> list[list[int]]:
    """``count`` prompts of lengths from ``min_len`` to ``max_len``, token ids below ``vocab`` (avoiding the
    first few, which tokenizers reserve)."""
    rng = random.Random(seed)
    low = min(3, vocab - 1)
    return [[rng.randrange(low, vocab) for _ in range(rng.randint(min_len, max_len))] for _ in range(count)]


def read_jsonl(path: Path, vocab: int | None = None) -> list[list[int]]:
    """One prompt per line: a list of token ids, or an object with ``input_ids`` (or ``token_ids``)."""
    prompts = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CompatError(f"--prompts {path}: cannot read: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise CompatError(f"--prompts {path}:{number}: not JSON ({exc})") from exc
        ids = value.get("input_ids", value.get("token_ids")) if isinstance(value, dict) else value
        if not (isinstance(ids, list) and ids and all(isinstance(t, int) and t >= 0 for t in ids)):
            raise CompatError(f"--prompts {path}:{number}: expected a non-empty list of token ids")
        if vocab is not None and max(ids) >= vocab:
            raise CompatError(f"--prompts {path}:{number}: token id {max(ids)} is outside the vocabulary ({vocab})")
        prompts.append(ids)
    if not prompts:
        raise CompatError(f"--prompts {path}: no prompts")
    return prompts
