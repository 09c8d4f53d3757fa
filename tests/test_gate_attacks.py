"""The gate under attack: datasets built from tiny models' real hidden states (HF transformers' forward, the
states EAGLE's and speculators' pipelines store), then damaged, and files an attacker would plant. No wrong
dataset passes, no right one fails; hostile files run under a memory cap and a timeout (``tests/hostile.py``)
and end as one finding each, with a complete report for the other files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from compat.findings import Status
from compat.gate import GateOptions, run_gate
from compat.gate.read.files import read_file
from compat.models import build

from .gate_files import layered, write_data_config, write_eagle, write_speculators, write_vllm
from .hostile import run_capped

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HIDDEN = 64


class Model:
    """A tiny model and its residual stream: ``states(ids)[j]`` is s_j (s_0 embeddings .. s_n the last layer's
    output, before the final norm), ``states(ids)["final_norm"]`` HF's last ``hidden_states`` entry."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hf = transformers.AutoModelForCausalLM.from_pretrained(str(path))
        self.layers = len(self.hf.model.layers)
        self._outs: list = []
        for layer in self.hf.model.layers:
            layer.register_forward_hook(self._hook)

    def _hook(self, _module, _inputs, out) -> None:
        self._outs.append(out[0] if isinstance(out, tuple) else out)

    def states(self, ids) -> dict:
        self._outs = []
        with torch.no_grad():
            hs = self.hf(ids[None], output_hidden_states=True).hidden_states
        out = {0: hs[0][0]}
        out.update({k + 1: o.reshape(-1, o.shape[-1]) for k, o in enumerate(self._outs)})
        out["final_norm"] = hs[-1][0]
        return out


def _ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(3, 1000, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Model:
    return Model(build("llama", tmp_path_factory.mktemp("attack") / "llama", hidden_size=HIDDEN).path)


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory) -> Model:
    return Model(build("deepseek_v3", tmp_path_factory.mktemp("attack") / "deepseek", hidden_size=HIDDEN).path)


def _speculators(model: Model, directory: Path, samples: int, tokens: int, layer_ids=(1, 2), dtype=torch.float32,
                 damage=None) -> list[Path]:
    """speculators 0.3.0's files (output numbering: layer id k is s_(k+1)) with its data_config.json."""
    paths = []
    for i in range(samples):
        ids = _ids(tokens, i)
        states = model.states(ids)
        layers = [states[k + 1].to(dtype).clone() for k in layer_ids]
        if damage is not None:
            ids, layers = damage(i, ids, layers)
        paths.append(write_speculators(directory / f"data_{i}.pt", ids, layers))
    write_data_config(directory, list(layer_ids), HIDDEN)
    return paths


def _failing(result) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in result.failing():
        out.setdefault(f.check, []).append(f.symbol)
    return out


# Wrong data that passed -------------------------------------------------------------------------------------


def test_a_sample_with_no_layers_fails_in_every_mode(llama, tmp_path):
    ids = _ids(9, 0)
    (tmp_path / "spec").mkdir()
    torch.save({"input_ids": ids, "hidden_states": [], "loss_mask": torch.ones(9, dtype=torch.long)},
               tmp_path / "spec" / "data_0.pt")
    write_vllm(tmp_path / "vllm" / "req.safetensors", ids, torch.zeros(9, 0, HIDDEN))
    for sub in ("spec", "vllm"):
        for flags in ({}, {"values": True}, {"values": True, "reference": llama.path}):
            result = run_gate(GateOptions(paths=(tmp_path / sub,), **flags))
            assert result.exit_code == 1 and _failing(result) == {"layer_shape": [result.findings[0].symbol]}
            assert "no layers" in result.failing()[0].message


def _reference_failures(result) -> list:
    """The reference check's failures (--reference reads every value too: zero_rows, finite... also fail)."""
    return [f for f in result.failing() if f.check == "reference"]


def test_a_nan_row_fails_the_reference_check(llama, tmp_path):
    def nan_row(i, ids, layers):
        layers[1][5] = float("nan")
        return ids, layers

    _speculators(llama, tmp_path, 1, 24, damage=nan_row)
    result = run_gate(GateOptions(paths=(tmp_path,), reference=llama.path))
    assert {f.check for f in result.failing()} == {"finite", "reference"}  # --reference reads the values too
    (f,) = _reference_failures(result)
    assert f.check == "reference" and "hidden_states[1]" in f.message and "hidden_states[0]" not in f.message


