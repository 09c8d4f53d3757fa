"""Report formats. Each renderer (one module per format) turns a ``Reportable`` result (the audit's, the
gate's) into text and knows nothing about vLLM."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from compat.report import github, json_report, junit, markdown, terminal
from compat.report.reportable import Reportable
from compat.report.terminal import View


class Format(str, Enum):
    TERMINAL = "terminal"
    JSON = "json"
    MARKDOWN = "markdown"
    JUNIT = "junit"
    GITHUB = "github"


RENDERERS: dict[Format, Callable[..., str]] = {
    Format.TERMINAL: terminal.render, Format.JSON: json_report.render, Format.MARKDOWN: markdown.render,
    Format.JUNIT: junit.render, Format.GITHUB: github.render,
}
"""Each renderer is ``render(result, color=False, show_ok=False) -> str``; the terminal's also takes a ``View``."""

__all__ = ["Format", "RENDERERS", "Reportable", "View", "build_label", "render"]


def render(result: Reportable, fmt: Format, color: bool = False, show_ok: bool = False,
           view: View | None = None) -> str:
    """``result`` in ``fmt``; ``view`` lays out the terminal format (compact unless it asks for details), the
    other formats always hold everything."""
    if fmt is Format.TERMINAL:
        return terminal.render(result, color=color, show_ok=show_ok, view=view)
    return RENDERERS[fmt](result, color=color, show_ok=show_ok)


def build_label(build) -> str:
    if build is None:
        return "-"
    return f"{build.name} {build.version or '(version unknown)'} [{build.reading}]"
