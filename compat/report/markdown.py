"""Markdown for a pull-request comment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compat.findings import Status
from compat.report.escaping import escaped

if TYPE_CHECKING:
    from compat.report.reportable import Reportable

_ICON = {Status.OK: "✅", Status.BROKEN: "❌", Status.CHANGED: "⚠️", Status.UNKNOWN: "❔", Status.ERROR: "💥"}


def _cell(text: str | None) -> str:
    """One line of a table cell or list item, its control characters (from the files read) escaped."""
    return escaped((text or "").replace("\n", " ")).replace("|", "\\|")


def _code(text: str | None) -> str:
    return f"`{_cell(text)}`" if text else ""


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    counts = result.counts()
    verdict = "❌ fail" if result.exit_code else "✅ pass"
    out = [f"## {result.tool}: {_cell(result.title())} — {verdict}", ""]
    out.append("| " + " | ".join(s.value for s in Status) + " | allowed |")
    out.append("|" + "---|" * (len(Status) + 1))
    out.append("| " + " | ".join(str(counts[s.value]) for s in Status) + f" | {counts['allowed']} |")
    out.append("")
    out += [f"- {label}: {_cell(text)}" for label, text in result.facts()]
    out.append("")
    problems = [f for f in result.findings if f.status is not Status.OK]
    if problems:
        out.append("| | probe | where | vLLM | message | fix |")
        out.append("|---|---|---|---|---|---|")
        for f in problems:
            allowed = f" _(allowed: {_cell(f.allowed)})_" if f.allowed else ""
            out.append(f"| {_ICON[f.status]} {f.status.value} | {_cell(f.check)} | {_code(f.consumer_location)} | "
                       f"{_code(f.vllm_location)} | {_cell(f.message)}{allowed} | {_cell(f.fix)} |")
        out.append("")
        evidence = [f for f in problems if f.evidence.written_for or f.evidence.audited]
        if evidence:
            out.append("<details><summary>Evidence (signature written for → audited)</summary>")
            out.append("")
            for f in evidence:
                out.append(f"- `{_cell(f.symbol)}` at {_code(f.consumer_location)}")
                if f.evidence.written_for:
                    out.append(f"  - was ({f.evidence.written_for_build}): {_code(f.evidence.written_for)}")
                if f.evidence.audited:
                    out.append(f"  - now: {_code(f.evidence.audited)}")
            out.append("")
            out.append("</details>")
            out.append("")
    if show_ok:
        oks = [f for f in result.findings if f.status is Status.OK]
        out.append(f"<details><summary>{len(oks)} ok</summary>")
        out.append("")
        out += [f"- {_cell(f.check)} {_code(f.consumer_location)}: {_cell(f.message)}" for f in oks]
        out.append("")
        out.append("</details>")
    return "\n".join(out) + "\n"
