"""The gate on object storage (issue #23, item 3): the same datasets, hostile ones included, uploaded to an
S3-compatible server started here on loopback (moto's server mode) and checked by URL must get the same report as
on local disk, apart from where they lie and how long it took; header mode reads a few byte ranges per file;
``--values`` reads tensors in bounded chunks; a server that fails requests (HTTP 503, connection resets) changes
nothing in the report, and one that keeps failing makes a storage-error finding, never a damaged-data one.
``memory://`` (fsspec's in-memory filesystem) runs the same comparison without a server. Nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from compat.errors import CompatError  # noqa: E402
from compat.gate import value_stats  # noqa: E402
from compat.gate.options import GateOptions  # noqa: E402
from compat.gate.read import source  # noqa: E402
from compat.gate.runner import run_gate  # noqa: E402
from compat.report.json_report import render  # noqa: E402

from .gate_files import layered, write_data_config, write_eagle, write_speculators, write_vllm  # noqa: E402
from .object_store import Proxy, S3Server, environment, storage_options  # noqa: E402
from .test_gate_hostile_torch import (  # noqa: E402
    Storage,
    Tensor,
    deflated_zeros,
    patched,
    pickled,
    rezipped,
    sample,
    stored,
    zip_bytes,
)
from .test_gate_safetensors_spec import HOSTILE, write  # noqa: E402

H = 64
ROOT = Path(__file__).resolve().parent.parent


def good_dataset(directory: Path) -> Path:
    """Speculators samples (one with a NaN row) beside a data_config.json, vLLM safetensors and an EAGLE-3
    file in directories of their own, and what a walk skips (a dot-file, a dot-directory, other suffixes)."""
    for i in range(10):
        layers = layered(24 + i, H, 4, seed=i)
        if i == 3:
            layers[2][5, 7] = float("nan")
        write_speculators(directory / f"data_{i}.pt", torch.arange(24 + i), layers)
        write_vllm(directory / "vllm" / f"hs_{i}.safetensors", torch.arange(24 + i), layered(24 + i, H, 4, seed=i))
    write_data_config(directory, [1, 2, 3, 4], H)
    write_eagle(directory / "eagle" / "sample_0.pt", torch.arange(20), torch.cat(layered(20, H, 3), dim=1),
                target=layered(20, H, 1)[0])
    write_speculators(directory / ".data_99.pt.partial.pt", torch.arange(4), layered(4, H, 4))
    write_speculators(directory / ".cache" / "data_5.pt", torch.arange(4), layered(4, H, 4))
    (directory / "notes.txt").write_text("not data")
    return directory


def hostile_dataset(directory: Path) -> Path:
    """The hostile files of the safetensors and torch.save attack tests, and plain damage, beside a good file."""
    directory.mkdir(parents=True, exist_ok=True)
    write_speculators(directory / "good.pt", torch.arange(16), layered(16, H, 4))
    for param in HOSTILE:
        header, data, length, _ = param.values
        write(directory / f"{param.id}.safetensors", header, data, length)
    head = pickled({"input_ids": Tensor(Storage("0", torch.LongStorage, 16), (16,))})
    (directory / "pickle_bomb.pt").write_bytes(zip_bytes([
        deflated_zeros("archive/data.pkl", 256, head), stored("archive/data/0", bytes(128)),
        stored("archive/version", b"3\n")]))
    with zipfile.ZipFile(directory / "good.pt") as good:
        (directory / "unreferenced_bomb.pt").write_bytes(zip_bytes(
            [stored(i.filename, good.read(i)) for i in good.infolist()] + [deflated_zeros("good/extra", 256)]))
    for name, member, fields in (("pkl_2gib", "data.pkl", {"compressed": 2 << 30, "size": 2 << 30}),
                                 ("storage_larger", "data/1", {"compressed": 2048 + 64, "size": 2048 + 64})):
        path = write_speculators(directory / f"{name}.pt", torch.arange(16), layered(16, H, 4))
        patched(path, f"{name}/{member}", fields)
    one = sample(8, 1)
    torch.save([{**one, "hidden_states": one["hidden_states"] * 1000}] * 500, directory / "shared_sample.pt")
    torch.save(sample(24, 4), directory / "plain.pt")
    rezipped(directory / "plain.pt", directory / "deflated.pt")
    (directory / "plain.pt").unlink()
    torch.save(sample(16), directory / "legacy.pt", _use_new_zipfile_serialization=False)
    torch.save({**sample(16), "meta": argparse.Namespace(run=1)}, directory / "foreign_global.pt")
    whole = (directory / "good.pt").read_bytes()
    (directory / "truncated.pt").write_bytes(whole[:len(whole) // 2])
    (directory / "text.pt").write_text("hidden states go here\n")
    (directory / "empty.safetensors").write_bytes(b"")
    return directory


def report(paths, hidden_size: int = H, **options) -> dict:
    """The JSON report of a run, without what differs between any two runs or places: the time it took, the
    paths given and their root (a data_config.json's location is compared apart)."""
    result = run_gate(GateOptions(paths=tuple(paths), hidden_size=hidden_size, **options))
    data = json.loads(render(result))
    data["summary"].pop("seconds")
    data.pop("paths")
    return data


def same(local: dict, remote: dict, local_root: Path, url: str) -> None:
    """Equal reports, the local root read as the URL (where the data_config.json was read from)."""
    assert remote.pop("source_root") == url and local.pop("source_root") == str(local_root)
    assert json.loads(json.dumps(local).replace(str(local_root), url)) == remote


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, s3):
    good = good_dataset(tmp_path_factory.mktemp("good"))
    hostile = hostile_dataset(tmp_path_factory.mktemp("hostile"))
    return {"good": (good, s3.upload(good, "data", "runs/good")),
            "hostile": (hostile, s3.upload(hostile, "data", "runs/hostile"))}


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch):
    monkeypatch.setattr(source, "BACKOFF", 0.01)


