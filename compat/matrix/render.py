"""The matrix as text: terminal, JSON, Markdown and JUnit (the HTML page is ``compat.matrix.html``)."""

from __future__ import annotations

import json
import shutil
import textwrap
from xml.sax.saxutils import escape, quoteattr

from compat.findings import Status
from compat.matrix.result import BLANK, LEGEND, STORY, Matrix, Row

MARK = {"ok": ".", "broken": "B", "changed": "C", "unknown": "?", "error": "E"}
COLOR = {"ok": "32", "broken": "31;1", "changed": "33;1", "unknown": "90", "error": "35;1"}
FORMATS = ("terminal", "json", "markdown", "junit", "html")


def render(matrix: Matrix, fmt: str, color: bool = False, all_rows: bool = False, width: int | None = None) -> str:
    if fmt == "json":
        return json.dumps(matrix.as_json(), indent=2) + "\n"
    if fmt == "markdown":
        return markdown(matrix, all_rows)
    if fmt == "junit":
        return junit(matrix)
    if fmt == "html":
        from compat.matrix.html import page

        return page(matrix)
    return terminal(matrix, color, all_rows, width)


def _rows(matrix: Matrix, all_rows: bool) -> list[Row]:
    return matrix.rows if all_rows else matrix.interesting()


def _counts(matrix: Matrix) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for column in matrix.columns:
        counts = {s: 0 for s in MARK}
        for row in matrix.rows:
            cell = row.cells.get(column.label)
            if cell is not None:
                counts[cell.status] = counts.get(cell.status, 0) + 1
        out[column.label] = counts
    return out


def terminal_legend() -> str:
    return "legend: " + "  ".join(f"{MARK[s]} {LEGEND[s]}" for s in MARK) + f"  (blank) {BLANK}"


