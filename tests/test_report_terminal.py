"""The terminal report reads from the top: the verdict first (and last), findings in the order of their files and
lines as numbers, findings with one cause and one fix at one place shown once with what differs. By default one
line per finding (two for a failing one on a narrow terminal, while the report fits a screen) fitted to the width;
``--details`` shows each in full."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat.findings import Finding, Place, Status, by_place
from compat.report import terminal
from compat.report.headline import cut, fix_in_brief, headline
from compat.report.terminal import View


@dataclass
class Result:
    """What the renderer reads of a result (``compat.report.reportable.Reportable``)."""

    findings: tuple[Finding, ...]
    tool: str = "vllm-compat"
    source_root: str = "."

    def counts(self) -> dict[str, int]:
        out = {s.value: sum(f.status is s for f in self.findings) for s in Status}
        return out | {"allowed": sum(bool(f.allowed) for f in self.findings)}

    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.status is Status.BROKEN]

    @property
    def exit_code(self) -> int:
        return 1 if self.failing() else 0

    def title(self) -> str:
        return "t"

    def facts(self) -> list[tuple[str, str]]:
        return [("consumer", "c 1.0")]

    def as_json(self) -> dict:
        return {}


def _finding(line: int, symbol: str, fix: str | None = "use self.embed_input_ids", status=Status.BROKEN,
             place=True, file="pkg/worker.py", message=None, check="model"):
    return Finding(check, status, symbol, f"{file}:{line}", None, message or f"{symbol} lacks get_input_embeddings",
                   fix=fix, place=Place(file, line) if place else None)


DETAILS = View(details=True)


@pytest.mark.parametrize("view", [View(), DETAILS], ids=["compact", "details"])
def test_the_verdict_comes_first_and_last(view):
    lines = terminal.render(Result((_finding(30, "A"),)), view=view).splitlines()
    assert lines[0].startswith("FAIL: 0 ok, 1 broken") and lines[-1] == lines[0]
    assert any(line.startswith("consumer") and line.endswith(": c 1.0") for line in lines[1:3])


def test_places_sort_by_line_as_a_number_with_or_without_a_place():
    findings = [_finding(109, "A"), _finding(30, "B", place=False), _finding(9, "C")]
    assert [f.symbol for f in sorted(findings, key=by_place)] == ["C", "B", "A"]
    colon = Finding("x", Status.OK, "s", "req-12:00:07.safetensors", None, "m")  # a name holding ':', no line
    assert by_place(colon) == ("req-12:00:07.safetensors", 0)


def test_details_show_one_fix_at_one_place_once_with_the_symbols_it_covers():
    findings = (_finding(30, "LlamaForCausalLM"), _finding(30, "Qwen3ForCausalLM"), _finding(30, "DeepseekV2"),
                _finding(30, "Other", fix="another fix"), _finding(45, "Llama2"))
    text = terminal.render(Result(findings), view=DETAILS)
    assert text.count("fix    : use self.embed_input_ids") == 2  # line 30's three, and line 45's own
    assert "pkg/worker.py:30 (3 findings, one fix)" in text
    assert "also  : Qwen3ForCausalLM" in text and "also  : DeepseekV2" in text
    assert "fix    : another fix" in text and "symbol: Other" in text


# --- what is wrong, in brief: read from the message by its grammar ---------------------------------------------


@pytest.mark.parametrize(("message", "said"), [
    # the first clause; an aside in parentheses left out; a class without its module path
    ("the patch calls self.old_name, which pkg.models.llama.LlamaModel (Llama) does not have; it has new_name",
     "the patch calls self.old_name, which LlamaModel does not have"),
    # a separator inside parentheses or quotes ends nothing
    ("X.y defaults to Z() (declared None; X.fill sets it) in this build; read by W",
     "X.y defaults to Z() in this build"),
    ('the next call fails with "RuntimeError: state error; again"; so it stops',
     'the next call fails with "RuntimeError: state error; again"'),
    # a call's parentheses stay, as do attribute chains and quoted module paths
    ("f(..., rank=...) returns the value itself (pkg/x.py:3): [0] takes it apart",
     "f(..., rank=...) returns the value itself"),
    ("the consumer patches model.model, but the stack is model.language_model.model",
     "the consumer patches model.model, but the stack is model.language_model.model"),
    ("scheduler_cls defaults to 'pkg.core.scheduler.Scheduler' now", "scheduler_cls defaults to "
                                                                      "'pkg.core.scheduler.Scheduler' now"),
    ("cannot tell whether a.b.c.Wrapper.model exists:   Wrapper defines\n__getattr__",
     "cannot tell whether Wrapper.model exists"),
])
def test_the_headline_is_the_first_clause_without_asides(message, said):
    assert headline(message) == said


def test_the_fix_in_brief_is_whole_else_its_first_clause_marked_as_cut():
    assert fix_in_brief("use self.new_name") == ["use self.new_name"]
    assert fix_in_brief("pass `n=` (int), which this build requires") == ["pass `n=`, which this build requires",
                                                                          "pass `n=`…"]
    assert fix_in_brief("call it as the build does: layer(a, b)") == ["call it as the build does: layer(a, b)",
                                                                      "call it as the build does…"]


def test_a_cut_says_so_and_fits():
    assert cut("short", 10) == "short"
    assert cut("one two three four", 12) == "one two…"  # after a word where that loses little
    assert cut("an_identifier_far_too_long", 10) == "an_identi…"  # else within the word
    for width in range(1, 30):
        out = cut("the replacement forward calls self.get_input_embeddings", width)
        assert len(out) <= width and out.endswith("…")


# --- the compact view: one line per finding, fitted ----------------------------------------------------------


def _entries(text: str) -> list[tuple[str, int, str, str, str]]:
    """(heading, line, status, check, text with its continuation) of each finding's line in a compact report."""
    entry = re.compile(r"^ +(\d+)  ([A-Z]+) +(\S+) +(.*)$")
    lines = text.splitlines()
    found: list[list] = []
    heading = None
    for i, line in enumerate(lines):
        if m := entry.match(line):
            found.append([heading, int(m[1]), m[2], m[3], m[4]])
        elif line.startswith("      ") and found and i and lines[i - 1].startswith(" "):
            found[-1][4] += " " + line.strip()
        elif line and not line.startswith(" ") and i + 1 < len(lines) and entry.match(lines[i + 1]):
            heading = line
    return [tuple(e) for e in found]