@pytest.mark.parametrize("name", ["good", "hostile"])
@pytest.mark.parametrize("values", [False, True], ids=["header", "values"])
def test_a_dataset_on_s3_gets_the_report_it_gets_on_disk(s3, datasets, name, values):
    local, url = datasets[name]
    proxy = Proxy(s3.endpoint)
    try:
        remote = report([url], values=values, storage_options=storage_options(proxy.endpoint))
    finally:
        proxy.stop()
    expected = report([local], values=values)
    assert expected["summary"]["broken"] > 0 and expected["summary"]["ok"] > 0  # the datasets test something
    same(expected, remote, local, url)
    assert proxy.object_bytes() > 0


def test_the_report_names_files_by_url_and_finds_the_data_config(s3, datasets):
    local, url = datasets["good"]
    result = run_gate(GateOptions(paths=(url,), storage_options=storage_options(s3.endpoint)))
    assert result.source_root == url and result.paths == (url,)
    assert any(note.endswith(f"{url}/data_config.json") for note in result.notes)
    symbols = [f.symbol for f in result.findings]
    assert "data_0.pt" in symbols and "vllm/hs_1.safetensors" in symbols and "eagle/sample_0.pt" in symbols
    assert not any(".cache" in s or "partial" in s or "notes" in s for s in symbols)
    assert symbols.index("data_2.pt") < symbols.index("data_10.pt") if "data_10.pt" in symbols else True
    # One file named by URL, and two directories: roots and relative names as for local paths.
    one = run_gate(GateOptions(paths=(f"{url}/vllm/hs_2.safetensors",), storage_options=storage_options(s3.endpoint)))
    assert one.source_root == f"{url}/vllm" and [f.symbol for f in one.findings] == ["hs_2.safetensors"]
    two = run_gate(GateOptions(paths=(f"{url}/vllm", f"{url}/eagle"), hidden_size=H,
                               storage_options=storage_options(s3.endpoint)))
    assert two.source_root == url and {f.symbol for f in two.findings} >= {"vllm/hs_0.safetensors",
                                                                             "eagle/sample_0.pt"}


