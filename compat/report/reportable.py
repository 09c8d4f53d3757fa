"""What a renderer needs of a result (the audit's, the gate's)."""

from __future__ import annotations

from typing import Any, Protocol

from compat.findings import Finding


class Reportable(Protocol):
    """What a renderer needs of a result (the audit's, the gate's): findings and a few words about them."""

    @property
    def findings(self) -> tuple[Finding, ...]: ...

    @property
    def tool(self) -> str:
        """Names the tool in report titles: 'vllm-compat', 'compat.gate'."""

    @property
    def source_root(self) -> str:
        """Directory the findings' consumer locations are relative to."""

    def counts(self) -> dict[str, int]: ...

    def failing(self) -> list[Finding]: ...

    @property
    def exit_code(self) -> int: ...

    def title(self) -> str: ...

    def facts(self) -> list[tuple[str, str]]:
        """(label, text) lines shown above the findings."""

    def as_json(self) -> dict[str, Any]: ...