def terminal(matrix: Matrix, color: bool, all_rows: bool, width: int | None = None) -> str:
    """The matrix for a terminal ``width`` columns wide (the terminal's, else $COLUMNS, else 80): build columns
    that do not fit beside the touchpoints wrap into several blocks, each repeating the touchpoint names."""
    width = max(40, width or shutil.get_terminal_size().columns)
    columns = matrix.columns
    rows = _rows(matrix, all_rows)

    def paint(status: str, text: str) -> str:
        return f"\033[{COLOR[status]}m{text}\033[0m" if color and status in COLOR else text

    def wrap(text: str, indent: str = "") -> list[str]:
        return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]

    title = (f"{matrix.consumer} {matrix.consumer_version or ''}".rstrip()
             + f": {len(matrix.rows)} touchpoints x {len(columns)} builds "
             f"({columns[0].label} .. {columns[-1].label})" if columns else matrix.consumer)
    lines = wrap(title)
    for i, column in enumerate(columns):
        problem = f"  ERROR: {column.error}" if column.error else ""
        lines += wrap(f"  [{i:2}] {column.label}{problem}", " " * 7)
    lines.append("")
    stories = {r.key: r.story(columns, matrix.fail_on).label() for r in rows}
    story_w = min(max([len(s) for s in stories.values()] + [len("first bad (last good)")]), width - 22)
    names = [_name(r) for r in rows]
    one_block = width - 2 - 3 * len(columns) - story_w  # room for names when every build fits beside them
    name_w = min(max([len(n) for n in names] + [10]), max(24, width * 2 // 5, one_block))
    per_block = max(1, (width - name_w - 2) // 3)
    blocks = [list(range(i, min(i + per_block, len(columns)))) for i in range(0, len(columns), per_block)] or [[]]
    if name_w + 2 + 3 * len(blocks[-1]) + story_w > width:
        blocks.append([])  # the last block has no room for what happened: it gets a block of its own
    for b, block in enumerate(blocks):
        last = b == len(blocks) - 1
        if b:
            lines.append("")
        # the last block's names give way to what happened, down to 16 characters
        nw = max(16, min(name_w, width - 2 - 3 * len(block) - story_w)) if last else name_w
        sw = width - nw - 2 - 3 * len(block)
        header = " " * (nw + 2) + "".join(f"{i % 100:<3}" for i in block)
        lines.append((header + (_cut("first bad (last good)", sw) if last else "")).rstrip())
        for row in rows:
            marks = "".join(paint(row.cells[columns[i].label].status,
                                  MARK.get(row.cells[columns[i].label].status, "?")) + "  "
                            if columns[i].label in row.cells else "   " for i in block)
            story = _cut(stories[row.key], sw) if last else ""
            lines.append(f"{_short(row, nw):<{nw}}  {marks}{story}".rstrip())
    if not rows:
        lines.append("every touchpoint is ok in every build")
    lines.append("")
    lines += wrap(terminal_legend(), "  ")
    lines += wrap(STORY, "  ")
    lines += wrap("rows: " + ("all" if all_rows else "those not ok in every build (--all-rows for all)"))
    return "\n".join(lines) + "\n"


def _left(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[len(text) - max(0, width - 3):]


def _short(row: Row, width: int) -> str:
    """The row's name in ``width`` characters: its place by file name and line, then the touchpoint's head cut
    first (the tail names the symbol)."""
    name = _name(row)
    if len(name) <= width:
        return name
    location = (row.location or "").rpartition("/")[2]
    room = width - len(row.probe) - 2
    if len(row.touchpoint) + len(location) > room:
        location = _left(location, max(room - len(row.touchpoint), room // 2))
    return _cut(f"{row.probe} {_left(row.touchpoint, room - len(location))} {location}".strip(), width)


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its middle elided when it is longer."""
    if len(text) <= width:
        return text
    head = (width - 3) // 2
    return text[:head] + "..." + text[len(text) - (width - 3 - head):]


def _name(row: Row, width: int = 100) -> str:
    """The row's probe, touchpoint and place, cut from the left of the touchpoint to ``width``."""
    touchpoint = row.touchpoint
    rest = f"{row.probe}  {row.location or ''}"
    room = max(20, width - len(rest) - 1)
    if len(touchpoint) > room:
        touchpoint = "..." + touchpoint[-(room - 3):]
    return f"{row.probe} {touchpoint} {row.location or ''}".strip()


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(matrix: Matrix, all_rows: bool) -> str:
    columns = matrix.columns
    rows = _rows(matrix, all_rows)
    out = [f"# vLLM compatibility matrix: {matrix.consumer} {matrix.consumer_version or ''}".rstrip(), ""]
    out.append(f"{len(matrix.rows)} touchpoints against {len(columns)} builds; "
               f"{len(matrix.interesting())} are not ok in every build.")
    out.append("")
    errors = [c for c in columns if c.error]
    for column in errors:
        out.append(f"- build `{column.label}` could not be read: {_md(column.error or '')}")
    if errors:
        out.append("")
    out += ["## Where each touchpoint breaks", "", "| probe | touchpoint | consumer | first bad | last good | "
            "at the first bad build | then |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        story = row.story(columns, matrix.fail_on)
        if story.first_bad is None:
            continue
        message = row.cells[story.first_bad].message
        bad = f"at or before {story.first_bad}" if story.broken_before_range else story.first_bad
        then = ", ".join(([f"fixed in {story.fixed_in}"] if story.fixed_in else [])
                         + ([f"broken again in {story.broken_again_in}"] if story.broken_again_in else []))
        out.append(f"| {row.probe} | `{_md(row.touchpoint)}` | {row.location or ''} | {bad} | "
                   f"{story.last_good or '-'} | {_md(message[:300])} | {then or '-'} |")
    out += ["", "'at or before B': already failing (--fail-on) at B, the first build of the range, so the matrix "
            "cannot say when it broke; 'fixed in F': fine again from F."]
    out += ["", "## Every build", "", "| touchpoint | " + " | ".join(c.label for c in columns) + " |",
            "|---|" + "---|" * len(columns)]
    symbol = {"ok": "ok", "broken": "**broken**", "changed": "*changed*", "unknown": "?", "error": "error"}
    for row in rows:
        cells = [symbol.get(row.cells[c.label].status, "") if c.label in row.cells else "" for c in columns]
        out.append(f"| {row.probe} `{_md(row.touchpoint)}` {row.location or ''} | " + " | ".join(cells) + " |")
    out += ["", "Cells: " + ", ".join(f"{symbol[s]} {LEGEND[s]}" for s in MARK) + f", blank: {BLANK}."]
    counts = _counts(matrix)
    out += ["", "| build | " + " | ".join(MARK) + " |", "|---|" + "---|" * len(MARK)]
    for column in columns:
        out.append(f"| {column.label} | " + " | ".join(str(counts[column.label].get(s, 0)) for s in MARK) + " |")
    return "\n".join(out) + "\n"


def junit(matrix: Matrix) -> str:
    """One test suite per build, one test case per touchpoint: broken and changed fail, error errs, unknown
    is skipped."""
    suites = []
    for column in matrix.columns:
        cases = []
        failures = errors = skipped = 0
        for row in matrix.rows:
            cell = row.cells.get(column.label)
            if cell is None:
                continue
            name = quoteattr(f"{row.touchpoint} @ {row.location or '-'}")
            body = ""
            if cell.status in (Status.BROKEN, Status.CHANGED):
                failures += 1
                body = f"<failure message={quoteattr(cell.message[:500])} type={quoteattr(cell.status)}>" \
                       f"{escape(cell.message)}{escape(chr(10) + 'fix: ' + cell.fix) if cell.fix else ''}</failure>"
            elif cell.status == Status.ERROR:
                errors += 1
                body = f"<error message={quoteattr(cell.message[:500])}>{escape(cell.message)}</error>"
            elif cell.status == Status.UNKNOWN:
                skipped += 1
                body = f"<skipped message={quoteattr(cell.message[:500])}/>"
            cases.append(f'    <testcase classname={quoteattr(row.probe)} name={name}>{body}</testcase>')
        suites.append(f'  <testsuite name={quoteattr("vllm " + column.label)} tests="{len(cases)}" '
                      f'failures="{failures}" errors="{errors}" skipped="{skipped}">\n' + "\n".join(cases)
                      + "\n  </testsuite>")
    name = quoteattr(f"vllm-compat matrix {matrix.consumer} {matrix.consumer_version or ''}".strip())
    return f'<?xml version="1.0" encoding="utf-8"?>\n<testsuites name={name}>\n' + "\n".join(suites) \
        + "\n</testsuites>\n"
