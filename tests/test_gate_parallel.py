"""The gate as map and reduce (issue #23): the per-file step in worker processes (``--jobs``) and kept in a state
file (``--state``) gives the report a single process gives, on datasets with faults of every phase and hostile
files; a worker that dies loses no file and counts none twice; an interrupted run resumed reads only the rest."""

from __future__ import annotations

import json
import os
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pytest

from compat.gate import GateOptions, mapstep, run_gate
from compat.gate.cli import main
from compat.gate.filejson import decode_result, encode_result
from compat.gate.filestep import ReadHints, check_file
from compat.gate.read.layouts import Layout
from compat.gate.state import FORMAT
from compat.gate.workers import CRASHED, TEST_EXIT, TEST_EXIT_MARKER, _Worker

from .gate_files import layered, write_data_config, write_eagle, write_speculators, write_vllm
from .test_gate_hostile_torch import Storage, Tensor, deflated_zeros, pickled, stored, zip_bytes

torch = pytest.importorskip("torch")

H = 32


@pytest.fixture
def pool(monkeypatch):
    """Workers for any run of at least two files, in batches of three; counts the runs that used them."""
    monkeypatch.setattr(mapstep, "WORKER_START_SECONDS", 0.0)
    monkeypatch.setattr(mapstep, "MAX_BATCH_FILES", 3)
    used = []
    real = mapstep.run_batches

    def counted(batches, hints, jobs, done):
        used.append((len(batches), jobs))
        return real(batches, hints, jobs, done)

    monkeypatch.setattr(mapstep, "run_batches", counted)
    return used


def _ids(n: int, seed: int):
    return torch.randint(3, 1000, (n,), generator=torch.Generator().manual_seed(seed))


def mixed(root: Path) -> Path:
    """Two datasets side by side with a fault of every phase, and hostile files."""
    spec = root / "spec"
    for i in range(8):
        write_speculators(spec / f"data_{i}.pt", _ids(24, i), layered(24, H, 3, seed=i))
    write_speculators(spec / "data_8.pt", _ids(24, 8), layered(20, H, 3, seed=8))  # rows != tokens
    nan = layered(24, H, 3, torch.float32, seed=9)
    nan[1][5, 3] = float("nan")
    write_speculators(spec / "data_9.pt", _ids(24, 9), nan)
    write_speculators(spec / "data_10.pt", _ids(24, 10), [2 * h for h in layered(24, H, 3, seed=10)])  # scaled
    write_speculators(spec / "data_11.pt", _ids(24, 11), layered(24, H, 3, seed=11),
                      torch.zeros(24, dtype=torch.long))  # a mask of zeros
    torch.save([{"input_ids": _ids(16, 20 + k), "hidden_states": layered(16, H, 3, seed=20 + k),
                 "loss_mask": torch.ones(16, dtype=torch.long)} for k in range(2)], spec / "data_12.pt")
    write_eagle(spec / "data_13.pt", _ids(24, 13), torch.randn(24, 3 * H).to(torch.bfloat16))  # misplaced layout
    write_data_config(spec, [1, 2, 3], H)
    vllm = root / "vllm"
    for i in range(5):
        write_vllm(vllm / f"hs_{i}.safetensors", _ids(12, 30 + i), layered(12, H, 3, torch.float32, seed=30 + i))
    from safetensors.torch import save_file

    save_file({"hidden_states": torch.randn(12, 3, H)}, str(vllm / "hs_5.safetensors"))  # no token_ids
    (vllm / "hs_6.safetensors").write_bytes((vllm / "hs_0.safetensors").read_bytes()[:40])  # cut short
    hostile = root / "hostile"
    hostile.mkdir()
    (hostile / "data_0.pt").write_bytes(b"not a tensor file")
    head = pickled({"input_ids": Tensor(Storage("0", torch.LongStorage, 16), (16,))})
    (hostile / "data_1.pt").write_bytes(zip_bytes([deflated_zeros("archive/data.pkl", 64, head),
                                                   stored("archive/data/0", bytes(128)),
                                                   stored("archive/version", b"3\n")]))
    one = {"input_ids": torch.arange(8), "hidden_states": layered(8, H, 1) * 50,
           "loss_mask": torch.ones(8, dtype=torch.long)}
    torch.save([one] * 40, hostile / "data_2.pt")  # one sample shared 40 times
    os.mkfifo(hostile / "data_3.pt")
    (hostile / "loop").mkdir()
    os.symlink("..", hostile / "loop" / "up")
    (hostile / os.fsdecode(b"data_\xff.pt")).write_bytes((spec / "data_0.pt").read_bytes())
    return root


