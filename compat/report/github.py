"""GitHub Actions workflow commands: an annotation per finding that needs attention."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from compat.findings import Status
from compat.report.escaping import escaped
from compat.report.repeats import Repeats, summarised

if TYPE_CHECKING:
    from compat.report.reportable import Reportable


def _escape(text: str, prop: bool = False) -> str:
    """``text`` as a workflow command's data (a property's value with ``prop``), which GitHub decodes back.

    Control characters from the files read are escaped first (GitHub's log shows ANSI sequences): a message
    keeps its line breaks, a property has none."""
    text = escaped(text, keep="" if prop else "\n").replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def _file(result: Reportable, relpath: str) -> str:
    """Annotations need paths relative to the workspace: map the consumer's files there when possible."""
    absolute = Path(result.source_root) / relpath
    try:
        return os.path.relpath(absolute, Path.cwd()) if absolute.is_relative_to(Path.cwd()) else relpath
    except ValueError:
        return relpath


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    failing = set(map(id, result.failing()))
    lines = []
    for f in summarised(f for f in result.findings if f.status is not Status.OK):
        if isinstance(f, Repeats):  # one annotation for the rest of a kind (GitHub shows only the first few)
            level = "error" if id(f.like) in failing else ("notice" if f.like.allowed else "warning")
            lines.append(f"::{level} title={_escape(f'{result.tool} {f.like.check}: {f.like.status.value}', True)}"
                         f"::{_escape(f.text())}")
            continue
        level = "error" if id(f) in failing else ("notice" if f.allowed else "warning")
        # The title names the symbol: a gate sample's ``file#i`` (an index is not a line).
        props = [f"title={_escape(f'{result.tool} {f.check}: {f.status.value}: {f.symbol}', True)}"]
        file, line = f.file_and_line
        if file:
            props = [f"file={_escape(_file(result, file), True)}"] + ([f"line={line}"] if line is not None else []) \
                + props
        message = f.message + (f" Fix: {f.fix}" if f.fix else "")
        if f.evidence.audited:
            message += f"\nnow: {f.evidence.audited}"
        lines.append(f"::{level} {','.join(props)}::{_escape(message)}")
    counts = result.counts()
    lines.append(f"::notice title={result.tool}::{_escape(result.title())}: "
                 + ", ".join(f"{counts[s.value]} {s.value}" for s in Status))
    return "\n".join(lines) + "\n"