def test_zero_rows_fail_values_padding_and_a_zeroed_tail(llama, tmp_path):
    def padded(i, ids, layers):  # 8 pad tokens whose rows were never computed
        pad = torch.zeros(8, HIDDEN)
        return torch.cat([ids, torch.zeros(8, dtype=ids.dtype)]), [torch.cat([h, pad]) for h in layers]

    def zero_tail(i, ids, layers):  # the last 20% of rows lost
        for h in layers:
            h[-8:] = 0
        return ids, layers

    _speculators(llama, tmp_path / "padded", 2, 32, damage=padded)
    _speculators(llama, tmp_path / "tail", 2, 40, damage=zero_tail)
    for sub, first in (("padded", 32), ("tail", 32)):
        result = run_gate(GateOptions(paths=(tmp_path / sub,), values=True))
        assert _failing(result) == {"zero_rows": ["data_0.pt", "data_1.pt"]}, sub
        assert f"8 of 40 rows, first at token {first}" in result.failing()[0].message


def test_one_zero_row_of_2048_in_bfloat16_fails_the_reference(llama, tmp_path):
    def last_row(i, ids, layers):
        layers[0][-1] = 0
        return ids, layers

    _speculators(llama, tmp_path, 1, 2048, dtype=torch.bfloat16, damage=last_row)
    (f,) = _reference_failures(run_gate(GateOptions(paths=(tmp_path,), reference=llama.path, dtype="bfloat16")))
    # Its share of the relative error is about sqrt(1/2048) = 0.022, under bfloat16's 0.03: only the row catches it.
    assert f.check == "reference" and "hidden_states[0]" in f.message and "min cosine 0.0000" in f.message


def test_three_zero_rows_of_512_fail_deepseek_v3s_looser_reference(deepseek, tmp_path):
    def rows(i, ids, layers):
        layers[1][[100, 300, 500]] = 0
        return ids, layers

    _speculators(deepseek, tmp_path, 1, 512, damage=rows)
    (f,) = _reference_failures(run_gate(GateOptions(paths=(tmp_path,), reference=deepseek.path)))
    assert f.check == "reference" and "hidden_states[1]" in f.message


def test_every_sample_is_checked_for_token_pairing_not_only_the_recomputed_ones(llama, tmp_path):
    def swap(i, ids, layers):  # samples 1 and 2 keep their ids but hold each other's states
        if i in (1, 2):
            other = _ids(30, 3 - i)
            states = llama.states(other)
            layers = [states[k + 1].clone() for k in (1, 2)]
        return ids, layers

    _speculators(llama, tmp_path, 12, 30, damage=swap)
    result = run_gate(GateOptions(paths=(tmp_path,), reference=llama.path))
    # Pairing (no model run) and the partial recompute (every sample, up to its first stored layer) each find
    # both; the full recompute, which keeps its budget of 4, then looks at those two first.
    swapped = ["data_1.pt", "data_2.pt"]
    assert _failing(result) == {"pairing": swapped, "partial_reference": swapped, "reference": swapped}
    ref = result.reference
    assert ref["recomputed"] == 4 and ref["candidates"] == 12 and ref["pairing"]["checked"] == 12
    assert ref["partial"]["samples"] == 12 and ref["partial"]["failed"] == 2
    assert dict(result.facts())["verified"].startswith("recomputed 4 of 12 samples")
    picked = [(p["sample"].rsplit("/", 1)[-1], p["why"]) for p in ref["picked"]][:2]
    assert picked == [(name, "the partial recompute found it") for name in swapped], picked


def test_without_layer_ids_a_match_is_unknown_and_an_off_by_one_numbering_is_not_a_pass(llama, tmp_path):
    ids = _ids(20, 0)
    states = llama.states(ids)
    # vLLM numbering asked for layers 1 and 2 (s_1, s_2); the file holds s_2, s_3 (off by one), no ids anywhere.
    write_vllm(tmp_path / "req.safetensors", ids, [states[2], states[3]])
    result = run_gate(GateOptions(paths=(tmp_path,), reference=llama.path))
    (f,) = [f for f in result.findings if f.check == "reference"]
    assert f.status is Status.UNKNOWN and "Not verified" in f.message and "off by one" in f.message
    assert result.exit_code == 0 and run_gate(GateOptions(paths=(tmp_path,), reference=llama.path,
                                                          strict=True)).exit_code == 1
    result = run_gate(GateOptions(paths=(tmp_path,), reference=llama.path, layer_ids=(1, 2)))
    assert sorted(f.check for f in result.failing()) == ["partial_reference", "reference"]
    (f,) = [f for f in result.failing() if f.check == "reference"]
    assert "off by one" in f.message


def test_an_eagle_final_state_taken_before_the_final_norm_fails(llama, tmp_path):
    ids = _ids(20, 0)
    states = llama.states(ids)
    write_eagle(tmp_path / "eagle12" / "data_0.ckpt", ids, states[llama.layers])
    write_eagle(tmp_path / "eagle3" / "data_0.ckpt", ids, torch.cat([states[1], states[2], states[3]], dim=-1),
                target=states[llama.layers])
    for sub in ("eagle12", "eagle3"):
        result = run_gate(GateOptions(paths=(tmp_path / sub,), hidden_size=HIDDEN, reference=llama.path))
        (f,) = result.failing()
        assert f.check == "reference" and f"it matches s_{llama.layers}" in f.message, f.message


