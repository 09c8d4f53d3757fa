"""What the gate-rule tables share: small hidden-state files the test writes (``tests/gate_files.py``'s writers),
the gate run over them, and the findings of one rule."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from compat.findings import Finding, Status
from compat.gate import GateOptions, run_gate

from ...gate_files import layered, write_data_config, write_eagle, write_speculators, write_vllm

H = 16
"""Hidden size of every sample here."""


def ids(n: int, start: int = 3) -> torch.Tensor:
    return torch.arange(start, start + n)


def spec(tokens: int = 6, layers: int = 3, **kw) -> dict:
    """A speculators sample's entries (``input_ids``, ``hidden_states``, ``loss_mask``), to change and save."""
    return {"input_ids": ids(tokens), "hidden_states": layered(tokens, H, layers, **kw),
            "loss_mask": torch.ones(tokens, dtype=torch.long)}


def model_config(directory: Path, **extra) -> Path:
    """A model directory holding only a config.json (what ``--model`` reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "llama", "hidden_size": H, "num_hidden_layers": 4, "vocab_size": 64,
              "torch_dtype": "bfloat16", **extra}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@dataclass
class Gate:
    root: Path

    def write(self, name: str, entries: dict) -> Path:
        """``torch.save`` of ``entries`` at ``root/name``."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(entries, path)
        return path

    def run(self, *paths: Path | str, **options):
        return run_gate(GateOptions(paths=tuple(paths) or (self.root,), **options))

    def findings(self, rule: str, *paths: Path | str, **options) -> list[Finding]:
        """``rule``'s findings of a run (every status)."""
        return [f for f in self.run(*paths, **options).findings if f.check == rule]


@pytest.fixture
def gate(tmp_path, monkeypatch) -> Gate:
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "data"
    root.mkdir()
    return Gate(root)


def one(found: list[Finding], status: Status, says: str) -> Finding:
    """The single finding of ``found``, checked for its status and words."""
    assert len(found) == 1, [(f.status, f.message) for f in found]
    assert found[0].status == status and says in found[0].message, (found[0].status, found[0].message)
    return found[0]


Writer = Callable[[Gate], object]
__all__ = ["H", "Gate", "Writer", "ids", "layered", "model_config", "one", "spec", "write_data_config",
           "write_eagle", "write_speculators", "write_vllm"]