def test_findings_sit_under_their_file_in_the_order_of_their_lines_as_numbers():
    findings = (_finding(109, "A1", fix="other"), _finding(9, "B", file="pkg/b.py"), _finding(30, "A2", fix="x"),
                _finding(9, "C", file="pkg/z.py", status=Status.UNKNOWN))
    text = terminal.render(Result(findings), view=View(width=120))
    assert [(h, line) for h, line, *_ in _entries(text)] == [("pkg/b.py", 9), ("pkg/worker.py", 30),
                                                            ("pkg/worker.py", 109), ("pkg/z.py", 9)]
    assert [line for line in text.splitlines() if line.startswith("pkg/")] == ["pkg/b.py", "pkg/worker.py",
                                                                             "pkg/z.py"]  # each file once


def test_one_cause_and_one_fix_take_one_line_with_their_count():
    findings = (_finding(30, "LlamaForCausalLM"), _finding(30, "Qwen3ForCausalLM"), _finding(30, "DeepseekV2"),
                _finding(30, "Other", fix="another fix"), _finding(45, "Llama2"))
    entries = _entries(terminal.render(Result(findings), view=View(width=160)))
    assert [(line, text) for _, line, _, _, text in entries] == [
        (30, "LlamaForCausalLM lacks get_input_embeddings (3 findings)  → use self.embed_input_ids"),
        (30, "Other lacks get_input_embeddings  → another fix"),
        (45, "Llama2 lacks get_input_embeddings  → use self.embed_input_ids")]


LONG = ("the replacement forward calls self.get_input_embeddings, which " + "very " * 30 + "long words follow here; "
        "and then the evidence")


@pytest.mark.parametrize("width", [60, 80, 99, 100, 120, 160])
def test_every_line_fits_the_width_and_a_cut_headline_ends_with_an_ellipsis(width):
    findings = (_finding(30, "A", message=LONG, file="pkg/" + "deep/" * 8 + "worker.py"),
                _finding(31, "B", message=LONG, status=Status.CHANGED, check="block-hashing"),
                _finding(32, "C", message="short", fix="a fix " * 40, status=Status.UNKNOWN))
    text = terminal.render(Result(findings), view=View(width=width))
    assert max(len(line) for line in text.splitlines()) <= width
    entries = {line: words for _, line, _, _, words in _entries(text)}
    assert entries[30].endswith("…") and entries[31].endswith("…")
    assert entries[32] == "short" or entries[32].startswith("short  → a fix") and entries[32].endswith("…")