# Right data that was rejected ---------------------------------------------------------------------------------


def test_a_float_loss_mask_of_zeros_and_ones_is_accepted_with_a_note(llama, tmp_path):
    _speculators(llama, tmp_path / "ok", 1, 12)
    ok = tmp_path / "ok" / "data_0.pt"
    sample = torch.load(ok)
    sample["loss_mask"] = torch.tensor([0.0] * 4 + [1.0] * 8)
    torch.save(sample, ok)
    result = run_gate(GateOptions(paths=(tmp_path / "ok",), values=True, reference=llama.path, layer_ids=(1, 2)))
    assert result.exit_code == 0, [f.message for f in result.failing()]
    (note,) = [f for f in result.findings if f.allowed]
    assert note.check == "loss_mask" and "to(torch.bool)" in note.allowed
    sample["loss_mask"][0] = 0.5
    torch.save(sample, ok)
    result = run_gate(GateOptions(paths=(tmp_path / "ok",), values=True))
    assert _failing(result) == {"loss_mask": ["data_0.pt"]} and "0.5" in result.failing()[0].message


def test_a_correct_eagle3_file_passes_with_its_layer_count_or_ids(llama, tmp_path):
    ids = _ids(20, 0)
    states = llama.states(ids)
    write_eagle(tmp_path / "data_0.ckpt", ids, torch.cat([states[2], states[3], states[4]], dim=-1),
                target=states["final_norm"])
    for flags in ({"layers": 3}, {"layer_ids": (1, 2, 3)}, {"layers": 3, "reference": llama.path}):
        result = run_gate(GateOptions(paths=(tmp_path,), model=llama.path, values=True, **flags))
        assert result.exit_code == 0, (flags, [f.message for f in result.failing()])


# Files that crashed, hung or exhausted it ---------------------------------------------------------------------


def _good(directory: Path) -> Path:
    return write_vllm(directory / "good.safetensors", torch.arange(6), layered(6, 16, 3, torch.float32))


def _one_line_finding(run, name: str, rule: str = "readable") -> dict:
    (f,) = run.findings(name)
    assert f["probe"] == rule and f["status"] == "broken" and "\n" not in f["message"] and len(f["message"]) < 400
    return f


def test_a_fifo_and_a_device_are_findings_never_opened(tmp_path):
    _good(tmp_path)
    os.mkfifo(tmp_path / "data_0.pt")
    os.symlink("/dev/zero", tmp_path / "data_1.pt")
    # Under the safetensors suffix too, whose files the listing's entry types spare a stat.
    os.mkfifo(tmp_path / "data_2.safetensors")
    os.symlink("/dev/zero", tmp_path / "data_3.safetensors")
    for flags in ((), ("--values",)):
        run = run_capped(tmp_path, *flags, timeout=60)
        assert run.returncode == 1 and run.report is not None, run.stderr
        for fifo, device in (("data_0.pt", "data_1.pt"), ("data_2.safetensors", "data_3.safetensors")):
            assert "FIFO" in _one_line_finding(run, fifo)["message"]
            assert "a link to /dev/zero, a system file: never read" in _one_line_finding(run, device)["message"]
        assert [f["status"] for f in run.findings("good")] == ["ok"]
        assert run.max_rss_mb < 1024


