"""A readable table for the terminal (colour when writing to a TTY)."""

from __future__ import annotations

import shutil
import textwrap
from typing import TYPE_CHECKING

from compat.findings import Status
from compat.report.escaping import escaped as e

if TYPE_CHECKING:
    from compat.report.reportable import Reportable

_COLORS = {Status.OK: "32", Status.BROKEN: "31;1", Status.CHANGED: "33;1", Status.UNKNOWN: "36", Status.ERROR: "35;1"}


def _paint(text: str, status: Status, color: bool) -> str:
    return f"\x1b[{_COLORS[status]}m{text}\x1b[0m" if color else text


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    width = max(80, min(shutil.get_terminal_size((120, 20)).columns, 160))
    # Every text is escaped (``e``): file names, tensor names and exception texts come from the files read.
    lines = [f"{label:9}: {e(text)}" for label, text in result.facts()]
    lines.append("")
    shown = [f for f in result.findings if show_ok or f.status is not Status.OK]
    for f in shown:
        tag = _paint(f"{f.status.value.upper():8}", f.status, color)
        allowed = f" [allowed: {e(f.allowed)}]" if f.allowed else ""
        lines.append(f"{tag} {f.check:9} {e(f.consumer_location) or '-'}{allowed}")
        body = textwrap.wrap(e(f.message, keep="\n"), width - 19) or [""]
        lines += [" " * 19 + chunk for chunk in body]
        if f.symbol:
            lines.append(" " * 19 + f"symbol: {e(f.symbol)}" + (f"  ({e(f.vllm_location)})" if f.vllm_location
                                                                  else ""))
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
    counts = result.counts()
    if shown:
        lines.append("")
    summary = ", ".join(_paint(f"{counts[s.value]} {s.value}", s, color and counts[s.value] > 0) for s in Status)
    if counts["allowed"]:
        summary += f", {counts['allowed']} allowed"
    verdict = "FAIL" if result.exit_code else "PASS"
    lines.append(f"{verdict}: {summary}" + ("" if show_ok else " (ok findings hidden; --show-ok lists them)"))
    return "\n".join(lines) + "\n"
