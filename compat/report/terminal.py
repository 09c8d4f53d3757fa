"""The report for a terminal (colour when writing to a TTY): compact by default, one line per finding (or per
group of findings with one cause and one fix) under its file's name, in the order of files and lines as
numbers, the verdict first and last; with ``View(details=True)`` each finding in full, as ``--details`` asks."""

from __future__ import annotations

import re
import shutil
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compat.findings import Finding, Status, by_place
from compat.report.escaping import escaped as e
from compat.report.headline import cut, fix_in_brief, headline
from compat.report.repeats import Repeats, summarised

if TYPE_CHECKING:
    from compat.report.reportable import Reportable

_COLORS = {Status.OK: "32", Status.BROKEN: "31;1", Status.CHANGED: "33;1", Status.UNKNOWN: "36", Status.ERROR: "35;1"}
ARROW = "  → "
_STATUS_WIDTH = max(len(s.value) for s in Status)
_MIN_FIX = 16
"""Fewer columns than this left beside a headline: the fix is not shown (a cut this short says nothing)."""
NARROW = 100
"""A terminal narrower than this gives a failing finding a second line, while the report fits ``SCREEN``."""
SCREEN = 50
"""Lines the compact report keeps within where it can: second lines go to failing findings, in the report's
order, only while the whole report (verdicts, facts, headings, footer) stays within this many."""


@dataclass(frozen=True)
class View:
    """How the terminal report is laid out."""

    details: bool = False
    """Each finding in full (message, symbol, evidence, fix) instead of one line per finding."""
    width: int | None = None
    """Columns to fit (None: the terminal's, else $COLUMNS, else 120)."""
    written: tuple[str, ...] = ()
    """Files the same result was also written to (the JSON and Markdown reports), named above the last verdict."""


def render(result: Reportable, color: bool = False, show_ok: bool = False, view: View | None = None) -> str:
    view = view or View()
    return (_detailed if view.details else _compact)(result, color, show_ok, view)


def _columns(view: View, narrowest: int) -> int:
    return max(narrowest, min(view.width or shutil.get_terminal_size((120, 20)).columns, 160))


def _paint(text: str, status: Status, color: bool) -> str:
    return f"\x1b[{_COLORS[status]}m{text}\x1b[0m" if color else text


def _compact(result: Reportable, color: bool, show_ok: bool, view: View) -> str:
    width = _columns(view, 60)
    verdict = _verdict(result, color, hint=False)
    facts = result.facts()
    label_width = max((len(label) for label, _ in facts), default=0)
    # Every text is escaped (``e``): file names, messages and exception texts come from the files read.
    lines = [verdict] + [cut(f"{label:<{label_width}} : {e(text)}", width) for label, text in facts]
    shown = sorted((f for f in result.findings if show_ok or f.status is not Status.OK), key=by_place)
    groups = _groups(summarised(shown))
    alike = [g for g in groups if not isinstance(g, Repeats)]
    where_width = max((len(_where(g[0])) for g in alike), default=0)
    check_width = max((len(g[0].check) for g in alike), default=0)
    failing = {id(f) for f in result.failing()}
    indent = 2 + (where_width + 2 if where_width else 0) + _STATUS_WIDTH + 1 + check_width + 2
    texts = [[cut("… " + e(g.text()), width - indent)] if isinstance(g, Repeats) else
             _fitted(g[0], len(g), width - indent, 1) for g in groups]
    footer = [""] + _footer(result, show_ok, view, width, more=bool(groups)) + [verdict]
    files: list[str] = []
    for g in groups:  # a summary stays under the heading of the finding it follows
        files.append(files[-1] if isinstance(g, Repeats) else g[0].file_and_line[0] or "(no location)")
    headings = sum(1 for k, file in enumerate(files) if k == 0 or file != files[k - 1])
    room = SCREEN - len(lines) - 2 * headings - len(groups) - len(footer)
    for i, group in enumerate(groups):
        # a failing finding keeps more of its words where the terminal is narrow: a second line, while it fits
        if not isinstance(group, Repeats) and width < NARROW and id(group[0]) in failing and room > 0:
            longer = _fitted(group[0], len(group), width - indent, 2)
            if len(longer) == 2:
                texts[i], room = longer, room - 1
    heading: str | None = None
    for group, file, said in zip(groups, files, texts):
        if isinstance(group, Repeats):
            lines.append(" " * indent + said[0])
            continue
        f = group[0]
        if file != heading:
            lines += ["", e(file) if len(e(file)) <= width else "…" + e(file)[1 - width:]]  # the name's end
            heading = file
        line = f"  {_where(f):>{where_width}}  " if where_width else "  "
        status = f"{f.status.value.upper():<{_STATUS_WIDTH}}"
        after = f" {f.check:<{check_width}}  "
        lines.append(line + _paint(status, f.status, color) + after + said[0])
        lines += [" " * indent + text for text in said[1:]]
    return "\n".join(lines + footer) + "\n"


