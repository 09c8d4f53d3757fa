"""The version matrix (``python -m compat.matrix``) and bisection (``python -m compat.bisect``) on real vLLM
releases. First-bad builds are confirmed here by reading the releases' own code with ``ast``, not by a table
of versions."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from compat import sources
from compat.audit.pipeline import AuditOptions
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.matrix import bisect as bisection
from compat.matrix.cli import main as matrix_main
from compat.matrix.render import render
from compat.matrix.result import Cell, Column, Matrix, Row, regressions
from compat.matrix.run import Request, run
from compat.policy import FailOn

RELEASES = ["0.11.0", "0.11.1", "0.12.0", "0.17.0"]
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"


@pytest.fixture(scope="module")
def speculators():
    return scan_tree(sources.tree_from_release("speculators", "0.3.0"))


@pytest.fixture(scope="module")
def matrix(speculators):
    return run(speculators, Request(RELEASES), AuditOptions(confirm="never"), show_progress=False)


def _params(version: str, relpath: str, qualname: str) -> dict[str, bool]:
    """Parameter name -> required, of a def in a release's source (read here with ast, independently)."""
    tree = ast.parse((sources.tree_from_release("vllm", version).root / relpath).read_text())
    owner, _, name = qualname.rpartition(".")
    body = tree.body
    if owner:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    args = node.args.posonlyargs + node.args.args
    required = {a.arg: i < len(args) - len(node.args.defaults) for i, a in enumerate(args)}
    required.update({a.arg: d is None for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)})
    return required


def _row(matrix: Matrix, probe: str, touchpoint: str, location: str) -> Row:
    return next(r for r in matrix.rows if (r.probe, r.touchpoint, r.location) == (probe, touchpoint, location))


@pytest.mark.slow
def test_first_bad_builds_agree_with_the_releases_code(matrix):
    cases = [
        # (the consumer's call, the def in vLLM, what makes the call fail there)
        ((f"{GENERATOR}:234", "vllm.v1.request.Request"), ("vllm/v1/request.py", "Request.__init__"),
         lambda p: "eos_token_id" not in p),
        ((f"{GENERATOR}:148", "vllm.v1.core.sched.scheduler.Scheduler"),
         ("vllm/v1/core/sched/scheduler.py", "Scheduler.__init__"), lambda p: p.get("block_size") is True),
        ((f"{GENERATOR}:136", "vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups"),
         ("vllm/v1/core/kv_cache_utils.py", "get_kv_cache_config_from_groups"), lambda p: "kv_cache_specs" not in p),
    ]
    for (location, touchpoint), (relpath, qualname), fails in cases:
        expected = next(v for v in RELEASES if fails(_params(v, relpath, qualname)))
        row = _row(matrix, "call", touchpoint, location)
        bad, good = row.first_bad(matrix.columns)
        assert bad == expected, (touchpoint, bad, expected)
        assert good == RELEASES[RELEASES.index(expected) - 1]
        assert row.cells[bad].status == "broken" and row.cells[good].status == "ok"


@pytest.mark.slow
def test_every_format_of_a_real_matrix(matrix, tmp_path):
    data = json.loads(render(matrix, "json"))
    assert [b["label"] for b in data["builds"]] == RELEASES
    again = Matrix.from_json(data)
    assert [(r.key, r.first_bad(again.columns)) for r in again.rows] == \
        [(r.key, r.first_bad(matrix.columns)) for r in matrix.rows]
    suites = ET.fromstring(render(matrix, "junit")).findall("testsuite")
    assert [s.get("name") for s in suites] == [f"vllm {v}" for v in RELEASES]
    assert int(suites[-1].get("failures")) == sum(1 for r in matrix.rows if r.cells.get("0.17.0") and
                                                  r.cells["0.17.0"].status in ("broken", "changed"))
    request_row = _row(matrix, "call", "vllm.v1.request.Request", f"{GENERATOR}:234")
    bad, good = request_row.first_bad(matrix.columns)
    markdown = render(matrix, "markdown")
    assert f"| call | `vllm.v1.request.Request` | {GENERATOR}:234 | {bad} | {good} |" in markdown
    page = render(matrix, "html")
    assert all(f">{v}</th>" in page for v in RELEASES) and "http" not in page.split("<body>")[1].split("<script")[0]
    payload = page.split("id=matrix-data>")[1].split("</script>")[0]
    assert len(json.loads(payload)["rows"]) == len(matrix.rows)
    terminal = render(matrix, "terminal")
    assert "first bad" in terminal and f"{bad} ({good})" in terminal


