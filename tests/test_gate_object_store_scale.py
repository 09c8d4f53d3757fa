"""The gate at scale on object storage (issue #23, items 5 and 6): files read by URL are recorded in ``--state``
by what their listing says (size and ETag, or size and modification time where the filesystem keeps no ETag), so
an interrupted run over S3 resumed reads only the rest, with no request for what it recorded, and an object
overwritten since is read again; and the same report comes from one process, ``--jobs 2`` workers and the loopback
S3 server read by workers, on the good and the hostile datasets. Nothing leaves loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from compat.gate import mapstep  # noqa: E402
from compat.gate.discover import discover  # noqa: E402
from compat.gate.filestep import ReadHints, check_file  # noqa: E402
from compat.gate.options import GateOptions  # noqa: E402
from compat.gate.read import source  # noqa: E402
from compat.gate.runner import run_gate  # noqa: E402

from .gate_files import layered, write_speculators, write_vllm  # noqa: E402
from .object_store import Proxy, S3Server, storage_options  # noqa: E402
from .test_gate_object_store import good_dataset, hostile_dataset, report, same  # noqa: E402
from .test_gate_parallel import Interrupted, stop_after  # noqa: E402

H = 64


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch):
    monkeypatch.setattr(source, "BACKOFF", 0.01)


@pytest.fixture
def counted(monkeypatch):
    """Batches of three; the files this process reads (``check_file``), in order."""
    monkeypatch.setattr(mapstep, "MAX_BATCH_FILES", 3)
    read: list[str] = []
    real = mapstep.check_file
    monkeypatch.setattr(mapstep, "check_file", lambda *a: read.append(a[0]) or real(*a))
    return read


def _records(state: Path) -> list[dict]:
    return [json.loads(line) for line in state.read_text().splitlines()[1:]]


def _without_state(data: dict) -> dict:
    data["summary"].pop("reused")
    data["notes"] = [n for n in data["notes"] if "state file" not in n]
    return data


def _keys_requested(proxy: Proxy) -> set[str]:
    """The object keys a request named (GET of bytes or HEAD), listings apart."""
    return {path.split("?")[0] for method, path, _, _ in proxy.log if method in ("GET", "HEAD") and "?" not in path}


def test_an_interrupted_run_over_s3_resumed_reads_only_the_rest_and_an_overwritten_object_again(
        s3, tmp_path, counted):
    local = tmp_path / "d"
    for i in range(6):
        write_vllm(local / f"hs_{i}.safetensors", torch.arange(16), layered(16, H, 4, seed=i))
        write_speculators(local / f"data_{i}.pt", torch.arange(16), layered(16, H, 4, seed=10 + i))
    url = s3.upload(local, "resume", "ds")
    state = tmp_path / "state.jsonl"
    proxy = Proxy(s3.endpoint)
    options = GateOptions(paths=(url,), hidden_size=H, values=True, state=state,
                          storage_options=storage_options(proxy.endpoint))
    try:
        whole = report([url], values=True, storage_options=storage_options(proxy.endpoint))
        with pytest.raises(Interrupted):
            run_gate(options, stop_after(5))
        recorded = _records(state)
        assert 0 < len(recorded) < 12, recorded  # the batches finished before the stop
        for record in recorded:  # each stamped by its listed ETag, as S3 itself gives it
            key = record["path"].removeprefix("s3://resume/")
            head = s3.client.head_object(Bucket="resume", Key=key)
            assert record["etag"] == head["ETag"] and record["size"] == head["ContentLength"], record
        counted.clear()
        proxy.log.clear()
        resumed = report([url], values=True, state=state, storage_options=storage_options(proxy.endpoint))
        done = {r["path"] for r in recorded}
        everything = {f"{url}/{p.name}" for p in local.iterdir()}
        assert sorted(counted) == sorted(everything - done)  # only the rest read
        assert not {f"/resume/ds/{p.rsplit('/', 1)[1]}" for p in done} & _keys_requested(proxy)  # not even a HEAD
        assert resumed["summary"]["reused"] == len(recorded)
        assert json.dumps(_without_state(resumed), sort_keys=True) == json.dumps(_without_state(whole),
                                                                                 sort_keys=True)
        assert len(_records(state)) == 12  # every file recorded now
        # One recorded object overwritten with other bytes of the same size: a new ETag, read again.
        nan = layered(16, H, 4, seed=3)
        nan[1][2, 5] = float("nan")
        changed = local / "hs_3.safetensors"
        size = changed.stat().st_size
        write_vllm(changed, torch.arange(16), nan)
        assert changed.stat().st_size == size
        s3.client.put_object(Bucket="resume", Key="ds/hs_3.safetensors", Body=changed.read_bytes())
        counted.clear()
        again = run_gate(options)
    finally:
        proxy.stop()
    assert counted == [f"{url}/hs_3.safetensors"] and again.summary.reused == 11
    assert [(f.symbol, f.check) for f in again.failing()] == [("hs_3.safetensors", "finite")]


def test_a_memory_url_is_recorded_by_size_and_time_and_read_again_when_rewritten(tmp_path, counted):
    """No ETag in fsspec's memory filesystem: its time stands in, the same whether the file was listed under its
    directory or looked up alone, so a state written by one run serves the other."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(4):
        path = write_vllm(tmp_path / f"hs_{i}.safetensors", torch.arange(8), layered(8, H, 3, seed=i))
        fs.pipe(f"/stamps/hs_{i}.safetensors", path.read_bytes())
    try:
        one = "memory://stamps/hs_1.safetensors"
        assert discover(("memory://stamps",)).stamps[one] == discover((one,)).stamps[one]
        state = tmp_path / "state.jsonl"
        options = GateOptions(paths=("memory://stamps",), hidden_size=H, state=state)
        assert run_gate(options).exit_code == 0 and len(counted) == 4
        records = _records(state)
        assert all(r["etag"] is None and r["mtime_ns"] > 0 for r in records), records
        counted.clear()
        assert run_gate(options).summary.reused == 4 and counted == []
        fs.pipe("/stamps/hs_2.safetensors", (tmp_path / "hs_2.safetensors").read_bytes()[:100])  # rewritten, cut
        again = run_gate(options)
        assert counted == ["memory://stamps/hs_2.safetensors"] and again.summary.reused == 3
        assert [f.symbol for f in again.failing()] == ["hs_2.safetensors"]
        counted.clear()
        alone = run_gate(GateOptions(paths=(one,), hidden_size=H, state=tmp_path / "alone.jsonl"))
        assert alone.exit_code == 0 and counted == [one]
    finally:
        fs.rm("/stamps", recursive=True)


