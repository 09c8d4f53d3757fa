"""The gate's per-file step as Ray tasks (``--ray``, issue #23 item 4), on a local Ray cluster of three worker
processes started here: the report is the single process's, on datasets with faults of every phase and hostile
files, local or on a loopback S3 server; a worker killed mid-run loses no file and counts none twice; a file that
kills its worker every time is its own finding and the run goes on; the command line connects to a cluster by
address, and says in one line when Ray is missing or no cluster answers. Needs ray (the ``ray`` extra), not vLLM
and no network."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")

# A local cluster starts in 7 to 9 s and the module takes about 75 s: beyond the offline layer's 2 minutes.
pytestmark = pytest.mark.slow

from compat.gate import GateOptions, mapstep, raytasks  # noqa: E402
from compat.gate.cli import main  # noqa: E402
from compat.gate.workers import CRASHED, TEST_EXIT, TEST_EXIT_MARKER  # noqa: E402

from .gate_files import layered, write_vllm  # noqa: E402
from .test_gate_parallel import H, mixed, report, same  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of three CPUs (three worker processes at once) for the module; its address."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=3, include_dashboard=False, object_store_memory=200 << 20, logging_level=logging.WARNING)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture
def spy(monkeypatch):
    """What went to Ray (the batches of each run) and what the gate's own process read itself (none should)."""
    sent, read_here = [], []
    real_tasks, real_check = raytasks.run_tasks, mapstep.check_file

    def run_tasks(batches, hints, cpus, done):
        sent.append((len(batches), cpus))
        return real_tasks(batches, hints, cpus, done)

    monkeypatch.setattr(raytasks, "run_tasks", run_tasks)
    monkeypatch.setattr(mapstep, "check_file", lambda *a: read_here.append(a[0]) or real_check(*a))
    return sent, read_here