def test_a_failing_finding_takes_a_second_line_only_on_a_narrow_terminal():
    findings = (_finding(30, "A", message=LONG), _finding(31, "B", message=LONG, status=Status.CHANGED))

    def lines_of(width: int) -> list[str]:
        lines = terminal.render(Result(findings), view=View(width=width)).splitlines()
        return lines[lines.index("pkg/worker.py") + 1:lines.index("pkg/worker.py") + 4]

    narrow, wide = lines_of(80), lines_of(terminal.NARROW)
    assert narrow[0].lstrip().startswith("30  BROKEN") and narrow[1].startswith(" " * 10)  # a second line
    assert narrow[2].lstrip().startswith("31  CHANGED")  # one line: it does not fail the run
    assert wide[0].lstrip().startswith("30  BROKEN") and wide[1].lstrip().startswith("31  CHANGED")


@pytest.mark.parametrize("broken", [5, terminal.SCREEN - 10, terminal.SCREEN - 5, terminal.SCREEN + 5])
def test_second_lines_go_while_the_report_fits_the_screen_in_the_report_order(broken):
    findings = tuple(_finding(i, f"S{i}", message=LONG) for i in range(1, broken + 1))
    lines = terminal.render(Result(findings), view=View(width=80)).splitlines()
    rows = [k for k, line in enumerate(lines) if re.match(r"\s+\d+  BROKEN", line)]
    assert len(rows) == broken
    second = [k for k in rows if lines[k + 1].startswith(" " * 10) and k + 1 not in rows]
    one_line_each = len(lines) - len(second)
    # as many second lines as fit (none where one line each is a screen already), the first findings first
    assert len(second) == max(0, min(broken, terminal.SCREEN - one_line_each))
    assert second == rows[:len(second)]
    assert len(lines) <= max(terminal.SCREEN, one_line_each)


def test_the_footer_says_how_to_see_more_and_names_the_reports_whole():
    findings = (_finding(30, "A"), _finding(31, "B", status=Status.OK))
    long = "reports/" + "x" * 90
    text = terminal.render(Result(findings), view=View(width=80, written=(f"{long}.json", f"{long}.md")))
    lines = text.splitlines()
    assert lines[-1].startswith("FAIL") and f"reports: {long}.{{json,md}}" in lines[-2]  # a path is never cut
    assert "--details" in text and "--show-ok lists the 1 ok" in text
    shown = terminal.render(Result(findings), show_ok=True, view=View(width=80))
    assert "--show-ok" not in shown and "OK" in shown


