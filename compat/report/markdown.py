"""Markdown for a pull-request comment."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from compat.findings import Finding, Status
from compat.report.escaping import escaped
from compat.report.repeats import Repeats, summarised

if TYPE_CHECKING:
    from compat.report.reportable import Reportable

_ICON = {Status.OK: "✅", Status.BROKEN: "❌", Status.CHANGED: "⚠️", Status.UNKNOWN: "❔", Status.ERROR: "💥"}


_MARKUP = re.compile(r"[\\`*\[<&~|]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
"""What opens markup in running text in Markdown (GitHub's): emphasis (``_`` only at a word's edge, as in
``seq_len`` it opens none), links and images, HTML and autolinks, entities, code, strikethrough, table pipes.
A file's name or a tensor's can hold any of it: ``[x](https://…)`` would be a link in the pull request,
``<img src=…>`` an image fetched from anywhere."""


_AUTOLINK = re.compile(r"@|(?<=#)(?=[0-9])|(?i:(?<=www)(?=\.)|(?<=[a-z])(?=://))")
"""Where GitHub would turn plain text into a link or a notification: ``@someone`` (a mention; ``a@b.c`` an email
link), ``#12`` (an issue), ``https://…`` and ``www.…`` (extended autolinks). A zero-width space there breaks each,
and the text reads the same."""
_ZWSP = "&#8203;"


def _cell(text: str | None) -> str:
    """One line of a table cell or list item as plain text: control characters (from the files read) escaped,
    Markdown's markup characters shown as themselves, no mention, issue reference or bare link made of it."""
    plain = _MARKUP.sub(lambda m: "\\" + m.group(), escaped((text or "").replace("\n", " ")))
    return _AUTOLINK.sub(lambda m: m.group() + _ZWSP, plain)


def _code(text: str | None, in_table: bool = True) -> str:
    """``text`` as inline code, which Markdown shows as written: fenced by more backticks than any run of them
    in it (a name may hold backticks); in a table, pipes escaped (GitHub splits cells at them even in code)."""
    if not text:
        return ""
    inner = escaped(text.replace("\n", " "))
    if in_table:
        inner = inner.replace("|", "\\|")
    fence = "`" * (max(map(len, re.findall("`+", inner)), default=0) + 1)
    pad = " " if inner.startswith("`") or inner.endswith("`") else ""
    return f"{fence}{pad}{inner}{pad}{fence}"


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
        rows = summarised(problems)
        for f in rows:
            if isinstance(f, Repeats):
                out.append(f"| | {_cell(f.like.check)} | | | … {_cell(f.text())} | |")
                continue
            allowed = f" _(allowed: {_cell(f.allowed)})_" if f.allowed else ""
            out.append(f"| {_ICON[f.status]} {f.status.value} | {_cell(f.check)} | {_code(f.consumer_location)} | "
                       f"{_code(f.vllm_location)} | {_cell(f.message)}{allowed} | {_cell(f.fix)} |")
        out.append("")
        evidence = [f for f in rows if isinstance(f, Finding) and (f.evidence.written_for or f.evidence.audited)]
        if evidence:
            out.append("<details><summary>Evidence (signature written for → audited)</summary>")
            out.append("")
            for f in evidence:
                out.append(f"- {_code(f.symbol, False)} at {_code(f.consumer_location, False)}")
                if f.evidence.written_for:
                    out.append(f"  - was ({_cell(f.evidence.written_for_build)}): "
                               f"{_code(f.evidence.written_for, False)}")
                if f.evidence.audited:
                    out.append(f"  - now: {_code(f.evidence.audited, False)}")
            out.append("")
            out.append("</details>")
            out.append("")
    if show_ok:
        oks = [f for f in result.findings if f.status is Status.OK]
        out.append(f"<details><summary>{len(oks)} ok</summary>")
        out.append("")
        out += [f"- … {_cell(f.text())}" if isinstance(f, Repeats) else
                f"- {_cell(f.check)} {_code(f.consumer_location, False)}: {_cell(f.message)}" for f in summarised(oks)]
        out.append("")
        out.append("</details>")
    return "\n".join(out) + "\n"
