"""``python -m compat.gate``: exit codes, every report format, the JSON schema, one-line bad input."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from compat.gate.rules import RULES, STRUCTURAL
from compat.progress import ProgressBar

from .conftest import ROOT
from .gate_files import layered, write_speculators, write_vllm

torch = pytest.importorskip("torch")

H = 16


def gate(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "compat.gate", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


@pytest.fixture
def data(tmp_path):
    """Three vLLM-layout files, the second one not sliced per sample (12 rows for 5 tokens)."""
    d = tmp_path / "hs"
    write_vllm(d / "hs_0.safetensors", torch.arange(5), layered(5, H, 3))
    write_vllm(d / "hs_1.safetensors", torch.arange(5), layered(12, H, 3))
    write_vllm(d / "hs_2.safetensors", torch.arange(7), layered(7, H, 3))
    return d


def one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    return lines[0]


def test_terminal_report_and_exit_codes(data):
    failed = gate(data, "--hidden-size", H)
    assert failed.returncode == 1 and failed.stderr == ""  # no progress bar when stderr is not a terminal
    assert "BROKEN   seq_len   hs_1.safetensors" in failed.stdout and failed.stdout.rstrip().endswith(
        "(ok findings hidden; --show-ok lists them)")
    assert "FAIL: 2 ok, 1 broken" in failed.stdout
    passed = gate(data / "hs_0.safetensors", data / "hs_2.safetensors", "--show-ok")
    assert passed.returncode == 0 and "PASS: 2 ok" in passed.stdout and "every rule passed" in passed.stdout
    assert gate(data, "--ignore", "seq_len").returncode == 0


def test_json_report_schema(data, tmp_path):
    out = tmp_path / "report.json"
    proc = gate(data, "--hidden-size", H, "--values", "--format", "json", "--output", out)
    assert proc.returncode == 1 and proc.stdout == ""
    report = json.loads(out.read_text())
    assert report["schema"] == "compat.gate/1" and report["source_root"] == str(data)
    summary = report["summary"]
    assert (summary["files"], summary["samples"], summary["tokens"]) == (3, 3, 17)
    assert summary["bytes"] == sum(p.stat().st_size for p in data.iterdir())
    assert summary["value_bytes"] == 3 * 2 * H * (5 + 12 + 7)  # every bf16 layer value was read once
    assert summary["failures_by_rule"] == {"seq_len": 1} and summary["exit_code"] == 1
    assert summary["layouts"] == {"vllm-safetensors": 3}
    assert report["expected"]["hidden_size"] == {"value": H, "source": "--hidden-size"}
    assert report["options"]["values"] is True and report["reference"] is None
    broken = [f for f in report["findings"] if f["status"] == "broken"]
    assert len(broken) == 1
    f = broken[0]
    assert (f["probe"], f["symbol"], f["consumer_location"], f["vllm_location"]) == (
        "seq_len", "hs_1.safetensors", "hs_1.safetensors", None)
    assert f["message"] and f["fix"] and f["evidence"]["expected"] == "5 rows" and f["evidence"]["found"] == "12 rows"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # written atomically, no temp left


def test_junit_github_markdown(data):
    junit = gate(data, "--format", "junit")
    suite = ET.fromstring(junit.stdout)
    assert int(suite.get("tests")) == 3 and int(suite.get("failures")) == 1
    (failed,) = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert failed.get("classname") == "compat.gate.seq_len" and "hs_1.safetensors" in failed.get("name")
    github = gate(data, "--format", "github")
    error_lines = [line for line in github.stdout.splitlines() if line.startswith("::error")]
    assert len(error_lines) == 1 and "compat.gate seq_len" in error_lines[0]
    markdown = gate(data, "--format", "markdown")
    assert markdown.stdout.startswith("## compat.gate:") and "| ❌ broken | seq_len |" in markdown.stdout


@pytest.mark.parametrize("args, words", [
    (("missing-dir",), "no such file or directory"),
    ((), "no PATH given"),
    (("{data}", "--layout", "npz"), "--layout 'npz'"),
    (("{data}", "--model", "{tmp}/nowhere"), "no config.json"),
    (("{data}", "--model", "{tmp}/broken.json"), "unreadable config"),
    (("{data}", "--format", "yaml"), "--format 'yaml'"),
    (("{data}", "--nonfinite", "ignore"), "--nonfinite 'ignore'"),
    (("{data}", "--ignore", "everything"), "no such rule"),
    (("{data}", "--hidden-size", "big"), "invalid int value"),
    (("{data}", "--dtype", "int3"), "unknown dtype"),
    (("{data}", "--layer-ids", "a,b"), "not a list of integers"),
    (("{data}", "--reference", "{tmp}"), "not a model directory"),
    (("{tmp}/empty",), "no hidden-state files"),
])
def test_bad_input_is_one_line_and_exit_2(data, tmp_path, args, words):
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "empty").mkdir()
    proc = gate(*(a.format(data=data, tmp=tmp_path) for a in args), cwd=tmp_path)
    line = one_line_error(proc)
    assert line.startswith("compat.gate: error:") and words in line, line


def test_list_rules_names_every_rule():
    proc = gate("--list-rules")
    assert proc.returncode == 0
    assert [line.split()[0] for line in proc.stdout.splitlines()] == list(RULES)


def test_rule_values_give_the_names_and_the_structural_set():
    assert all(name == rule.name and rule.description and rule.check for name, rule in RULES.items())
    assert STRUCTURAL == {"readable", "layout", "token_ids", "seq_len", "layer_shape"}  # what --reference skips


def test_torch_layout_through_the_cli(tmp_path):
    write_speculators(tmp_path / "data_0.pt", torch.arange(4), layered(4, H, 2))
    proc = gate(tmp_path, "--layout", "speculators-pt", "--dtype", "bf16", "--layers", "2", "--values")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_progress_bar_draws_and_clears():
    stream = io.StringIO()
    bar = ProgressBar(stream)
    bar(1, 3)
    bar(3, 3)
    text = stream.getvalue()
    assert "1/3 files" in text and "3/3 files" in text and text.endswith("\r")
    assert ProgressBar.for_terminal() is None  # pytest captures stderr: not a terminal
