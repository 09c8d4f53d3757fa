"""Report formats. Each renderer turns an ``AuditResult`` into text and knows nothing about vLLM."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compat.auditor import AuditResult


class Format(str, Enum):
    TERMINAL = "terminal"
    JSON = "json"
    MARKDOWN = "markdown"
    JUNIT = "junit"
    GITHUB = "github"


def render(result: AuditResult, fmt: Format, color: bool = False, show_ok: bool = False) -> str:
    from compat.report import github, json_report, junit, markdown, terminal

    if fmt is Format.TERMINAL:
        return terminal.render(result, color=color, show_ok=show_ok)
    if fmt is Format.JSON:
        return json_report.render(result)
    if fmt is Format.MARKDOWN:
        return markdown.render(result, show_ok=show_ok)
    if fmt is Format.JUNIT:
        return junit.render(result)
    return github.render(result)


def build_label(build) -> str:
    if build is None:
        return "-"
    return f"{build.name} {build.version or '(version unknown)'} [{build.reading}]"