def test_what_the_files_say_is_escaped_in_the_compact_view():
    findings = (_finding(3, "A", file="pkg/\x1b]0;pwned\x07.py", message="bad \x1b[2J name"),)
    text = terminal.render(Result(findings), view=View(width=120))
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[2J" in text


def test_a_long_file_name_keeps_its_end_and_the_message_cites_its_own_lines_by_number():
    deep = "pkg/" + "deep/" * 20 + "worker.py"
    message = f"the loop at {deep}:12 and the one at lib/{deep}:12 stop; and more"
    text = terminal.render(Result((_finding(12, "A", file=deep, message=message),)), view=View(width=60))
    heading = next(line for line in text.splitlines() if line.endswith("worker.py"))
    assert heading.startswith("…") and len(heading) == 60
    message = "the loop at pkg/w.py:12 and the one at lib/pkg/w.py:12 stop; and more"
    wide = terminal.render(Result((_finding(12, "A", file="pkg/w.py", message=message),)), view=View(width=160))
    assert "the loop at line 12 and the one at lib/pkg/w.py:12 stop  → use" in wide


def test_a_finding_without_a_location_and_a_passing_result():
    findings = (Finding("build", Status.ERROR, "vllm", None, None, "cannot read the build: OSError: gone"),)
    text = terminal.render(Result(findings), view=View(width=80))
    assert "(no location)\n  ERROR" in text and "cannot read the build" in text
    passing = terminal.render(Result((_finding(3, "A", status=Status.OK),)), view=View(width=80)).splitlines()
    assert passing[0] == passing[-1] and passing[0].startswith("PASS: 1 ok")


# --- the default audit of speculators against a real release, read statically ------------------------------------


@pytest.fixture(scope="module")
def default_audit(tmp_path_factory):
    """``python -m compat.audit --confirm never --vllm 0.32.0`` (reports written to reports/) at 80 and 120
    columns, and with --details; each run's exit code, standard output, and the JSON report of the first."""
    from compat.audit.cli import main

    cwd = tmp_path_factory.mktemp("audit")
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        for key, extra in ((80, []), (120, []), ("details", ["--details", "--no-reports"])):
            mp.setenv("COLUMNS", "120" if key == "details" else str(key))
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = main(["--confirm", "never", "--vllm", "0.32.0", *extra])
            runs[key] = (code, out.getvalue())
        reports = sorted(Path("reports").iterdir())
        report = json.loads(next(p for p in reports if p.suffix == ".json").read_text(encoding="utf-8"))
    return runs, report, [str(p.relative_to(cwd)) if p.is_absolute() else str(p) for p in reports]


def _groups(findings: list[dict]) -> Counter:
    """(file, line, status, check) of each line the compact view should show: findings with one fix at one
    place (and one status and check) once."""
    seen, out = set(), Counter()
    for f in findings:
        key = (f["place"]["file"], f["place"]["line"], f["status"].upper(), f["probe"])
        if f["fix"] and (key, f["fix"]) in seen:
            continue
        seen.add((key, f["fix"]))
        out[key] += 1
    return out


@pytest.mark.network
@pytest.mark.parametrize("width", [80, 120])
def test_the_default_audit_fits_one_screen(default_audit, width):
    runs, report, written = default_audit
    code, text = runs[width]
    lines = text.splitlines()
    assert code == report["summary"]["exit_code"]
    assert len(lines) <= 50, text
    assert max(len(line) for line in lines) <= width
    assert lines[0] == lines[-1] and lines[0].startswith("FAIL: " if code else "PASS: ")
    not_ok = [f for f in report["findings"] if f["status"] != "ok"]
    assert not_ok and all(f["place"] for f in not_ok)  # every finding here is at a line of the consumer
    entries = _entries(text)
    assert Counter((h, line, status, check) for h, line, status, check, _ in entries) == _groups(not_ok)
    headings = [h for h, *_ in entries]
    assert headings == sorted(headings)
    for file in set(headings):
        numbers = [line for h, line, *_ in entries if h == file]
        assert numbers == sorted(numbers)  # as numbers: 30 before 109
    for f in not_ok:
        same = [f2 for f2 in not_ok if f2["fix"] == f["fix"] and f2["place"] == f["place"]
                and f2["status"] == f["status"] and f2["probe"] == f["probe"]]
        if f["fix"] and len(same) > 1:
            assert any(e[:2] == (f["place"]["file"], f["place"]["line"]) and f"({len(same)} findings)" in e[4]
                       for e in entries)
    _nothing_cut_silently(entries, not_ok)
    assert f"reports: {written[0].rpartition('.')[0]}.{{json,md}}" in text and "--details" in text


def _nothing_cut_silently(entries, findings) -> None:
    """Each line's headline is a finding's whole, or the start of one ending with '…'; at 80 columns some are cut."""
    squeeze = "".join
    for file, line, status, check, text in entries:
        said = re.sub(r" \(\d+ findings\)", "", text.split("  → ")[0].split(" → ")[0])
        candidates = [headline(re.sub(re.escape(file) + r":(\d+)", r"line \1", f["message"])) for f in findings
                      if (f["place"]["file"], f["place"]["line"], f["status"].upper(), f["probe"]) ==
                      (file, line, status, check)]
        whole = [c for c in candidates if squeeze(c.split()) == squeeze(said.split())]
        started = [c for c in candidates if said.endswith("…")
                   and squeeze(c.split()).startswith(squeeze(said[:-1].split()))]
        assert whole or started, (file, line, said, candidates)


@pytest.mark.network
def test_the_default_audit_cuts_what_does_not_fit_80_columns_with_an_ellipsis(default_audit):
    runs, _, _ = default_audit
    assert any("…" in text for *_, text in _entries(runs[80][1]))


@pytest.mark.network
def test_details_hold_every_message_and_fix_in_full(default_audit):
    runs, report, _ = default_audit
    code, text = runs["details"]
    squeezed = "".join(text.split())
    assert code == report["summary"]["exit_code"] and len(text.splitlines()) > len(runs[120][1].splitlines())
    for f in report["findings"]:  # a group's first finding in full, the others by what differs: their symbol
        if f["status"] != "ok":
            assert "".join(f["message"].split()) in squeezed or "".join(f"also:{f['symbol']}".split()) in squeezed
            assert not f["fix"] or "".join(f"fix:{f['fix']}".split()) in squeezed
    assert text.splitlines()[0].endswith("(ok findings hidden; --show-ok lists them)")


def test_details_is_a_documented_flag():
    from compat.audit.cli import parser

    assert "--details" in parser().format_help() and parser().parse_args(["--details"]).details
