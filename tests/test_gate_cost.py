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


def many_strings(path: Path, count: int) -> Path:
    """A valid safetensors file of one tensor and a ``__metadata__`` of ``count`` strings of 80 characters."""
    header = json.dumps({"__metadata__": {f"k{i:08d}": "v" * 80 for i in range(count)},
                         "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, separators=(",", ":")).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
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


def many_in_an_array(path: Path, count: int) -> Path:
    """A header that is no object: an array of ``count`` tensor entries (each alone, as an object would hold it)."""
    header = json.dumps([{"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(count)],
                        separators=(",", ":")).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4 * count))
    return path


@pytest.mark.parametrize("make, count, said", [
    (many_tensors, 285_000, "missing tensor(s) hidden_states, token_ids"),
    (many_strings, 210_000, "missing tensor(s) hidden_states, token_ids"),
    (many_in_an_array, 370_000, "header is an array, not a JSON object"),
], ids=["tensors", "metadata", "array"])
def test_a_header_costs_the_gate_at_most_three_times_its_size_in_memory(tmp_path, make, count, said):
    """Issue 37 item 6: 20 MB of header (285,000 one-element tensors, 210,000 metadata strings, or an array of
    370,000 entries where the object should be) raise the gate's peak resident memory by at most three times the
    header's size over what a file of one tensor does. Parsed whole, the tensors' header cost 10 times its size,
    the strings' 4.6 times, the array's 10.5; walked an entry at a time, with three integers kept of each tensor,
    about twice."""
    path = make(tmp_path / "large.safetensors", count)
    size_mb = (path.stat().st_size - 8) / MiB
    assert size_mb > 19
    small = run_capped(many_tensors(tmp_path / "one.safetensors", 1))
    large = run_capped(path)
    for run in (small, large):
        assert run.report is not None and run.returncode == 1, run.stderr[-2000:]
    (finding,) = large.failing()
    assert said in finding["message"], finding
    grown = large.max_rss_mb - small.max_rss_mb
    assert grown <= 3 * size_mb, (f"{grown:.0f} MB for {size_mb:.0f} MB of header", large.max_rss_mb,
                                  small.max_rss_mb)


def test_running_out_of_memory_on_a_header_is_said_so_not_called_deep_nesting(tmp_path, monkeypatch):
    """An entry holding an escape is read a second time, as pairs; a MemoryError there was reported as nesting
    deeper than 127 levels."""
    path = tmp_path / "escaped.safetensors"
    header = b'{"t":{"dtype":"F\\u0033\\u0032","shape":[1],"data_offsets":[0,4]}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    assert read_header(path).tensors["t"].dtype == "float32"  # reads as is

    class Exhausted:
        def raw_decode(self, text, idx):
            raise MemoryError

    monkeypatch.setattr(safetensors_header, "_PAIRS_DECODER", Exhausted())
    safetensors_header.forget_headers()  # parsed again, not remembered from the read above
    with pytest.raises(HeaderError) as caught:
        read_header(path)
    assert "memory" in str(caught.value) and "deeper" not in str(caught.value), str(caught.value)


H, LAYERS = 4096, 4


def large_samples(directory: Path, tokens: int) -> int:
    """A vLLM safetensors sample ([T, 4, H] bf16, a sparse file) and a speculators ``.pt`` sample (four
    [T, H] bf16 layers, ``torch.save``) of ``tokens`` tokens, each layer zeros but for one value of its own (so
    no two layers are alike and none is all zeros); the bytes their layers hold, together."""
    import torch

    directory.mkdir()
    layer_bytes = tokens * H * 2
    header = json.dumps({"hidden_states": {"dtype": "BF16", "shape": [tokens, LAYERS, H],
                                           "data_offsets": [0, LAYERS * layer_bytes]},
                         "token_ids": {"dtype": "I64", "shape": [tokens],
                                       "data_offsets": [LAYERS * layer_bytes, LAYERS * layer_bytes + 8 * tokens]}})
    path = directory / "hs_0.safetensors"
    start = 8 + len(header)
    with path.open("wb") as out:
        out.write(len(header).to_bytes(8, "little") + header.encode())
        for layer in range(LAYERS):  # row `layer`, layer `layer`, column 0: 1.0 in bf16
            out.seek(start + (layer * LAYERS + layer) * H * 2)
            out.write(b"\x80\x3f")
        out.seek(start + LAYERS * layer_bytes)
        out.write(torch.arange(tokens, dtype=torch.int64).numpy().tobytes())
    layers = [torch.zeros(tokens, H, dtype=torch.bfloat16) for _ in range(LAYERS)]
    for k, layer in enumerate(layers):
        layer[k, 0] = 1.0
    torch.save({"input_ids": torch.arange(tokens), "hidden_states": layers,
                "loss_mask": torch.ones(tokens, dtype=torch.long)}, directory / "data_0.pt")
    return 2 * LAYERS * layer_bytes


def test_values_of_samples_larger_than_the_address_space_left_are_read_one_chunk_at_a_time(tmp_path):
    """The cap is what the gate needs for two samples of one chunk each, plus 64 MiB: samples of 192 MiB cannot
    be mapped under it, as ``torch.load(mmap=True)`` and ``safe_open`` map them (and then read them whole, when
    mapping fails); read one chunk at a time, every value is."""
    flags = ("--values", "--ignore", "hidden_size", "--ignore", "layer_count")
    small_bytes = large_samples(tmp_path / "small", 1024)
    small = run_capped(tmp_path / "small", *flags)
    assert small.report is not None and small.report["summary"]["value_bytes"] == small_bytes, small.stderr[-2000:]
    big_bytes = large_samples(tmp_path / "big", 6144)
    assert big_bytes // 2 > 2 * 64 * MiB + small_bytes // 2  # each more than the headroom past the small one
    run = run_capped(tmp_path / "big", *flags, cap=int(small.max_vm_mb * MiB) + 64 * MiB)
    assert run.report is not None, run.stderr[-2000:]
    assert not [f for f in run.failing() if f["probe"] == "readable"], run.failing()
    assert run.report["summary"]["value_bytes"] == big_bytes, (run.report["summary"], run.failing())


_IMPORTS = """
import sys
from pathlib import Path
from compat.gate import GateOptions, run_gate
result = run_gate(GateOptions(paths=(Path(sys.argv[1]),), values=sys.argv[2] == "values", jobs=1))
assert result.summary.samples > 0 and (sys.argv[2] != "values" or result.summary.value_bytes > 0), result.summary
print(" ".join(name for name in ("numpy", "torch") if name in sys.modules))
"""


def test_values_import_torch_only_for_a_file_torch_load_must_read(tmp_path):
    """``--values`` computes in numpy: a run over safetensors files and plain ``torch.save`` archives never imports
    torch (its import costs each worker seconds); one over a legacy (pre-zip) file, which only ``torch.load``
    reads, does. Header mode imports neither (numpy alone costs a run of tiny files some 5%)."""
    import subprocess
    import sys

    import torch

    from .gate_files import layered, write_speculators, write_vllm

    ids = torch.arange(3, 19)
    write_vllm(tmp_path / "plain" / "hs_0.safetensors", ids, layered(16, 32, 3))
    write_speculators(tmp_path / "plain" / "data_0.pt", ids, layered(16, 32, 3, seed=1))
    legacy = tmp_path / "legacy" / "data_0.pt"
    legacy.parent.mkdir()
    torch.save({"input_ids": ids, "hidden_states": layered(16, 32, 3, seed=2), "loss_mask": torch.ones(16).long()},
               legacy, _use_new_zipfile_serialization=False)

    def imported(directory: Path, mode: str) -> set[str]:
        run = subprocess.run([sys.executable, "-c", _IMPORTS, str(directory), mode], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent.parent, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        return set(run.stdout.split())

    assert imported(tmp_path / "plain", "values") == {"numpy"}
    assert imported(tmp_path / "legacy", "values") == {"numpy", "torch"}
    assert imported(tmp_path / "plain", "headers") == set()
