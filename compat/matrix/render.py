"""The matrix as text: terminal, JSON, Markdown and JUnit (the HTML page is ``compat.matrix.html``)."""

from __future__ import annotations

import json
from xml.sax.saxutils import escape, quoteattr

from compat.matrix.model import Matrix, Row

MARK = {"ok": ".", "broken": "B", "changed": "C", "unknown": "?", "error": "E"}
COLOR = {"ok": "32", "broken": "31;1", "changed": "33;1", "unknown": "90", "error": "35;1"}
FORMATS = ("terminal", "json", "markdown", "junit", "html")


def render(matrix: Matrix, fmt: str, color: bool = False, all_rows: bool = False) -> str:
    if fmt == "json":
        return json.dumps(matrix.as_json(), indent=2) + "\n"
    if fmt == "markdown":
        return markdown(matrix, all_rows)
    if fmt == "junit":
        return junit(matrix)
    if fmt == "html":
        from compat.matrix.html import page

        return page(matrix)
    return terminal(matrix, color, all_rows)


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


def terminal(matrix: Matrix, color: bool, all_rows: bool) -> str:
    columns = matrix.columns
    rows = _rows(matrix, all_rows)

    def paint(status: str, text: str) -> str:
        return f"\033[{COLOR[status]}m{text}\033[0m" if color and status in COLOR else text

    lines = [f"{matrix.consumer} {matrix.consumer_version or ''}".rstrip()
             + f": {len(matrix.rows)} touchpoints x {len(columns)} builds "
             f"({columns[0].label} .. {columns[-1].label})" if columns else matrix.consumer]
    for i, column in enumerate(columns):
        problem = f"  ERROR: {column.error}" if column.error else ""
        lines.append(f"  [{i:2}] {column.label}{problem}")
    lines.append("")
    width = max([len(_name(r)) for r in rows] + [10])
    header = " " * (width + 2) + "".join(f"{i % 100:<3}" for i in range(len(columns)))
    lines.append(header + " first bad (last good)")
    for row in rows:
        marks = "".join(paint(row.cells[c.label].status, MARK.get(row.cells[c.label].status, "?")) + "  "
                        if c.label in row.cells else "   " for c in columns)
        bad, good = row.first_bad(columns, matrix.fail_on)
        lines.append(f"{_name(row):<{width}}  {marks}{bad or '-'} ({good or '-'})")
    if not rows:
        lines.append("every touchpoint is ok in every build")
    lines.append("")
    lines.append("legend: . ok  B broken  C changed  ? unknown  E error; rows: " +
                 ("all" if all_rows else "those not ok in every build (--all-rows for all)"))
    return "\n".join(lines) + "\n"


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
            "at the first bad build |", "|---|---|---|---|---|---|"]
    for row in rows:
        bad, good = row.first_bad(columns, matrix.fail_on)
        if bad is None:
            continue
        message = row.cells[bad].message
        out.append(f"| {row.probe} | `{_md(row.touchpoint)}` | {row.location or ''} | {bad} | {good or '-'} | "
                   f"{_md(message[:300])} |")
    out += ["", "## Every build", "", "| touchpoint | " + " | ".join(c.label for c in columns) + " |",
            "|---|" + "---|" * len(columns)]
    symbol = {"ok": "ok", "broken": "**broken**", "changed": "*changed*", "unknown": "?", "error": "error"}
    for row in rows:
        cells = [symbol.get(row.cells[c.label].status, "") if c.label in row.cells else "" for c in columns]
        out.append(f"| {row.probe} `{_md(row.touchpoint)}` {row.location or ''} | " + " | ".join(cells) + " |")
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
            if cell.status in ("broken", "changed"):
                failures += 1
                body = f"<failure message={quoteattr(cell.message[:500])} type={quoteattr(cell.status)}>" \
                       f"{escape(cell.message)}{escape(chr(10) + 'fix: ' + cell.fix) if cell.fix else ''}</failure>"
            elif cell.status == "error":
                errors += 1
                body = f"<error message={quoteattr(cell.message[:500])}>{escape(cell.message)}</error>"
            elif cell.status == "unknown":
                skipped += 1
                body = f"<skipped message={quoteattr(cell.message[:500])}/>"
            cases.append(f'    <testcase classname={quoteattr(row.probe)} name={name}>{body}</testcase>')
        suites.append(f'  <testsuite name={quoteattr("vllm " + column.label)} tests="{len(cases)}" '
                      f'failures="{failures}" errors="{errors}" skipped="{skipped}">\n' + "\n".join(cases)
                      + "\n  </testsuite>")
    name = quoteattr(f"vllm-compat matrix {matrix.consumer} {matrix.consumer_version or ''}".strip())
    return f'<?xml version="1.0" encoding="utf-8"?>\n<testsuites name={name}>\n' + "\n".join(suites) \
        + "\n</testsuites>\n"
