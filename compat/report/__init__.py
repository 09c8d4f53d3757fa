"""Report formats. Each renderer turns an ``AuditResult`` into text and knows nothing about vLLM."""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol

from compat.findings import Finding


class Format(str, Enum):
    TERMINAL = "terminal"
    JSON = "json"
    MARKDOWN = "markdown"
    JUNIT = "junit"
    GITHUB = "github"


class Reportable(Protocol):
    """What a renderer needs of a result (the audit's, the gate's): findings and a few words about them."""

    findings: tuple[Finding, ...]
    tool: str
    """Names the tool in report titles: 'vllm-compat', 'compat.gate'."""
    source_root: str
    """Directory the findings' consumer locations are relative to."""

    def counts(self) -> dict[str, int]: ...

    def failing(self) -> list[Finding]: ...

    @property
    def exit_code(self) -> int: ...

    def title(self) -> str: ...

    def facts(self) -> list[tuple[str, str]]:
        """(label, text) lines shown above the findings."""

    def as_json(self) -> dict[str, Any]: ...


def render(result: Reportable, fmt: Format, color: bool = False, show_ok: bool = False) -> str:
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