def test_a_flaky_server_changes_nothing_in_the_report(s3, datasets):
    """Every fifth request fails, by turns with HTTP 503 and a reset connection: the client's retries and the
    gate's own mend them, and the report is the one a healthy server gives."""
    local, url = datasets["good"]
    proxy = Proxy(s3.endpoint, fail=lambda n, path: None if n % 5 else ("503" if n % 10 else "reset"))
    try:
        remote = report([url], values=True, storage_options=storage_options(proxy.endpoint))
    finally:
        proxy.stop()
    same(report([local], values=True), remote, local, url)
    kinds = {how for how, _ in proxy.failed}
    assert kinds == {"503", "reset"} and len(proxy.failed) >= 10, proxy.failed


def test_a_server_that_keeps_failing_one_file_is_a_storage_error_not_damage(s3, datasets, monkeypatch):
    monkeypatch.setattr(source, "ATTEMPTS", 2)
    local, url = datasets["good"]
    doomed = "/runs/good/data_4.pt"
    proxy = Proxy(s3.endpoint, fail=lambda n, path: "down" if path.startswith(f"/data{doomed}") else None)
    options = storage_options(proxy.endpoint, config_kwargs={"retries": {"max_attempts": 2}})
    try:
        for values in (False, True):
            remote = report([url], values=values, storage_options=options)
            expected = report([local], values=values)
            mine = [f for f in remote["findings"] if f["symbol"] == "data_4.pt"]
            assert [(f["probe"], f["status"]) for f in mine] == [("readable", "broken")], mine
            (finding,) = mine
            assert finding["message"].startswith("storage error: ") and "StorageError" in finding["message"]
            # What the server said: its message where the failed request was a GET, its status where it was a HEAD
            # (which carries no body: s3fs looks a file up by HEAD where its listing is not cached).
            said = ("The service is down", "Service Unavailable", "503")
            assert any(text in finding["message"] for text in said), finding["message"]
            assert "truncated" not in finding["message"] and "the storage failed" in finding["fix"]
            others = [f for f in remote["findings"] if f["symbol"] != "data_4.pt"]
            expected_others = [f for f in expected["findings"] if f["symbol"] != "data_4.pt"]
            assert json.loads(json.dumps(expected_others).replace(str(local), url)) == others
    finally:
        proxy.stop()
    assert any(doomed in path for _, path in proxy.failed)


def test_header_mode_reads_a_few_ranges_and_values_read_bounded_chunks(s3, tmp_path, monkeypatch):
    """Files of 1 MiB of states: header mode fetches under 5% of the dataset's bytes; --values fetches every
    tensor byte, none of it in a response larger than a chunk."""
    for i in range(4):
        write_speculators(tmp_path / f"data_{i}.pt", torch.arange(512), layered(512, 256, 4, seed=i))
        write_vllm(tmp_path / "vllm" / f"hs_{i}.safetensors", torch.arange(512), layered(512, 256, 4, seed=i))
    total = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    url = s3.upload(tmp_path, "sizes", "ds")
    proxy = Proxy(s3.endpoint)
    try:
        header = report([url], 256, storage_options=storage_options(proxy.endpoint))
        header_bytes = proxy.object_bytes()
        monkeypatch.setattr(value_stats, "CHUNK_BYTES", 128 << 10)
        proxy.log.clear()
        values = report([url], 256, values=True, storage_options=storage_options(proxy.endpoint))
    finally:
        proxy.stop()
    assert header["summary"]["ok"] == 8 and values["summary"]["ok"] == 8
    assert header_bytes < 0.05 * total, (header_bytes, total)
    tensor_bytes = values["summary"]["value_bytes"]
    assert tensor_bytes > 0.9 * total and proxy.object_bytes() >= tensor_bytes
    assert max(size for method, _, _, size in proxy.log if method == "GET") <= 128 << 10