class Counted:
    """A progress callback that keeps every (done, total) it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def each_file_once(self, files: int) -> bool:
        done = [d for d, _ in self.calls]
        return done == sorted(set(done)) and done[-1] == files and {t for _, t in self.calls} == {files}


@pytest.mark.parametrize("values", [False, True], ids=["header", "values"])
def test_a_ray_cluster_gives_the_report_one_process_gives(tmp_path, cluster, spy, values):
    root = mixed(tmp_path)
    one = report(GateOptions(paths=(root,), values=values))
    sent, read_here = spy
    read_here.clear()
    progress = Counted()
    on_ray = report(GateOptions(paths=(root,), values=values, ray=""), progress)
    assert sent and sent[0][0] > 6 and sent[0][1] == 3, sent  # many batches, cut for the cluster's 3 CPUs
    assert read_here == []  # every file was read by a task
    assert same(one, on_ray)
    assert progress.each_file_once(one["summary"]["files"] - 1)  # each file read once (the symlink loop is none)
    failing = {f["symbol"] for f in one["findings"] if f["status"] == "broken"}
    for name in ("data_8.pt", "hs_5.safetensors", "hs_6.safetensors", "data_0.pt", "data_1.pt", "data_2.pt",
                 "data_3.pt", "up", "data_13.pt"):  # every phase found something, and so did the hostile files
        assert any(s.endswith(name) for s in failing), (name, failing)
    if values:
        assert {"spec/data_9.pt", "spec/data_10.pt", "spec/data_11.pt"} <= failing and one["consistency"]


def test_a_ray_worker_killed_mid_run_loses_no_file_and_counts_none_twice(tmp_path, cluster, monkeypatch):
    root = mixed(tmp_path / "data")
    one = report(GateOptions(paths=(root,), values=True))
    monkeypatch.setenv(TEST_EXIT, "data_5.pt")
    monkeypatch.setenv(TEST_EXIT_MARKER, str(tmp_path / "exited"))
    progress = Counted()
    killed = report(GateOptions(paths=(root,), values=True, ray=""), progress)
    assert (tmp_path / "exited").exists()  # a Ray worker did exit, on that file
    assert progress.each_file_once(one["summary"]["files"] - 1)
    assert same(one, killed)


def test_a_file_that_kills_its_ray_worker_every_time_is_its_finding_and_the_run_goes_on(tmp_path, cluster,
                                                                                          monkeypatch, spy):
    for i in range(48):  # two files a batch on 3 CPUs: the file that kills shares its batch
        write_vllm(tmp_path / f"hs_{i}.safetensors", torch.arange(6), layered(6, H, 3, seed=i))
    one = report(GateOptions(paths=(tmp_path,)))
    monkeypatch.setenv(TEST_EXIT, "hs_20.safetensors")
    progress = Counted()
    crashed = report(GateOptions(paths=(tmp_path,), ray=""), progress)
    sent, _ = spy
    assert sent == [(24, 3)], sent
    assert crashed["summary"]["files"] == one["summary"]["files"] == 48 and progress.each_file_once(48)
    (crash,) = [f for f in crashed["findings"] if f["symbol"] == "hs_20.safetensors"]
    assert crash["probe"] == "readable" and crash["status"] == "broken", crash
    assert "ended the gate's worker process twice (Ray: WorkerCrashedError)" in crash["message"], crash
    assert crash["message"].endswith(f"[{CRASHED}]")
    others = [f for f in crashed["findings"] if f["symbol"] != "hs_20.safetensors"]
    # its batch-mate (hs_21) was checked again alone, and passed like every other file
    assert others == [f for f in one["findings"] if f["symbol"] != "hs_20.safetensors"]
    assert len(others) == 47 and all(f["status"] == "ok" for f in others)


def _json(argv: list[str], out: Path) -> dict:
    assert main([*argv, "--format", "json", "--no-progress", "--output", str(out)]) == 1
    data = json.loads(out.read_text())
    data["summary"].pop("seconds")
    return data


def test_the_command_line_runs_on_a_cluster_by_address(tmp_path, cluster, spy):
    root = mixed(tmp_path / "data")
    one = _json([str(root), "--jobs", "1"], tmp_path / "one.json")
    sent, _ = spy
    assert not sent
    # --jobs does not apply to --ray: the cluster's CPUs decide; --ray alone (after the paths) takes this process's
    # connection
    here = _json([str(root), "--jobs", "1", "--ray"], tmp_path / "here.json")
    assert sent and sent[0][1] == 3 and same(one, here)
    # another process connects by the cluster's address, starts its own tasks there, and writes the same report
    child = subprocess.run([sys.executable, "-m", "compat.gate", str(root), "--ray", cluster, "--format", "json",
                            "--no-progress", "--output", str(tmp_path / "child.json")], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 1, child.stderr
    there = json.loads((tmp_path / "child.json").read_text())
    there["summary"].pop("seconds")
    assert same(one, there)


def test_no_ray_or_no_cluster_is_one_line_and_exit_2(tmp_path, cluster, monkeypatch, capsys):
    write_vllm(tmp_path / "d" / "hs_0.safetensors", torch.arange(6), layered(6, H, 3))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("ray") for r in extras["ray"]) and any(r.startswith("ray") for r in extras["test"])
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "ray", None)  # as if not installed
        assert main([str(tmp_path / "d"), "--ray", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--ray needs Ray" in err and "pip install 'vllm-compat[ray]'" in err, err
    # a path right after --ray would be taken for its address
    assert main(["--ray", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is not a Ray address" in err and "after the paths" in err, err
    # an address nothing answers at (a port just freed): Ray would wait minutes; the gate says so at once
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for args, extra in (([f"127.0.0.1:{port}"], {}), ([], {"RAY_ADDRESS": f"127.0.0.1:{port}"})):
        child = subprocess.run([sys.executable, "-m", "compat.gate", str(tmp_path / "d"), "--ray", *args,
                                "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                               env={**env, **extra})
        err = child.stderr.strip()
        assert child.returncode == 2 and "\n" not in err, err
        assert f"no Ray cluster answers at 127.0.0.1:{port} (ConnectionRefusedError" in err, err


def test_ray_tasks_read_from_a_loopback_s3_server(tmp_path, cluster):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from .object_store import S3Server, storage_options

    root = mixed(tmp_path)
    server = S3Server()
    try:
        server.client.create_bucket(Bucket="data")
        for path in sorted(root.rglob("*")):  # what an object store can hold: no FIFO, link or undecodable name
            if path.is_file() and not path.is_symlink() and "\udcff" not in path.name:
                server.client.put_object(Bucket="data", Key=f"mixed/{path.relative_to(root).as_posix()}",
                                         Body=path.read_bytes())
        options = {"paths": ("s3://data/mixed",), "storage_options": storage_options(server.endpoint)}
        one = report(GateOptions(**options, values=True))
        on_ray = report(GateOptions(**options, values=True, ray=""))
    finally:
        server.stop()
    assert one["summary"]["files"] >= 20 and one["summary"]["broken"] > 0
    assert same(one, on_ray)

