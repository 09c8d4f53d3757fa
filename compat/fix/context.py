"""What a fixer sees: the consumer's scan and, for every audited build, its findings and its facts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from compat.consumer.result import Kind, Scan, TouchPoint
from compat.facts import Fact
from compat.findings import Finding, Status
from compat.probe import Probe
from compat.vllm.surface import Surface

T = TypeVar("T")
FAILING = (Status.BROKEN, Status.CHANGED)


@dataclass(frozen=True)
class AuditedBuild:
    version: str
    surface: Surface
    findings: tuple[Finding, ...]

    def fact(self, fact: Fact[T], *inputs: Any) -> T:
        return self.surface.fact(fact, *inputs)


@dataclass(frozen=True)
class Shim:
    """Where the shim module goes and how the patched files name it."""

    module: str
    """Dotted name (``speculators._vllm_compat``)."""
    path: str
    """File, relative to the consumer's root."""
    alias: str = "vllm_compat"

    @property
    def import_line(self) -> str:
        package, _, name = self.module.rpartition(".")
        return f"from {package} import {name} as {self.alias}" if package else f"import {name} as {self.alias}"


@dataclass(frozen=True)
class FixContext:
    scan: Scan
    builds: tuple[AuditedBuild, ...]
    """Oldest first."""
    shim: Shim
    fixers: tuple[str, ...] = ()
    """The fixers that plan this fix (``--without`` leaves some out): a fixer whose code builds on another's
    shim code plans only where that one runs."""

    def failing(self, probe: Probe) -> list[tuple[AuditedBuild, Finding]]:
        """Every broken or changed finding of ``probe``, with the build it came from."""
        return [(build, f) for build in self.builds for f in build.findings
                if f.check == probe.name and f.status in FAILING]

    def by_location(self, pairs: Iterable[tuple[AuditedBuild, Finding]]) -> dict[str, list[tuple[AuditedBuild,
                                                                                                  Finding]]]:
        """The same finding across builds, grouped by where it is in the consumer."""
        grouped: dict[str, list[tuple[AuditedBuild, Finding]]] = {}
        for build, finding in pairs:
            grouped.setdefault(finding.consumer_location or "", []).append((build, finding))
        return grouped

    def touchpoint(self, location: str, kind: Kind | None = None, symbol: str | None = None) -> TouchPoint | None:
        """The touchpoint of ``kind`` at ``location``; with ``symbol``, the one of that symbol when the line has
        several (``VllmConfig(scheduler_config=SchedulerConfig(...))`` is two calls on one line)."""
        here = [tp for tp in self.scan.touchpoints
                if str(tp.location) == location and (kind is None or tp.kind == kind)]
        return next((tp for tp in here if tp.symbol == symbol), here[0] if here else None)

    @property
    def root(self) -> Path:
        """The consumer's source root (edits and the shim's path are relative to it)."""
        return Path(self.scan.root)

    @property
    def versions(self) -> str:
        return _span([b.version for b in self.builds])


def span(builds: Iterable[AuditedBuild]) -> str:
    """'0.11.1-0.33.0 (10 builds)' for a run of builds."""
    return _span([b.version for b in builds])


def _span(versions: list[str]) -> str:
    if not versions:
        return "no build"
    if len(versions) == 1:
        return f"vLLM {versions[0]}"
    return f"vLLM {versions[0]}-{versions[-1]} ({len(versions)} builds)"