def test_a_file_swapped_for_a_fifo_after_it_was_listed_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "data_0.safetensors"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(read_file(str(fifo), listed_regular=True)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome and "not a regular file" in outcome[0].failure.message


def test_symlink_loops_are_one_line_findings(tmp_path):
    _good(tmp_path)
    (tmp_path / "sub").mkdir()
    os.symlink("..", tmp_path / "sub" / "up")
    os.symlink("b.pt", tmp_path / "a.pt")
    os.symlink("a.pt", tmp_path / "b.pt")
    run = run_capped(tmp_path)
    assert run.returncode == 1, run.stderr
    assert "symlink loop" in _one_line_finding(run, "sub/up")["message"]
    for name in ("a.pt", "b.pt"):
        assert "symbolic links" in _one_line_finding(run, name)["message"]
    assert [f["status"] for f in run.findings("good")] == ["ok"]


def test_many_layers_cost_linear_time_under_values(tmp_path):
    """A 47 KB file of [1, 3000, 4]: the layer checks once compared all 4.5 million pairs of layers."""
    _good(tmp_path)
    write_vllm(tmp_path / "wide.safetensors", torch.arange(1), torch.randn(1, 3000, 4))
    zeros = write_vllm(tmp_path / "zeros.safetensors", torch.arange(2), torch.zeros(2, 3000, 4))
    run = run_capped(tmp_path, "--values", "--ignore", "layer_count", "--ignore", "hidden_size", timeout=30)
    assert run.returncode == 1 and run.max_rss_mb < 1024, run.stderr
    (empty,) = run.failing(zeros.name)
    assert empty["probe"] == "nonzero_layer" and "(3000 of 3000 layers)" in empty["message"]
    assert len(empty["message"]) < 400  # one cause, one finding, a bounded message


def test_reads_are_bounded_even_within_one_row(tmp_path, monkeypatch):
    """With a chunk of 1 KiB, rows of 16 KiB are read in parts, and the statistics are the same as whole."""
    from compat.gate import value_stats
    from compat.gate.read.files import read_file
    from compat.gate.read.tensor_data import SampleTensors

    x = torch.randn(5, 3, 4096)
    x[1, 0] = 0  # a zero row
    x[3, 2, 4000] = float("nan")
    x[:, 1] = x[:, 0]  # identical layers
    path = write_vllm(tmp_path / "wide.safetensors", torch.arange(5), x)
    whole = value_stats.scan_file(read_file(str(path)), False)
    sizes = []
    original = SampleTensors.part_array

    def spy(self, *args):
        out = original(self, *args)
        sizes.append(out.nbytes)
        return out

    monkeypatch.setattr(SampleTensors, "part_array", spy)
    monkeypatch.setattr(value_stats, "CHUNK_BYTES", 1024)
    parts = value_stats.scan_file(read_file(str(path)), False)
    assert max(sizes) <= 1024 and len(sizes) >= 5 * 3 * 16
    (a,), (b,) = whole.samples, parts.samples
    assert a.identical == b.identical == ((0, 1),)
    for s, t in zip(a.layers, b.layers):
        assert (s.nan, s.zero_rows, s.first_zero, s.first_bad) == (t.nan, t.zero_rows, t.first_zero, t.first_bad)
        assert s.median_rms == pytest.approx(t.median_rms, rel=1e-5)
    assert [s.zero_rows for s in a.layers] == [1, 1, 0] and a.layers[2].nan == 1


def test_file_names_that_are_not_utf8_do_not_crash_any_report(tmp_path):
    _good(tmp_path)
    bad = os.fsdecode(b"data_\xff\xfe.pt")
    (tmp_path / bad).write_bytes(b"not a tensor file")
    (tmp_path / "new\nline.pt").write_bytes(b"not either")
    for fmt in ("terminal", "markdown", "junit", "github", "json"):
        out = tmp_path.parent / f"report-{fmt}"
        result = run_cli_gate(tmp_path, "--format", fmt, "--output", out)
        assert result.returncode == 1 and not result.stderr, (fmt, result.stderr)
        text = out.read_text(encoding="utf-8")
        if fmt != "json":
            assert "data_\\xff\\xfe.pt" in text and "new\\x0aline.pt" in text, fmt
    strict = run_cli_gate(tmp_path, env={"PYTHONIOENCODING": "ascii:strict"})
    assert strict.returncode == 1 and "data_\\xff\\xfe.pt" in strict.stdout and not strict.stderr
    import xml.dom.minidom

    xml.dom.minidom.parse(str(tmp_path.parent / "report-junit"))


def run_cli_gate(*args, env: dict | None = None):
    import subprocess
    import sys

    full = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent), **(env or {}))
    return subprocess.run([sys.executable, "-m", "compat.gate", *map(str, args), "--no-progress"],
                          capture_output=True, text=True, env=full, timeout=120, errors="backslashreplace")


def test_ignoring_readable_reports_an_unread_file_instead_of_crashing(tmp_path):
    _good(tmp_path)
    (tmp_path / "data_0.pt").write_bytes(b"not a tensor file")
    run = run_capped(tmp_path, "--ignore", "readable")
    assert run.returncode == 0, run.stderr
    (f,) = run.findings("data_0.pt")
    assert f["status"] == "ok" and f["message"].startswith("not checked")


def test_one_tensor_referenced_thousands_of_times_is_not_read_thousands_of_times(tmp_path):
    _good(tmp_path)
    layer = torch.randn(1000, 64)
    torch.save({"input_ids": torch.arange(1000), "hidden_states": [layer] * 2000,
                "loss_mask": torch.ones(1000, dtype=torch.long)}, tmp_path / "data_0.pt")
    run = run_capped(tmp_path, "--values", "--ignore", "layer_count", timeout=60)
    assert run.returncode == 1 and run.max_rss_mb < 1024, run.stderr
    (f,) = run.failing("data_0.pt")
    assert f["probe"] == "readable" and "referenced many times" in f["message"]
    assert [g["status"] for g in run.findings("good")] == ["ok"]
