"""Whether an extraction run's tensors are right: the gate (headers, values, and HF transformers' recomputation
of every sample), and on the predictable model the exact value of every layer of every row."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from compat.gate import GateOptions, GateResult, run_gate
from compat.models import MANIFEST


@dataclass(frozen=True)
class Validation:
    gate: GateResult
    exact: tuple[str, ...] | None
    """Predictable model only: every row and layer that is not the value it must be (None: not checked)."""

    @property
    def ok(self) -> bool:
        return self.gate.exit_code == 0 and not self.exact


def predictable(model: Path) -> bool:
    try:
        return json.loads((model / MANIFEST).read_text())["arch"] == "predictable"
    except (OSError, ValueError, KeyError):
        return False


def exact_layers(out: Path, layer_ids: list[int]) -> tuple[str, ...]:
    """On the predictable model, the output of decoder layer ``k`` is ``k + 1`` in coordinates 1.. and
    ``token_id + k + 1`` in coordinate 0: any other value is a fault (wrong layer, wrong order, wrong row).
    ``layer_ids``: in the order the generator says its samples hold them (its metadata)."""
    import torch

    faults: list[str] = []
    for path in sorted(out.glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1])):
        sample = torch.load(path, weights_only=True)
        ids = sample["input_ids"].to(torch.float64)
        for slot, k in enumerate(layer_ids):
            layer = sample["hidden_states"][slot].to(torch.float64)
            want_rest = torch.full_like(layer[:, 1:], float(k + 1))
            bad_rows = ((layer[:, 1:] != want_rest).any(dim=1) | (layer[:, 0] != ids + k + 1)).nonzero().flatten()
            if len(bad_rows):
                row = int(bad_rows[0])
                faults.append(f"{path.name}: layer {k} (slot {slot}) differs in {len(bad_rows)} of {len(layer)} rows, "
                              f"first row {row}: coordinate 0 is {float(layer[row, 0])} (want "
                              f"{float(ids[row]) + k + 1}), coordinate 1 is {float(layer[row, 1])} (want {k + 1})")
    return tuple(faults)


def validate(out: Path, model: Path, layer_ids: list[int], dtype: str | None, samples: int) -> Validation:
    """The gate over ``out`` with values and the HF reference on ``samples`` samples, and the exact check;
    ``layer_ids`` in the order the generator says its samples hold them."""
    options = GateOptions(paths=(out,), model=model, layer_ids=tuple(layer_ids), dtype=dtype, values=True,
                          reference=model, reference_samples=samples)
    gate = run_gate(options)
    return Validation(gate, exact_layers(out, layer_ids) if predictable(model) else None)
