"""What the matrix says about a row (at or before the range's first build, fixed in), its legends, its width, its
lines while it runs and the cache it used; the labels are read from real matrix runs over real releases."""

from __future__ import annotations

import http.server
import json
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from compat import sources
from compat.audit.pipeline import AuditOptions
from compat.consumer.scan import scan_tree
from compat.matrix.render import render
from compat.matrix.result import Cell, Column, Matrix, Row
from compat.matrix.run import Request, run
from compat.policy import DEFAULT, fails

WIDER = ["0.12.0", "0.17.0", "0.18.0"]
RANGE = ["0.17.0", "0.18.0"]


@pytest.fixture(scope="module")
def runs():
    scan = scan_tree(sources.tree_from_release("speculators", "0.3.0"))
    options = AuditOptions(confirm="never")
    return (run(scan, Request(WIDER), options, show_progress=False),
            run(scan, Request(RANGE), options, show_progress=False))


def _bad(row: Row | None, label: str) -> bool:
    """Failing by the default policy (``--fail-on broken``), as the matrix's rows are read."""
    return row is not None and label in row.cells and row.cells[label].status != "error" and \
        fails(row.cells[label].status, DEFAULT)


def _ok(row: Row | None, label: str) -> bool:
    return row is not None and label in row.cells and row.cells[label].status == "ok"


@pytest.mark.network
def test_a_row_broken_at_the_ranges_first_build_is_not_said_to_break_there(runs, monkeypatch):
    """Rows already bad at 0.12.0 (seen by the wider run) and at 0.17.0: over 0.17.0.. they began at or before
    0.17.0, which is what JSON, terminal and Markdown say, never 0.17.0 as a first bad build."""
    wider, sub = runs
    before = {r.key: r for r in wider.rows}
    data = {(r["probe"], r["touchpoint"], r["location"]): r for r in json.loads(render(sub, "json"))["rows"]}
    monkeypatch.setenv("COLUMNS", "400")
    text = render(sub, "terminal")
    markdown = render(sub, "markdown")
    old = [r for r in sub.rows if _bad(before.get(r.key), "0.12.0") and _bad(r, "0.17.0")]
    assert old  # the seed's breakages from 0.11.1 and 0.12.0 are still there in 0.17.0
    for row in old:
        entry = data[(row.probe, row.touchpoint, row.location)]
        assert entry["broken_before_range"] is True and entry["first_bad"] == "0.17.0", entry
        assert entry["last_good"] is None
    assert "0.17.0 (-)" not in text and "at or before 0.17.0" in text
    assert "| at or before 0.17.0 | - |" in markdown
    began = [r for r in sub.rows if _ok(before.get(r.key), "0.12.0") and _bad(r, "0.17.0")]
    for row in began:  # fine in 0.12.0, the build before the range: still broken at or before 0.17.0, no later
        assert data[(row.probe, row.touchpoint, row.location)]["broken_before_range"] is True


@pytest.mark.network
def test_a_row_vllm_fixed_says_fixed_in(runs, monkeypatch):
    """Rows bad in 0.17.0 and ok in 0.18.0 (the cells of the run itself) say 'fixed in 0.18.0'."""
    _, sub = runs
    data = {(r["probe"], r["touchpoint"], r["location"]): r for r in json.loads(render(sub, "json"))["rows"]}
    fixed = [r for r in sub.rows if _bad(r, "0.17.0") and _ok(r, "0.18.0")]
    assert fixed
    monkeypatch.setenv("COLUMNS", "400")
    text = render(sub, "terminal")
    for row in fixed:
        entry = data[(row.probe, row.touchpoint, row.location)]
        assert entry["fixed_in"] == "0.18.0" and entry["broken_again_in"] is None, entry
        assert entry["what_happened"] == "at or before 0.17.0, fixed in 0.18.0"
    assert "at or before 0.17.0, fixed in 0.18.0" in text
    still = [r for r in sub.rows if _bad(r, "0.18.0")]
    assert all(data[(r.probe, r.touchpoint, r.location)]["fixed_in"] is None for r in still)


def _synthetic(builds: int = 35) -> Matrix:
    """Every cell kind, blanks among them, long real-looking names, and a row that breaks, is fixed and breaks
    again."""
    columns = [Column(f"0.{11 + i}.0", f"0.{11 + i}.0", f"0.{11 + i}.0") for i in range(builds)]
    columns[-1] = Column("0.99.0", "0.99.0", "0.99.0", error="cannot fetch")
    statuses = ["ok", "broken", "changed", "unknown"]
    rows = []
    for n, status in enumerate(statuses * 2):
        cells = {c.label: Cell(status if i >= n else "ok", "m") for i, c in enumerate(columns) if i % 7 != 3}
        rows.append(Row("call", f"vllm.v1.core.sched.scheduler.Scheduler.method_number_{n}",
                        f"speculators/data_generation/vllm_hidden_states_generator.py:{100 + n}", cells=cells))
    wobbly = {c.label: Cell("broken" if i in (2, 3, 9) else "ok", "m") for i, c in enumerate(columns)}
    rows.append(Row("model", "speculators.custom_worker._patched_forward@DeepseekV2ForCausalLM:member:x",
                    "speculators/data_generation/custom_worker.py:30", cells=wobbly))
    for row in rows:
        row.cells[columns[-1].label] = Cell("error", "build 0.99.0 could not be read")
    return Matrix("speculators", "0.3.0", columns, rows)


