"""compat/gate/rules/dataset.py (``consistency``, --values): each sample against the rest of its dataset. The
samples here are made by a stand-in for a model: each row a fixed function of the tokens up to it, so samples that
share their first tokens share those rows, and each layer's scale grows with depth, as a real residual stream's.

Not covered: the batch-rounding verdict (an MoE/MLA model's rows), which needs rows within the loosest bound but
off the dtype's: it is a property of real kernels, covered by tests/test_gate_dataset_moe.py."""

from __future__ import annotations

import zlib

import pytest
import torch

from compat.findings import Status

from .conftest import H, spec

PREFIX = [5, 9, 11, 7]
SAMPLES = 12


def _rows(tokens: list[int], layers: int = 2) -> list[torch.Tensor]:
    """Row t of layer k: a fixed function of tokens[:t + 1], scaled by 1.5 ** k."""
    out = []
    for k in range(layers):
        rows = []
        for t in range(len(tokens)):
            g = torch.Generator().manual_seed(zlib.crc32(bytes(str(tokens[:t + 1]), "ascii")) + k)
            rows.append(torch.randn(H, generator=g) * 1.5 ** k)
        out.append(torch.stack(rows))
    return out


def _dataset(gate, samples: int = SAMPLES, odd=None, alone=()):
    """``samples`` samples of 18 tokens sharing ``PREFIX`` (those in ``alone`` share nothing), each of ``odd``
    changed by its function."""
    for i in range(samples):
        first = [60 + i + j for j in range(len(PREFIX))] if i in alone else PREFIX
        tokens = first + [20 + i + 13 * j for j in range(18 - len(PREFIX))]
        layers = _rows(tokens)
        if odd and i in odd:
            odd[i](layers)
        entries = spec()
        entries.update(input_ids=torch.tensor(tokens), hidden_states=layers,
                       loss_mask=torch.ones(len(tokens), dtype=torch.long))
        gate.write(f"data_{i}.pt", entries)


def _scaled(layers):
    for layer in layers:
        layer.mul_(8.0)


def _shifted(layers):
    layers[0][1:3] += 2.0


@pytest.mark.parametrize(("samples", "odd", "alone", "status", "says"), [
    (SAMPLES, {3: _scaled}, {3}, Status.BROKEN, "hidden_states[0]: median per-token RMS is 7.45x the dataset's median"),
    (SAMPLES, {3: _shifted}, (), Status.BROKEN, "row 2 (token 11): 2.5 relative distance from the median row of the "
                                                "11 other samples that share its first 3 tokens [5, 9, 11]"),
    (2, {1: _shifted}, (), Status.UNKNOWN, "which one is wrong cannot be told from two"),
], ids=["scaled sample", "rows off the shared prefix", "two samples disagree: undecided"])
def test_consistency(gate, samples, odd, alone, status, says):
    _dataset(gate, samples, odd, alone)
    found = [f for f in gate.findings("consistency", values=True)]
    assert [(f.place.file if f.place else f.consumer_location, f.status) for f in found] == \
        [(f"data_{next(iter(odd))}.pt", status)], [(f.consumer_location, f.message) for f in found]
    assert says in found[0].message, found[0].message
    if status is Status.BROKEN:
        assert "computed by other weights" in found[0].message


def test_a_consistent_dataset_has_no_finding(gate):
    _dataset(gate)
    assert gate.findings("consistency", values=True) == []
    assert gate.run().consistency is None  # the comparison runs only under --values
