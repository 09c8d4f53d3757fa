"""A readable table for the terminal (colour when writing to a TTY)."""

from __future__ import annotations

import shutil
import textwrap
from typing import TYPE_CHECKING

from compat.findings import Finding, Status
from compat.report.escaping import escaped as e

if TYPE_CHECKING:
    from compat.report.reportable import Reportable

_COLORS = {Status.OK: "32", Status.BROKEN: "31;1", Status.CHANGED: "33;1", Status.UNKNOWN: "36", Status.ERROR: "35;1"}


def _paint(text: str, status: Status, color: bool) -> str:
    return f"\x1b[{_COLORS[status]}m{text}\x1b[0m" if color else text


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    width = max(80, min(shutil.get_terminal_size((120, 20)).columns, 160))
    verdict = _verdict(result, color, show_ok)
    # Every text is escaped (``e``): file names, tensor names and exception texts come from the files read.
    lines = [verdict, ""] + [f"{label:9}: {e(text)}" for label, text in result.facts()]
    lines.append("")
    shown = [f for f in result.findings if show_ok or f.status is not Status.OK]
    for group in _alike(shown):
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
    if shown:
        lines.append("")
    lines.append(verdict)  # first and last: read from the top, or as the last line of a long log
    return "\n".join(lines) + "\n"


def _verdict(result: Reportable, color: bool, show_ok: bool) -> str:
    counts = result.counts()
    summary = ", ".join(_paint(f"{counts[s.value]} {s.value}", s, color and counts[s.value] > 0) for s in Status)
    if counts["allowed"]:
        summary += f", {counts['allowed']} allowed"
    verdict = "FAIL" if result.exit_code else "PASS"
    return f"{verdict}: {summary}" + ("" if show_ok else " (ok findings hidden; --show-ok lists them)")


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