def test_memory_urls_get_the_report_local_files_get(tmp_path):
    import fsspec

    local = hostile_dataset(good_dataset(tmp_path / "ds") / "hostile")
    fs = fsspec.filesystem("memory")
    base = local.parent
    for path in base.rglob("*"):
        if path.is_file():
            fs.pipe(f"/gate-test/{path.relative_to(base).as_posix()}", path.read_bytes())
    try:
        for values in (False, True):
            same(report([base], values=values), report(["memory://gate-test"], values=values), base,
                 "memory://gate-test")
    finally:
        fs.rm("/gate-test", recursive=True)


def test_the_command_line_takes_urls_storage_options_and_fsspec_configuration(s3, datasets, tmp_path):
    local, url = datasets["good"]
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    flags = [f"--storage-option={k}={json.dumps(v) if not isinstance(v, str) else v}"
             for k, v in storage_options(s3.endpoint)]
    run = subprocess.run([sys.executable, "-m", "compat.gate", url, *flags, "--hidden-size", str(H), "--format",
                          "json", "--output", str(out), "--no-progress"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 1, run.stderr
    data = json.loads(out.read_text())
    assert data["source_root"] == url and "testing" not in out.read_text()  # no secret in the report
    # The same through fsspec's and the storage's own environment variables, no flag.
    run = subprocess.run([sys.executable, "-m", "compat.gate", f"{url}/vllm", "--format", "json", "--no-progress"],
                         capture_output=True, text=True, env={**environment(s3.endpoint), "PYTHONPATH": str(ROOT)},
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["summary"]["files"] == 10


@pytest.mark.parametrize("target, phrase", [
    ("nosuch://bucket/x", "unknown storage protocol 'nosuch'"),
    ("s3://data/runs/none-here", "no such file or directory"),
])
def test_bad_urls_are_one_line_errors(s3, datasets, target, phrase):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "compat.gate", target, "--storage-option",
                          f"endpoint_url={s3.endpoint}", "--storage-option", "key=testing", "--storage-option",
                          "secret=testing", "--no-progress"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2 and phrase in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_missing_filesystem_package_names_the_extra(monkeypatch):
    import fsspec

    def missing(url, **kwargs):
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    with pytest.raises(CompatError, match=r"s3fs: pip install 'vllm-compat\[s3\]'"):
        source.filesystem("s3://bucket/x")
    with pytest.raises(CompatError, match=r"gcsfs: pip install 'vllm-compat\[gcs\]'"):
        source.filesystem("gs://bucket/x")
    with pytest.raises(CompatError, match="local paths or URLs, not both"):
        run_gate(GateOptions(paths=(Path("."), "memory://x")))


def test_storage_options_parse_as_json_where_they_can():
    assert source.parse_option("anon=true") == ("anon", True)
    assert source.parse_option("endpoint_url=http://127.0.0.1:9") == ("endpoint_url", "http://127.0.0.1:9")
    assert source.parse_option('client_kwargs={"region_name": "x"}') == ("client_kwargs", {"region_name": "x"})
    with pytest.raises(CompatError, match="KEY=VALUE"):
        source.parse_option("anon")


def test_a_short_answer_is_retried_then_a_storage_error(monkeypatch):
    """A server that answers fewer bytes than the listing promised is failing, not describing a truncated file."""
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/short/x.safetensors", b"x" * 100)
    remote = source.open_remote("memory://short/x.safetensors")
    answers = iter([b"x" * 10, b"x" * 50])
    monkeypatch.setattr(fs, "cat_file", lambda path, start, end: next(answers, b"x" * (end - start)))
    assert remote.read(0, 50) == b"x" * 50 and remote.fetched == 100  # asked again twice, then kept whole
    monkeypatch.setattr(fs, "cat_file", lambda path, start, end: b"")
    monkeypatch.setattr(source, "ATTEMPTS", 3)
    with pytest.raises(source.StorageError, match="failed 3 times, last with _Short"):
        source.open_remote("memory://short/x.safetensors").read(60, 30)
    fs.rm("/short", recursive=True)