def report(options: GateOptions, progress=None) -> dict:
    """The JSON report without what differs from run to run (its time)."""
    data = run_gate(options, progress).as_json()
    data["summary"].pop("seconds")
    return data


def same(a: dict, b: dict) -> bool:
    # as text: a NaN statistic is equal to itself only that way
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("values", [False, True])
def test_one_process_and_two_workers_give_the_same_report(tmp_path, pool, values):
    root = mixed(tmp_path)
    one = report(GateOptions(paths=(root,), values=values))
    two = report(GateOptions(paths=(root,), values=values, jobs=2))
    assert pool and pool[0][0] > 6 and pool[0][1] == 2, pool  # the workers read it, in many batches
    assert same(one, two)
    failing = {f["symbol"] for f in one["findings"] if f["status"] == "broken"}
    # the reading, header, value and dataset phases all found something, and so did the hostile files
    for name in ("data_8.pt", "hs_5.safetensors", "hs_6.safetensors", "data_0.pt", "data_1.pt", "data_2.pt",
                 "data_3.pt", "up", "data_13.pt"):
        assert any(s.endswith(name) for s in failing), (name, failing)
    if values:
        assert {"spec/data_9.pt", "spec/data_10.pt", "spec/data_11.pt"} <= failing, failing
        assert one["consistency"]


def test_a_worker_killed_once_loses_no_file_and_counts_none_twice(tmp_path, pool, monkeypatch):
    root = mixed(tmp_path)
    one = report(GateOptions(paths=(root,), values=True))
    monkeypatch.setenv(TEST_EXIT, "data_5.pt")
    monkeypatch.setenv(TEST_EXIT_MARKER, str(tmp_path / "exited"))
    two = report(GateOptions(paths=(root,), values=True, jobs=2))
    assert (tmp_path / "exited").exists()  # a worker did exit, on that file
    assert same(one, two)


def test_a_file_that_ends_a_worker_twice_is_its_finding_and_the_run_goes_on(tmp_path, pool, monkeypatch):
    for i in range(10):
        write_vllm(tmp_path / f"hs_{i}.safetensors", torch.arange(6), layered(6, H, 3, seed=i))
    one = report(GateOptions(paths=(tmp_path,)))
    monkeypatch.setenv(TEST_EXIT, "hs_4.safetensors")
    two = report(GateOptions(paths=(tmp_path,), jobs=2))
    assert two["summary"]["files"] == one["summary"]["files"] == 10
    (crash,) = [f for f in two["findings"] if f["symbol"] == "hs_4.safetensors"]
    assert crash["probe"] == "readable" and crash["status"] == "broken", crash
    assert "ended the gate's worker process twice (exit status 86)" in crash["message"]
    assert crash["message"].endswith(f"[{CRASHED}]")
    others = [f for f in two["findings"] if f["symbol"] != "hs_4.safetensors"]
    assert others == [f for f in one["findings"] if f["symbol"] != "hs_4.safetensors"]
    assert len(others) == 9 and all(f["status"] == "ok" for f in others)


def test_every_per_file_result_comes_back_from_json_unchanged(tmp_path):
    root = mixed(tmp_path)
    hints = ReadHints(None, H, 3, values=True, token_range=True)
    paths = [str(p) for p in sorted(root.rglob("*.pt")) + sorted(root.rglob("*.safetensors"))]
    results = [check_file(p, False, hints) for p in paths]
    assert any(r.values and r.values.samples and r.values.samples[0].prefix for r in results)
    assert any(r.view.failure for r in results) and any(s.faults for r in results for s in r.view.samples)
    for path, result in zip(paths, results):
        text = json.dumps(encode_result(result))
        back = decode_result(path, json.loads(text))
        assert back.view == result.view
        assert json.dumps(encode_result(back)) == text
        if result.values is not None:
            for a, b in zip(result.values.samples, back.values.samples):
                assert a.view is not None and b.view in back.view.samples
                if a.prefix is not None:
                    assert a.prefix.ids == b.prefix.ids and np.array_equal(a.prefix.rows, b.prefix.rows)
    forced = check_file(paths[0], False, ReadHints(Layout.EAGLE))
    assert decode_result(paths[0], json.loads(json.dumps(encode_result(forced)))) == forced


