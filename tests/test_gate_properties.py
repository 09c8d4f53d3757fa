"""Property-based: hypothesis draws a layout, sizes, a dtype and at most one fault, writes the file the way the
layout's tool writes it, and the gate's verdict must be exactly what the generator intended."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat.gate import GateOptions, run_gate

from .gate_files import write_eagle, write_speculators, write_vllm

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# fault -> the one rule that must fail (None: the file is valid and must pass).
FAULTS: dict[str, str | None] = {
    "none": None, "dtype": "dtype", "hidden": "hidden_size", "more_layers": "layer_count",
    "fewer_layers": "layer_count", "more_rows": "seq_len", "fewer_rows": "seq_len", "truncate": "readable",
    "header": "readable", "missing_ids": "layout", "mask_len": "loss_mask", "rank1": "layer_shape",
    "nan": "finite", "zero_first": "nonzero_layer", "duplicate": "distinct_layers", "reversed": "layer_order",
}
HEADER_FAULTS = {"dtype", "hidden", "more_layers", "fewer_layers", "more_rows", "fewer_rows", "truncate", "header",
                 "missing_ids", "mask_len", "rank1"}


@dataclass(frozen=True)
class Case:
    layout: str
    tokens: int
    hidden: int
    layers: int
    dtype: str
    fault: str
    seed: int
    cut: int


def _applies(layout: str, fault: str, tokens: int, layers: int) -> bool:
    if layout == "eagle" and fault in {"more_layers", "fewer_layers", "rank1", "duplicate", "reversed",
                                       "zero_first"}:
        return False  # EAGLE-1/2 store one layer: nothing to add, remove, reorder or duplicate
    if layout == "vllm-safetensors" and fault in {"mask_len", "rank1"}:
        return False  # no loss mask in vLLM's files; a stacked tensor has no per-layer rank
    if fault == "fewer_layers" and layers < 2 or fault == "duplicate" and layers < 2:
        return False
    if fault == "reversed" and layers < 3:
        return False  # RMS (k + 1): reversed, the last of 3+ layers is under half the first
    return not (fault == "fewer_rows" and tokens < 2)


@st.composite
def cases(draw) -> Case:
    layout = draw(st.sampled_from(["speculators-pt", "vllm-safetensors", "eagle"]))
    tokens = draw(st.integers(1, 24))
    layers = 1 if layout == "eagle" else draw(st.integers(1, 5))
    fault = draw(st.sampled_from([f for f in FAULTS if _applies(layout, f, tokens, layers)]))
    return Case(layout, tokens, draw(st.sampled_from([8, 16, 24])), layers, draw(st.sampled_from(list(DTYPES))),
                fault, draw(st.integers(0, 2**16)), draw(st.integers(1, 64)))


def _layers(case: Case) -> list[torch.Tensor]:
    """Layer k is about k + 1 everywhere (noise of 10%): RMS grows with depth, no two layers alike."""
    g = torch.Generator().manual_seed(case.seed)
    rows = case.tokens + (3 if case.fault == "more_rows" else -1 if case.fault == "fewer_rows" else 0)
    hidden = case.hidden + (8 if case.fault == "hidden" else 0)
    count = case.layers + (1 if case.fault == "more_layers" else -1 if case.fault == "fewer_layers" else 0)
    dtype = DTYPES[case.dtype]
    if case.fault == "dtype":
        dtype = torch.float32 if dtype is not torch.float32 else torch.bfloat16
    out = [((k + 1) * (1 + 0.1 * torch.randn(rows, hidden, generator=g))).to(dtype) for k in range(count)]
    if case.fault == "nan":
        out[-1][int(torch.randint(rows, (1,), generator=g))][0] = float("nan")
    if case.fault == "zero_first":
        out[0] = torch.zeros_like(out[0])
    if case.fault == "duplicate":
        out[1] = out[0].clone()
    if case.fault == "reversed":
        out = out[::-1]
    if case.fault == "rank1":
        out = [h[0] for h in out]
    return out


def _write(case: Case, directory: Path) -> Path:
    g = torch.Generator().manual_seed(case.seed + 1)
    ids = torch.randint(0, 1000, (case.tokens,), generator=g)
    mask = torch.ones(case.tokens + (1 if case.fault == "mask_len" else 0), dtype=torch.long)
    layers = _layers(case)
    if case.layout == "speculators-pt":
        path = write_speculators(directory / "data_0.pt", ids, layers, mask)
        if case.fault == "missing_ids":
            data = torch.load(path, weights_only=True)
            del data["input_ids"]
            torch.save(data, path)
    elif case.layout == "eagle":
        path = write_eagle(directory / "data_0.ckpt", ids, layers[0], mask)
        if case.fault == "missing_ids":
            data = torch.load(path, weights_only=True)
            del data["input_ids"]
            torch.save(data, path)
    else:
        path = directory / "hs_0.safetensors"
        if case.fault == "missing_ids":
            from safetensors.torch import save_file

            save_file({"hidden_states": torch.stack(layers, dim=1)}, str(path))
        else:
            write_vllm(path, ids, layers)
    data = path.read_bytes()
    if case.fault == "truncate":
        path.write_bytes(data[:-min(case.cut, len(data) - 1)])
    elif case.fault == "header":
        # safetensors: a length field past the end of the file; torch.save: a zip whose magic is gone.
        path.write_bytes((len(data) * 2).to_bytes(8, "little") + data[8:] if path.suffix == ".safetensors"
                         else b"XX" + data[2:])
    return path


@settings(max_examples=300, deadline=None)
@given(cases())
def test_verdict_matches_the_generators_intent(case):
    with tempfile.TemporaryDirectory() as tmp:
        _write(case, Path(tmp))
        options = dict(paths=(Path(tmp),), hidden_size=case.hidden, dtype=case.dtype, layers=case.layers)
        result = run_gate(GateOptions(values=True, **options))
        want = FAULTS[case.fault]
        failing = {f.check for f in result.failing()}
        assert failing == ({want} if want else set()), (case, [f.message for f in result.failing()])
        assert result.exit_code == (1 if want else 0)
        assert all(f.message.strip() for f in result.findings)
        if case.fault in HEADER_FAULTS or want is None:
            header_only = run_gate(GateOptions(values=False, **options))
            assert {f.check for f in header_only.failing()} == failing