def test_listed_stamps_prefer_the_etag_then_a_time_of_any_shape():
    from datetime import UTC, datetime

    when = datetime(2026, 12, 2, 10, 35, 12, 777632, tzinfo=UTC)
    assert source.listed_stamp({"size": 5, "ETag": '"abc"', "LastModified": when}) == (5, 0, '"abc"')
    assert source.listed_stamp({"size": 5, "etag": "x", "updated": "2026-12-02T10:35:12Z"}) == (5, 0, "x")
    as_float = source.listed_stamp({"size": 5, "created": when.timestamp()})
    assert as_float == source.listed_stamp({"size": 5, "created": when}) == (5, 1796207712777632000, None)
    assert source.listed_stamp({"size": 5, "updated": "2026-12-02T10:35:12.777632+00:00"}) == as_float
    assert source.listed_stamp({"size": 5}) is None and source.listed_stamp({"size": 5, "mtime": "soon"}) is None


def test_a_worker_looks_a_file_up_once_however_often_its_readers_open_it(s3, tmp_path):
    """A worker process has no listing cached: each file costs one lookup (a HEAD), not one per reader (header,
    zip directory, values)."""
    write_speculators(tmp_path / "data_0.pt", torch.arange(16), layered(16, H, 4))
    write_vllm(tmp_path / "hs_0.safetensors", torch.arange(16), layered(16, H, 4))
    url = s3.upload(tmp_path, "lookups", "ds")
    proxy = Proxy(s3.endpoint)  # a new endpoint: a filesystem of its own, nothing cached
    source.configure(dict(storage_options(proxy.endpoint)))
    try:
        for name in ("data_0.pt", "hs_0.safetensors"):
            proxy.log.clear()
            result = check_file(f"{url}/{name}", False, ReadHints(None, H, 4, values=True))
            assert result.view.failure is None and result.values is not None and result.values.bytes_read > 0
            heads = [path for method, path, _, _ in proxy.log if method == "HEAD"]
            assert heads == [f"/lookups/ds/{name}"], proxy.log
    finally:
        source.configure({})
        proxy.stop()


@pytest.mark.parametrize("name", ["good", "hostile"])
def test_one_process_two_workers_and_s3_read_by_workers_give_the_same_report(s3, tmp_path, monkeypatch, name):
    """The acceptance of items 5 and 6: the local one-process report is the report of ``--jobs 2`` on disk and of
    ``--jobs 2`` over S3 (workers given the storage options), hostile files included."""
    local = (good_dataset if name == "good" else hostile_dataset)(tmp_path / name)
    url = s3.upload(local, "accept", name)
    monkeypatch.setattr(mapstep, "WORKER_START_SECONDS", 0.0)
    monkeypatch.setattr(mapstep, "MAX_BATCH_FILES", 4)
    used = []
    real = mapstep.run_batches
    monkeypatch.setattr(mapstep, "run_batches", lambda b, h, jobs, done: used.append(jobs) or real(b, h, jobs, done))
    one = report([local], values=True)
    two = report([local], values=True, jobs=2)
    remote = report([url], values=True, jobs=2, storage_options=storage_options(s3.endpoint))
    assert used == [2, 2]  # both --jobs 2 runs read in workers
    assert one["summary"]["broken"] > 0 and one["summary"]["ok"] > 0
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    same(one, remote, local, url)