def _where(f: Finding) -> str:
    """The finding's line (or a sample's index) in its file, which the heading above it names."""
    if f.place and f.place.line:
        return str(f.place.line)
    if f.place and f.place.sample is not None:
        return f"[{f.place.sample}]"
    return ""


def _fitted(f: Finding, alike: int, room: int, most: int) -> list[str]:
    """What is wrong, and the fix where it fits, in at most ``most`` lines of ``room`` columns; the count of a
    group's findings and an allowance are never cut."""
    message = e(f.message)
    if f.place and f.place.line:  # the file the heading names, cited in the message: its line is enough
        message = re.sub(r"(?<![\w./-])" + re.escape(e(f.place.file)) + r":(\d+)", r"line \1", message)
    said = headline(message)
    tail = (f" ({alike} findings)" if alike > 1 else "") + (" [allowed]" if f.allowed else "")
    fixes = fix_in_brief(e(f.fix)) if f.fix else []
    for text in [said + tail + ARROW + fix for fix in fixes] + [said + tail]:
        wrapped = _wrap(text, room)
        if len(wrapped) <= most:
            return wrapped
    wrapped = _wrap(said, room)[:most]
    rest = said[len(" ".join(wrapped[:-1])):].strip()  # what the last line holds, and all that follows it
    wrapped[-1] = cut(rest, max(1, room - len(tail))) + tail
    left = room - len(wrapped[-1]) - len(ARROW)
    if fixes and len(wrapped) < most:
        wrapped.append(cut(ARROW.lstrip() + fixes[-1], room))
    elif fixes and left >= _MIN_FIX:
        wrapped[-1] += ARROW + cut(fixes[-1], left)
    return wrapped


def _wrap(text: str, room: int) -> list[str]:
    return textwrap.wrap(text, room, break_on_hyphens=False) or [""]


def _footer(result: Reportable, show_ok: bool, view: View, width: int, more: bool) -> list[str]:
    hidden = 0 if show_ok else result.counts()[Status.OK.value]
    hints = (["--details shows each finding in full"] if more else []) + \
            ([f"--show-ok lists the {hidden} ok"] if hidden else [])
    reports = f"reports: {_paths(view.written)}" if view.written else ""
    text = "; ".join(hints + ([reports] if reports else []))
    if len(text) <= width:
        return [text] if text else []
    # a path is never cut: where it is longer than the terminal, the terminal wraps it
    return [cut("; ".join(hints), width)] * bool(hints) + [reports] * bool(reports)


def _paths(paths: tuple[str, ...]) -> str:
    """``reports/a.json, reports/a.md`` as ``reports/a.{json,md}`` (one stem), else each path."""
    stems = {p.rpartition(".")[0] for p in paths}
    if len(paths) > 1 and len(stems) == 1 and all("." in p for p in paths):
        return e(f"{stems.pop()}.{{{','.join(p.rpartition('.')[2] for p in paths)}}}")
    return ", ".join(e(p) for p in paths)


