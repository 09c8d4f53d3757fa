"""Bounded cost (issue "Bounded cost"): what the gate spends on a file is bounded by the file, asserted as
behaviour under ``tests/hostile.py``'s memory cap, never as timings (those are ``benchmarks/gate_speed.py``'s):

- a safetensors header of hundreds of thousands of tensors is read whole, in memory a small multiple of its
  size, and running out of memory on a header is said as such (not as deep nesting);
- ``--values`` reads a sample larger than the address space the gate may use, one chunk at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.gate.read import safetensors_header
from compat.gate.read.safetensors_header import HeaderError, read_header

from .hostile import run_capped

MiB = 1 << 20


def many_tensors(path: Path, count: int) -> Path:
    """A valid safetensors file of ``count`` one-element F32 tensors: a header of about 70 bytes per tensor."""
    header = json.dumps({f"t{i:07d}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
                         for i in range(count)}, separators=(",", ":")).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4 * count))
    return path


@pytest.fixture(scope="module")
def twenty_megabyte_header(tmp_path_factory) -> Path:
    return many_tensors(tmp_path_factory.mktemp("cost") / "many.safetensors", 285_000)


def test_a_header_of_285000_tensors_is_read_whole_under_a_cap_of_18_times_its_size(twenty_megabyte_header):
    """20 MB of header under a 360 MiB address-space cap (the header-only gate starts at about 30 MiB): the
    reader that parsed it twice and walked every value (VmPeak 488 MB) ran out; one parse and one pass fit
    (VmPeak 250 MB)."""
    run = run_capped(twenty_megabyte_header, cap=360 * MiB)
    assert run.report is not None, run.stderr[-2000:]
    (finding,) = run.failing()
    assert "missing tensor(s) hidden_states, token_ids; found t0000000, t0000001" in finding["message"], finding
    assert "and 284992 more" in finding["message"], finding["message"][:300]
    assert len(finding["message"]) < 400  # the names are not all listed


def test_running_out_of_memory_on_a_header_is_said_so_not_called_deep_nesting(tmp_path, monkeypatch):
    """A header with a repeated key is read a second time, as pairs; a MemoryError there was reported as
    nesting deeper than 127 levels."""
    path = tmp_path / "repeated.safetensors"
    header = b'{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],' \
             b'"data_offsets":[0,4]}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    read_header(path)  # reads as is

    class Exhausted:
        def decode(self, text):
            raise MemoryError

    monkeypatch.setattr(safetensors_header, "_PAIRS_DECODER", Exhausted())
    with pytest.raises(HeaderError) as caught:
        read_header(path)
    assert "memory" in str(caught.value) and "deeper" not in str(caught.value), str(caught.value)