@pytest.mark.slow
def test_the_page_renders_in_a_real_browser(matrix, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed")
    page = tmp_path / "matrix.html"
    page.write_text(render(matrix, "html"))
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    dom = done.stdout
    assert 'data-ready="1"' in dom, done.stderr[-2000:]  # the script ran to its end
    assert dom.count("<td class=\"c ") == len(matrix.rows) * len(RELEASES)


@pytest.mark.network
def test_a_build_that_cannot_be_read_is_a_column_of_errors(speculators, tmp_path):
    bad = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    result = run(speculators, Request(["0.11.0", str(bad), "not a version"]), AuditOptions(confirm="never"),
                 show_progress=False)
    labels = {c.label: c for c in result.columns}
    assert labels["0.11.0"].error is None
    assert "not a readable zip archive" in (labels[bad.name].error or "")
    assert "not a version, specifier, path, URL" in (labels["not a version"].error or "")
    for row in result.rows:
        assert row.cells[bad.name].status == "error" and row.cells["0.11.0"].status != "error"


def test_first_bad_and_regressions_against_a_baseline():
    columns = [Column("1.0", "1.0", "1.0"), Column("1.1", "1.1", "1.1"), Column("1.2", "1.2", "1.2")]
    ok, broken = Cell("ok", "fine"), Cell("broken", "gone")
    row = Row("call", "vllm.f", "a.py:1", cells={"1.0": ok, "1.1": broken, "1.2": broken})
    assert row.first_bad(columns) == ("1.1", "1.0")
    assert Row("call", "vllm.g", "a.py:2", cells={"1.0": broken}).first_bad(columns) == ("1.0", None)
    previous = Matrix("c", "1", columns[:2], [Row("call", "vllm.f", "a.py:1", cells={"1.0": ok, "1.1": ok})])
    nightly = Column("1.3.dev1", "http://x/vllm-1.3.dev1-py3-none-any.whl", "1.3.dev1")
    current = Matrix("c", "1", columns[:2] + [nightly],
                     [Row("call", "vllm.f", "a.py:1", cells={"1.0": ok, "1.1": ok, "1.3.dev1": broken})])
    found = regressions(previous, current)
    assert len(found) == 1 and "breaks in 1.3.dev1" in found[0]
    assert regressions(current, current) == []


@pytest.mark.slow
def test_the_cli_writes_every_format_and_fails_on_a_regression(tmp_path, capsys):
    out = tmp_path / "out"
    # without a baseline the policy decides: the Scheduler call is broken in 0.11.1, so the run fails
    assert matrix_main(["--vllm", "0.11.0", "--vllm", "0.11.1", "--output-dir", str(out), "--format", "json",
                        "--output", str(tmp_path / "m.json")]) == 1
    assert "FAILING call vllm.v1.core.sched.scheduler.Scheduler" in capsys.readouterr().err
    assert {p.name for p in out.iterdir()} == {"matrix.html", "matrix.md", "matrix.json", "matrix.junit.xml"}
    # a baseline in which 0.11.1 was fine everywhere: the Scheduler call that breaks there is a regression
    data = json.loads((tmp_path / "m.json").read_text())
    for row in data["rows"]:
        for cell in row["cells"].values():
            cell["status"] = "ok"
    (tmp_path / "previous.json").write_text(json.dumps(data))
    code = matrix_main(["--vllm", "0.11.0", "--vllm", "0.11.1", "--baseline", str(tmp_path / "previous.json"),
                        "--format", "json", "--output", str(tmp_path / "again.json")])
    assert code == 1
    assert "REGRESSION call vllm.v1.core.sched.scheduler.Scheduler" in capsys.readouterr().err
    assert matrix_main(["--vllm", "0.11.0", "--baseline", str(tmp_path / "nope.json")]) == 2


@pytest.mark.slow
def test_bisect_names_the_first_bad_release(speculators):
    judge = bisection.Judge(speculators, AuditOptions(confirm="never"),
                            f"call|vllm.v1.request.Request|{GENERATOR}:234", lambda v: v)
    versions = ["0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.16.0", "0.17.0", "0.18.0"]
    good, bad, tried = bisection.bisect(versions, judge)
    expected = next(v for v in versions if "eos_token_id" not in _params(v, "vllm/v1/request.py",
                                                                          "Request.__init__"))
    assert bad.build == expected and good.build == versions[versions.index(expected) - 1]
    assert len(tried) < len(versions)


@pytest.mark.slow
def test_bisect_names_the_first_bad_commit_with_its_hunk(tmp_path, capsys):
    """A git repository built from real releases, one commit per release, in order."""
    repo = tmp_path / "vllm"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    versions = ["0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0"]
    for version in versions:
        shutil.rmtree(repo / "vllm", ignore_errors=True)
        shutil.copytree(sources.tree_from_release("vllm", version).root / "vllm", repo / "vllm")
        (repo / "vllm" / "_version.py").write_text(f'__version__ = "{version}"\n')
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", f"vllm {version}"], check=True)
        subprocess.run(git + ["tag", f"v{version}"], check=True)
    code = bisection.main(["--touchpoint", f"call|vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups|"
                           f"{GENERATOR}:136", "--good", "v0.11.0", "--bad", "v0.13.0", "--repo", str(repo)])
    out = capsys.readouterr().out
    assert code == 0, out
    expected = next(v for v in versions if "kv_cache_specs" not in _params(
        v, "vllm/v1/core/kv_cache_utils.py", "get_kv_cache_config_from_groups"))
    assert f"vllm {expected}" in out.splitlines()[1]  # the commit's subject
    assert "@@" in out and "kv_cache_specs" in out.split("@@", 1)[1]  # the hunk that dropped the parameter


@pytest.mark.network
def test_bisect_refuses_endpoints_that_do_not_bracket_a_breakage(speculators):
    judge = bisection.Judge(speculators, AuditOptions(confirm="never"),
                            f"call|vllm.v1.request.Request|{GENERATOR}:234", lambda v: v)
    with pytest.raises(bisection.NotBracketed):
        bisection.bisect(["0.11.0", "0.11.1"], judge)


def test_unparsable_baseline_and_bad_specs_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "b.json").write_text("{")
    assert matrix_main(["--baseline", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a matrix JSON file" in err


def _read(path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _cited_files(row: Row, *labels: str) -> set[str]:
    """The vLLM files a row's findings point at (``vllm/...py:line``), and the module its touchpoint names."""
    files = {row.cells[label].vllm_location.rpartition(":")[0] for label in labels
             if row.cells.get(label) is not None and row.cells[label].vllm_location}
    dotted = row.touchpoint.split("(")[0].split(":")[0]
    if dotted.startswith("vllm."):
        parts = dotted.split(".")
        for end in range(len(parts), 1, -1):
            files |= {"/".join(parts[:end]) + ".py", "/".join(parts[:end]) + "/__init__.py"}
    return files


@pytest.mark.slow
def test_every_first_bad_build_of_the_full_matrix_is_where_the_cited_code_changed(speculators):
    """For each touchpoint of the matrix over every release from 0.11.0, the vLLM code its findings cite differs
    between the last good and the first bad release (read here, byte for byte, from both releases)."""
    full = run(speculators, Request([">=0.11"]), AuditOptions(confirm="never"), show_progress=False)
    assert full.columns[0].label == "0.11.0" and len(full.columns) >= 30
    checked = 0
    for row in full.rows:
        bad, good = row.first_bad(full.columns, FailOn.CHANGED)  # broken or changed: every transition
        if bad is None or good is None:
            continue
        roots = {label: sources.tree_from_release("vllm", label).root for label in (good, bad)}
        files = _cited_files(row, good, bad)

        changed = [f for f in files if _read(roots[good] / f) != _read(roots[bad] / f)]
        assert changed, (row.key, good, bad, sorted(files))
        checked += 1
    assert checked >= 15, checked


@pytest.mark.slow
def test_bisect_agrees_with_the_matrix_on_every_breakage(speculators):
    """Each touchpoint that breaks after a good release (the seed's breakages among them): bisection between
    0.11.0 and the newest release names the same first bad release as the matrix's linear reading."""
    full = run(speculators, Request([">=0.11"]), AuditOptions(confirm="never"), show_progress=False)
    versions = [c.label for c in full.columns]
    checked = 0
    for row in full.rows:
        bad, good = row.first_bad(full.columns, FailOn.CHANGED)  # broken or changed: every transition
        if bad is None or good is None or row.cells.get(versions[-1]) is None:
            continue
        if any(row.cells.get(v) is None or row.cells[v].status not in ("broken", "changed")
               for v in versions[versions.index(bad):]):
            continue  # fixed again later: bisection between the ends cannot name one transition
        # from 0.11.0 when it is fine there (or has no finding there: a changed default has none at the build the
        # consumer was written for); else (unknown there) from the last good release
        first = row.cells.get(versions[0])
        start = 0 if first is None or first.status == "ok" else versions.index(good)
        judge = bisection.Judge(speculators, AuditOptions(confirm="never", fail_on=FailOn.CHANGED), row.key,
                                lambda v: v)
        found_good, found_bad, _ = bisection.bisect(versions[start:], judge)
        assert (found_bad.build, found_good.build) == (bad, good), row.key
        checked += 1
    assert checked >= 10, checked


def test_failing_lines_are_one_per_row_with_runs_of_builds():
    """The exit code's lines: a row failing in many builds is one line naming its runs, not a line per build."""
    columns = [Column(v, v, v) for v in ("1.0", "1.1", "1.2", "1.3", "1.4")]
    ok, broken, changed = Cell("ok", "fine"), Cell("broken", "gone"), Cell("changed", "moved")
    rows = [Row("call", "vllm.f", "a.py:1", cells={"1.0": ok, "1.1": broken, "1.2": broken, "1.3": ok,
                                                   "1.4": broken}),
            Row("call", "vllm.g", "a.py:2", cells={"1.0": changed, "1.1": broken, "1.2": broken}),
            Row("call", "vllm.h", "a.py:3", cells={"1.0": ok})]
    lines = Matrix("c", "1", columns, rows).failing()
    assert lines == ["call vllm.f (a.py:1) is broken in 1.1-1.2 (2 builds); broken in 1.4: gone",
                     "call vllm.g (a.py:2) is broken in 1.1-1.2 (2 builds): gone"]
    changed_too = Matrix("c", "1", columns, rows[1:2], fail_on=FailOn.CHANGED).failing()
    assert changed_too == ["call vllm.g (a.py:2) is changed in 1.0; broken in 1.1-1.2 (2 builds): gone"]


@pytest.mark.network
@pytest.mark.slow
def test_the_new_switches_of_0_34_are_matrix_rows_with_each_platform_s_value(speculators):
    """The matrix judges defaults as the audit does: vLLM 0.34.0's CacheConfig.enable_extensible_kv_cache and
    ParallelConfig.numa_bind are rows, changed at 0.34.0 and ok (absent) at 0.33.0, with each platform's value."""
    grid = run(speculators, Request(["0.33.0", "0.34.0"]), AuditOptions(confirm="never"), show_progress=False)
    rows = {r.touchpoint: r for r in grid.rows if r.probe == "defaults"}
    for name, cuda in (("vllm.config.CacheConfig.enable_extensible_kv_cache", "True"),
                       ("vllm.config.ParallelConfig.numa_bind", "None")):
        row = next(r for t, r in rows.items() if t.endswith(name))
        cell = row.cells["0.34.0"]
        assert cell.status is Status.CHANGED, cell.message
        assert cell.evidence["platform_cuda"].startswith(cuda), cell.evidence
        assert row.first_bad(grid.columns, FailOn.CHANGED)[0] == "0.34.0"