class Interrupted(Exception):
    pass


def stop_after(files: int, stopped: list[int] | None = None):
    """A progress callback that interrupts a run (``Interrupted``) once ``files`` files are done; ``stopped`` gets
    how many were done then (a batch's files are done together, so it may be more)."""
    def progress(done: int, total: int) -> None:
        if done >= files:
            if stopped is not None:
                stopped.append(done)
            raise Interrupted
    return progress


def _records(state: Path) -> int:
    return len(state.read_text().splitlines()) - 1


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_interrupted_run_resumed_reads_only_the_rest(tmp_path, pool, monkeypatch, jobs):
    root = mixed(tmp_path / "data")
    state = tmp_path / "state.jsonl"
    whole = report(GateOptions(paths=(root,), values=True))
    options = GateOptions(paths=(root,), values=True, jobs=jobs, state=state)
    stopped: list[int] = []
    with pytest.raises(Interrupted):
        run_gate(options, stop_after(9, stopped))
    recorded = _records(state)
    # the regular files of the batches finished before the stop: 9 files or more (a batch past the 9th is done
    # whole), less any that is no regular file
    assert stopped[0] >= 9 and 3 <= recorded <= stopped[0], (recorded, stopped)
    header = json.loads(state.read_text().splitlines()[0])
    assert header["format"] == FORMAT and header["hints"]["values"] is True
    read = []
    real = mapstep.check_file
    monkeypatch.setattr(mapstep, "check_file", lambda *a: read.append(a[0]) or real(*a))
    resumed = report(options)
    loops = 1  # the symlink loop is no file read
    unrecorded = whole["summary"]["files"] - loops - recorded
    assert resumed["summary"]["reused"] == recorded and whole["summary"]["reused"] == 0
    if jobs == 1:
        assert len(read) == unrecorded, read
    assert any("taken from the state file" in n for n in resumed["notes"])
    for r in (resumed, whole):
        r["summary"].pop("reused")
        r["notes"] = [n for n in r["notes"] if "state file" not in n]
    assert same(resumed, whole)
    # the FIFO is no regular file: never recorded, read each time; every other file is recorded now
    assert _records(state) == whole["summary"]["files"] - loops - 1


def test_a_changed_file_is_read_again_and_a_removed_one_dropped(tmp_path, monkeypatch):
    for i in range(6):
        write_vllm(tmp_path / "d" / f"hs_{i}.safetensors", torch.arange(6), layered(6, H, 3, seed=i))
    state = tmp_path / "state.jsonl"
    options = GateOptions(paths=(tmp_path / "d",), state=state)
    assert run_gate(options).exit_code == 0 and _records(state) == 6
    changed = tmp_path / "d" / "hs_2.safetensors"
    before = changed.stat()
    write_vllm(changed, torch.arange(6), layered(9, H, 3))  # 9 rows for 6 tokens
    os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
    (tmp_path / "d" / "hs_5.safetensors").unlink()
    read = []
    real = mapstep.check_file
    monkeypatch.setattr(mapstep, "check_file", lambda *a: read.append(a[0]) or real(*a))
    again = run_gate(options)
    assert read == [str(changed)] and again.summary.reused == 4 and again.summary.files == 5
    assert [f.symbol for f in again.failing()] == ["hs_2.safetensors"]
    assert _records(state) == 5  # the removed file's record dropped, the changed one's replaced


