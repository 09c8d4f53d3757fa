"""The command line: formats, reports/, allow-list, strict, upgrade mode, and bad input (exit 2, one line)."""

from __future__ import annotations

import json
import shutil
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import packaging
import pytest

from .conftest import run_cli

pytestmark = [pytest.mark.network]

CONSUMER = """
from vllm.v1.request import Request
from vllm.config import CacheConfig

def make():
    Request(request_id="r", prompt_token_ids=[1], sampling_params=None, pooling_params=None, eos_token_id=2)
    return CacheConfig(block_size=16, enable_prefix_caching=False)
"""


@pytest.fixture
def consumer(tmp_path) -> Path:
    path = tmp_path / "consumer.py"
    path.write_text(textwrap.dedent(CONSUMER))
    return path


def one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_json_report_schema(consumer, tmp_path):
    proc = run_cli("--consumer", str(consumer), "--vllm", "0.17.0", "--format", "json", "--no-reports",
                   cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["schema"] == "compat.audit/1"
    assert report["vllm"]["version"] == "0.17.0" and report["vllm"]["reading"] == "static"
    assert report["consumer"]["name"] == "consumer"
    assert report["summary"]["exit_code"] == 1 and report["summary"]["broken"] >= 1
    fields = {"probe", "status", "symbol", "consumer_location", "vllm_location", "message", "evidence", "fix"}
    for finding in report["findings"]:
        assert fields <= set(finding) and finding["message"]
        assert {"written_for", "audited"} <= set(finding["evidence"])
    broken = [f for f in report["findings"] if f["status"] == "broken"]
    assert [f["symbol"] for f in broken] == ["vllm.v1.request.Request"]
    assert broken[0]["consumer_location"] == "consumer.py:6" and "eos_token_id" in broken[0]["fix"]


def test_reports_land_in_reports_dir_by_default(consumer, tmp_path):
    proc = run_cli("--consumer", str(consumer), "--vllm", "0.11.0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert written == ["audit-consumer-unknown-vllm-0.11.0.json", "audit-consumer-unknown-vllm-0.11.0.md"]
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.startswith(".")]  # no temp files left


def test_junit_github_markdown(consumer, tmp_path):
    junit = run_cli("--consumer", str(consumer), "--vllm", "0.17.0", "--format", "junit", "--no-reports")
    suite = ET.fromstring(junit.stdout)
    cases = suite.findall("testcase")
    assert len(cases) == int(suite.get("tests")) and int(suite.get("failures")) == 1
    failed = [c for c in cases if c.find("failure") is not None]
    assert failed[0].get("file") == "consumer.py" and failed[0].get("line") == "6"
    github = run_cli("--consumer", str(consumer), "--vllm", "0.17.0", "--format", "github", "--no-reports")
    errors = [line for line in github.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 1 and "line=6" in errors[0] and "eos_token_id" in errors[0]
    markdown = run_cli("--consumer", str(consumer), "--vllm", "0.17.0", "--format", "markdown", "--no-reports")
    assert "| ❌ broken | call | `consumer.py:6` |" in markdown.stdout


def test_output_file_is_written(consumer, tmp_path):
    out = tmp_path / "out" / "report.json"
    proc = run_cli("--consumer", str(consumer), "--vllm", "0.11.0", "--format", "json", "--output", str(out),
                   "--no-reports")
    assert proc.returncode == 0 and proc.stdout == ""
    assert json.loads(out.read_text())["summary"]["broken"] == 0


def test_allow_list_accepts_a_finding_with_its_reason(consumer, tmp_path):
    allow = tmp_path / "allow.toml"
    allow.write_text('[[allow]]\nprobe = "call"\nsymbol = "vllm.v1.request.Request"\nreason = "shimmed"\n')
    proc = run_cli("--consumer", str(consumer), "--vllm", "0.17.0", "--allow", str(allow), "--format", "json",
                   "--no-reports")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert [f["allowed"] for f in report["findings"] if f["status"] == "broken"] == ["shimmed"]
    allow.write_text('[[allow]]\nprobe = "call"\n')
    assert "no reason" in one_line_error(run_cli("--consumer", str(consumer), "--allow", str(allow)))


def test_strict_counts_unknown_as_broken(tmp_path):
    path = tmp_path / "dynamic.py"
    path.write_text("from vllm.v1.executor.multiproc_executor import MultiprocExecutor\n"
                    "def go(name):\n    MultiprocExecutor(vllm_config=None).collective_rpc(name)\n")
    relaxed = run_cli("--consumer", str(path), "--vllm", "0.11.0", "--format", "json", "--no-reports")
    assert relaxed.returncode == 0
    assert any(f["status"] == "unknown" for f in json.loads(relaxed.stdout)["findings"])
    strict = run_cli("--consumer", str(path), "--vllm", "0.11.0", "--strict", "--no-reports")
    assert strict.returncode == 1


@pytest.mark.slow
def test_upgrade_mode_reports_only_changes_side_by_side(tmp_path):
    proc = run_cli("--baseline", "0.11.0", "--vllm", "0.12.0", "--format", "json", "--no-reports", cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["mode"] == "upgrade" and report["baseline"]["version"] == "0.11.0"
    changed = {f["touchpoint"]: f for f in report["findings"] if f["probe"] == "call"}
    config = changed["vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups"]
    assert "kv_cache_specs" in config["evidence"]["written_for"]
    assert "kv_cache_specs" not in config["evidence"]["audited"]
    assert config["message"].startswith("ok -> broken")
    # Unchanged touchpoints are not reported: Request is imported from the same file in both builds.
    assert not [f for f in report["findings"] if f["touchpoint"] == "vllm.v1.request.Request"
                and f["probe"] == "import"]
    for f in report["findings"]:
        assert f["message"].startswith(("ok ->", "broken ->", "unknown ->", "absent ->")) or (
            f["evidence"]["written_for"] != f["evidence"]["audited"])


def test_unknown_version(consumer):
    line = one_line_error(run_cli("--consumer", str(consumer), "--vllm", "0.0.999", "--no-reports"))
    assert "no release of vllm matches '0.0.999'" in line


def test_unreachable_index(consumer, tmp_path):
    env = {"COMPAT_INDEX_URL": "http://127.0.0.1:9/simple", "COMPAT_CACHE_DIR": str(tmp_path / "cache")}
    line = one_line_error(run_cli("--consumer", str(consumer), "--vllm", "latest", "--no-reports", env=env))
    assert "cannot reach the package index" in line


def test_corrupt_wheel(consumer, tmp_path):
    wheel = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 this is not a zip archive")
    line = one_line_error(run_cli("--consumer", str(consumer), "--vllm", str(wheel), "--no-reports"))
    assert "not a readable zip archive" in line and wheel.name in line
    line = one_line_error(run_cli("--consumer", str(wheel), "--vllm", "0.11.0", "--no-reports"))
    assert "not a readable zip archive" in line


def test_syntax_error_is_reported_and_the_rest_audited(tmp_path):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text("from vllm.config import CacheConfig\nx = (\n")
    (package / "good.py").write_text(textwrap.dedent(CONSUMER))
    proc = run_cli("--consumer", str(package), "--vllm", "0.17.0", "--format", "json", "--no-reports")
    report = json.loads(proc.stdout)
    errors = [f for f in report["findings"] if f["status"] == "error"]
    assert [(f["consumer_location"], f["probe"]) for f in errors] == [("mypkg/bad.py:2", "scan")]
    assert "SyntaxError" in errors[0]["message"]
    assert any(f["status"] == "broken" and f["consumer_location"] == "mypkg/good.py:6" for f in report["findings"])


def test_installed_without_vllm(consumer, tmp_path):
    # A Python that has this project and packaging, but no vLLM.
    lib = tmp_path / "lib"
    shutil.copytree(Path(packaging.__file__).parent, lib / "packaging")
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proc = run_cli("--consumer", str(consumer), "--vllm", "installed", "--no-reports",
                   python=str(venv / "bin" / "python"), env={"PYTHONPATH": str(lib)})
    assert "vllm is not installed" in one_line_error(proc)


def test_missing_consumer_path():
    line = one_line_error(run_cli("--consumer", "/no/such/dir/", "--vllm", "0.11.0", "--no-reports"))
    assert "no such file or directory" in line


def test_list_probes_names_every_probe():
    proc = run_cli("--list-probes")
    assert proc.returncode == 0
    assert {line.split()[0] for line in proc.stdout.splitlines()} >= {"import", "call", "attribute", "rpc"}


def test_written_files_get_the_permissions_open_gives(tmp_path):
    """Atomic writes go through mkstemp (0600); the file they leave is as the user's umask makes any file."""
    import os

    from compat.cache import atomic_write_text

    mask = os.umask(0o022)
    os.umask(mask)
    path = tmp_path / "report.md"
    atomic_write_text(path, "x")
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