def _grid_marks(text: str) -> set[str]:
    """The marks in the cells of the terminal grid, read at the positions of the build numbers in each block's
    header."""
    marks: set[str] = set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        found = list(re.finditer(r"(?<= )\d+(?= |$)", line))
        if not line.startswith(" ") or not found or line.lstrip()[0] == "[":
            continue
        for row in lines[i + 1:]:
            if not row or row.startswith(" "):
                break
            marks |= {row[m.start()] if m.start() < len(row) else " " for m in found}
    return marks


def test_every_cell_kind_rendered_is_in_the_legend(monkeypatch):
    matrix = _synthetic()
    monkeypatch.setenv("COLUMNS", "200")
    text = render(matrix, "terminal")
    marks = _grid_marks(text)
    assert {".", "B", "C", "?", "E", " "} <= marks, marks
    legend = text[text.index("\nlegend:"):]
    for mark in marks - {" "}:
        assert re.search(rf"(^|\s){re.escape(mark)} [a-z]", legend), mark
    assert re.search(r"\(blank\) \w", legend)

    markdown = render(matrix, "markdown")
    table = markdown.split("## Every build")[1].split("\n\n")[1]
    symbols = {c.strip() for line in table.splitlines()[2:] for c in line.split(" | ")[1:]} - {"|"}
    symbols = {s.rstrip(" |") for s in symbols}
    assert "" in symbols and len(symbols) >= 6, symbols
    cells_legend = next(line for line in markdown.splitlines() if line.startswith("Cells:"))
    for symbol in symbols - {""}:
        assert f"{symbol} " in cells_legend, symbol
    assert "blank:" in cells_legend

    page = render(matrix, "html")
    kinds = set(re.findall(r"<td class='c (\w+)", page))
    legend_html = page.split("<div class=legend>")[1].split("</div>")[0]
    assert "none" in kinds and len(kinds) == 6, kinds
    for kind in kinds:
        assert f"<span class={kind}" in legend_html, kind


@pytest.mark.parametrize("width", [80, 200])
def test_the_text_fits_the_terminal(width, monkeypatch):
    matrix = _synthetic()
    monkeypatch.setenv("COLUMNS", str(width))
    for make in (lambda: render(matrix, "terminal"), lambda: render(matrix, "terminal", width=width)):
        text = make()
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width, max(lines, key=len)
        headers = [line for line in lines if line.startswith(" ") and re.fullmatch(r"[\d ]+(first bad.*)?",
                                                                                   line.strip())]
        numbers = [int(n) for line in headers for n in re.findall(r"\d+", line)]
        assert numbers == list(range(len(matrix.columns)))  # every build once, in order, over the blocks
        assert "broken again in" in text and "fixed in" in text
    if width == 200:
        assert len(headers) == 1  # 35 builds fit beside the names in one block
    else:
        assert len(headers) > 1


class _Held(http.server.BaseHTTPRequestHandler):
    release = threading.Event()
    asked = threading.Event()

    def _hold(self):
        type(self).asked.set()
        type(self).release.wait(120)
        self.send_error(404, "no such wheel")

    do_GET = do_HEAD = _hold

    def log_message(self, *args):
        pass


@pytest.mark.network
def test_without_a_terminal_each_build_is_a_line_as_it_finishes_and_the_cache_is_said(tmp_path):
    """0.11.0 is audited while the second build (a wheel on a server that holds every request) is still
    being fetched: its line arrives on a pipe before the run ends; the run ends by saying the cache it used."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Held)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/vllm-9.9.{os.getpid()}-py3-none-any.whl"
    proc = subprocess.Popen([sys.executable, "-m", "compat.matrix", "--vllm", "0.11.0", "--vllm", url,
                             "--format", "json", "--output", str(tmp_path / "m.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    try:
        first = lines.get(timeout=90)
        assert re.fullmatch(r"matrix: \[1/2\] 0\.11\.0: \d+ ok, \d+ broken, \d+ changed, \d+ unknown, 0 error\n",
                            first), first
        assert proc.poll() is None and _Held.asked.is_set()  # the second build is still being fetched
    finally:
        _Held.release.set()
        proc.wait(120)
        reader.join(30)
        server.shutdown()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert proc.returncode == 1, rest  # --fail-on broken: 0.11.0's broken cells, and a build it could not read
    assert rest[0].startswith("matrix: [2/2] vllm-9.9.") and "ERROR" in rest[0]
    said = next((line for line in rest if line.startswith("matrix: cache ")), "")  # before the FAILING lines
    cache = re.fullmatch(r"matrix: cache .*?([\d,]+) bytes\)? used in (.+) \(the \d+ entries .*\)\n", said)
    assert cache, rest
    root = sources.tree_from_release("vllm", "0.11.0").root
    sources_bytes = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert int(cache.group(1).replace(",", "")) >= sources_bytes > 0
    assert Path(cache.group(2)) in root.parents