def test_a_last_line_cut_short_is_read_again_with_a_note(tmp_path, monkeypatch):
    for i in range(4):
        write_vllm(tmp_path / "d" / f"hs_{i}.safetensors", torch.arange(6), layered(6, H, 3, seed=i))
    state = tmp_path / "state.jsonl"
    options = GateOptions(paths=(tmp_path / "d",), state=state)
    run_gate(options)
    state.write_text(state.read_text()[:-25])  # killed while writing the last record
    read = []
    real = mapstep.check_file
    monkeypatch.setattr(mapstep, "check_file", lambda *a: read.append(a[0]) or real(*a))
    again = run_gate(options)
    assert len(read) == 1 and again.summary.reused == 3 and again.exit_code == 0
    assert any("cut short" in n for n in again.notes), again.notes
    assert _records(state) == 4 and all(json.loads(line) for line in state.read_text().splitlines())


def test_a_state_from_other_options_or_no_state_file_is_refused(tmp_path, capsys):
    write_vllm(tmp_path / "d" / "hs_0.safetensors", torch.arange(6), layered(6, H, 3))
    state = tmp_path / "state.jsonl"
    assert main([str(tmp_path / "d"), "--state", str(state), "--no-progress"]) == 0
    capsys.readouterr()
    kept = state.read_text()
    for flags in (["--values"], ["--hidden-size", "64"], ["--layout", "eagle"]):
        assert main([str(tmp_path / "d"), "--state", str(state), "--no-progress", *flags]) == 2, flags
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "written with other" in err and str(state) in err, err
    assert state.read_text() == kept  # a refused state is left as it was
    other = tmp_path / "other.jsonl"
    other.write_text('{"some": "file"}\n{"of": "lines"}\n')
    assert main([str(tmp_path / "d"), "--state", str(other), "--no-progress"]) == 2
    assert "not a gate state file" in capsys.readouterr().err
    # the first format's records leave out a layer's tiny rows: what they say of them cannot be taken
    older = tmp_path / "older.jsonl"
    lines = kept.splitlines(keepends=True)
    older.write_text(lines[0].replace(FORMAT, "compat.gate.state/1") + "".join(lines[1:]))
    assert main([str(tmp_path / "d"), "--state", str(older), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "older format" in err and "compat.gate.state/1" in err, err
    assert main([str(tmp_path / "d"), "--jobs", "0"]) == 2


def test_a_state_file_nested_deep_or_no_file_is_one_clear_error_or_read_again(tmp_path, capsys):
    """A 100k-deep line made Python's JSON reader raise RecursionError (an internal error); a FIFO as the state
    file hung the run until killed."""
    write_vllm(tmp_path / "d" / "hs_0.safetensors", torch.arange(6), layered(6, H, 3))
    write_vllm(tmp_path / "d" / "hs_1.safetensors", torch.arange(6), layered(6, H, 3, seed=1))
    deep = "[" * 100_000 + "]" * 100_000
    header = tmp_path / "header.jsonl"
    header.write_text(deep + "\n" + deep + "\n")
    assert main([str(tmp_path / "d"), "--state", str(header), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not a gate state file" in err, err
    state = tmp_path / "state.jsonl"
    assert main([str(tmp_path / "d"), "--state", str(state), "--no-progress"]) == 0
    first, *records = state.read_text().splitlines()
    state.write_text("\n".join([first, records[0], deep]) + "\n")
    again = run_gate(GateOptions(paths=(tmp_path / "d",), state=state))
    assert again.exit_code == 0 and again.summary.reused == 1, again.notes
    assert any("1 line(s) could not be read" in n for n in again.notes), again.notes
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert main([str(tmp_path / "d"), "--state", str(fifo), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not a regular file" in err, err


def test_a_batch_given_to_a_worker_that_has_just_died_is_kept_to_be_given_again():
    """A worker holds a batch ahead; when it dies on that one after answering the one before, the next batch the
    gate gives it finds its pipe closed: that batch is held with the rest, for the death to give them again."""
    worker = _Worker(get_context("spawn"), ReadHints(), 1)
    worker.process.kill()
    worker.process.join()
    batch = ([(0, "hs_0.safetensors", True)], 0)
    worker.give(batch)
    assert list(worker.held) == [batch]
    assert worker.answer() == (None, True)
    worker.stop()