def _detailed(result: Reportable, color: bool, show_ok: bool, view: View) -> str:
    width = _columns(view, 80)
    verdict = _verdict(result, color, hint=not show_ok)
    lines = [verdict, ""] + [f"{label:9}: {e(text)}" for label, text in result.facts()]
    lines.append("")
    shown = [f for f in result.findings if show_ok or f.status is not Status.OK]
    for group in _groups(summarised(shown)):
        if isinstance(group, Repeats):  # the rest of a kind shown three times already
            lines += [" " * 19 + chunk for chunk in textwrap.wrap("… " + e(group.text()), width - 19)]
        else:
            _finding_lines(lines, group, color, width)
    if shown:
        lines.append("")
    if view.written:
        lines += [f"reports: {_paths(view.written)}", ""]
    lines.append(verdict)  # first and last: read from the top, or as the last line of a long log
    return "\n".join(lines) + "\n"


def _finding_lines(lines: list[str], group: list[Finding], color: bool, width: int) -> None:
    """A finding in full (and the others of its group: one fix at one place), as ``--details`` shows it."""
    f = group[0]
    tag = _paint(f"{f.status.value.upper():8}", f.status, color)
    allowed = f" [allowed: {e(f.allowed)}]" if f.allowed else ""
    alike = f" ({len(group)} findings, one fix)" if len(group) > 1 else ""
    lines.append(f"{tag} {f.check:9} {e(f.consumer_location) or '-'}{alike}{allowed}")
    body = textwrap.wrap(e(f.message, keep="\n"), width - 19) or [""]
    lines += [" " * 19 + chunk for chunk in body]
    if f.symbol:
        lines.append(" " * 19 + f"symbol: {e(f.symbol)}" + (f"  ({e(f.vllm_location)})" if f.vllm_location
                                                              else ""))
    for other in group[1:]:  # the same fix at the same place: what differs is the symbol (an architecture)
        lines.append(" " * 19 + f"also  : {e(other.symbol)}" + (f"  ({e(other.vllm_location)})"
                                                                  if other.vllm_location else ""))
    if f.status is not Status.OK:
        changes = dict(f.evidence.extra).get("changes")
        long = len(f.evidence.written_for or "") + len(f.evidence.audited or "") > 2 * width
        if changes and long:
            lines.append(" " * 19 + f"changed: {e(changes)}  [since vLLM {f.evidence.written_for_build}]")
        else:
            if f.evidence.written_for and f.evidence.written_for != f.evidence.audited:
                lines.append(" " * 19 + f"was    : {e(f.evidence.written_for)}  "
                                        f"[vLLM {f.evidence.written_for_build}]")
            if f.evidence.audited:
                lines.append(" " * 19 + f"now    : {e(f.evidence.audited)}")
        if f.fix:
            lines.append(" " * 19 + f"fix    : {e(f.fix)}")
        if f.evidence.traceback:
            lines += [" " * 19 + e(t) for t in f.evidence.traceback.rstrip().splitlines()[-6:]]


def _verdict(result: Reportable, color: bool, hint: bool) -> str:
    counts = result.counts()
    summary = ", ".join(_paint(f"{counts[s.value]} {s.value}", s, color and counts[s.value] > 0) for s in Status)
    if counts["allowed"]:
        summary += f", {counts['allowed']} allowed"
    verdict = "FAIL" if result.exit_code else "PASS"
    return f"{verdict}: {summary}" + (" (ok findings hidden; --show-ok lists them)" if hint else "")


def _groups(items: list[Finding | Repeats]) -> list[list[Finding] | Repeats]:
    """``_alike``'s groups of each run of findings between summaries."""
    out: list[list[Finding] | Repeats] = []
    run: list[Finding] = []
    for item in items:
        if isinstance(item, Repeats):
            out += _alike(run)
            out.append(item)
            run = []
        else:
            run.append(item)
    return out + _alike(run)


def _alike(findings: list[Finding]) -> list[list[Finding]]:
    """Findings in their order, those next to each other with one cause and one fix (same status, check, place,
    fix and allowance: one patched method that five architectures' classes lack) in one group."""
    groups: list[list[Finding]] = []
    for f in findings:
        last = groups[-1][0] if groups else None
        if last is not None and f.fix and (f.status, f.check, f.consumer_location, f.fix, f.allowed) == \
                (last.status, last.check, last.consumer_location, last.fix, last.allowed):
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups
