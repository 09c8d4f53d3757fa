"""Findings: one verdict per touchpoint and check (an audit probe or a gate rule), rendered by ``compat.report``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compat.location import Location


class Status(StrEnum):
    OK = "ok"
    BROKEN = "broken"
    CHANGED = "changed"
    UNKNOWN = "unknown"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"error": 0, "broken": 1, "changed": 2, "unknown": 3, "ok": 4}[self.value]


class FindingKind(StrEnum):
    """What a finding is about (``Finding.kind``): a touchpoint of one of ``compat.consumer.result.Kind``'s kinds,
    or one of the build-level concerns."""

    IMPORT = "import"
    """An import of a vLLM name."""
    CALL = "call"
    """A call of a vLLM callable."""
    ATTRIBUTE = "attribute"
    """An attribute of a vLLM object, read, stored or called."""
    RPC = "rpc"
    """A worker RPC."""
    PATCH = "patch"
    """The consumer's code in vLLM's place (a patch, an override, a replacement)."""
    STARTUP = "startup"
    """The engine core's start-up steps the consumer replays."""
    RUNTIME = "runtime"
    """What a real engine did (the runtime confirmation)."""
    MODEL = "model"
    """A model's forward the consumer replaces."""
    GATE = "gate"
    """The consumer's own check of the build's version, run when a module of it is imported."""


@dataclass(frozen=True)
class Evidence:
    """The signature (or fact) the consumer was written for, and the audited one."""

    written_for: str | None = None
    audited: str | None = None
    written_for_build: str | None = None
    traceback: str | None = None
    extra: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"written_for": self.written_for, "audited": self.audited}
        if self.written_for_build:
            out["written_for_build"] = self.written_for_build
        if self.traceback:
            out["traceback"] = self.traceback
        for key, value in self.extra:
            out[key] = value
        return out


@dataclass(frozen=True)
class Confirmation:
    """What a runtime finding says of the static verdicts of ``probes``: the engine agrees (True), disagrees
    (False), or could not confirm them (None); ``text`` names what was compared."""

    probes: tuple[str, ...]
    agree: bool | None
    text: str


@dataclass(frozen=True)
class Place:
    """A finding's ``consumer_location`` as its maker knew it, split once: a file name may hold ':'
    (``req-2024-01-01T12:00:07.safetensors``), so no report splits the location's text to find a line."""

    file: str
    line: int | None = None
    """A line of the file (the audit's touchpoints)."""
    sample: int | None = None
    """A sample of a file holding a list of them (the gate's ``path:i``): an index, not a line."""

    @classmethod
    def at(cls, location: Location) -> Place:
        """The place of a consumer's ``Location`` (a line 0 names none)."""
        return cls(location.file, location.line or None)

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "sample": self.sample}


def by_place(finding: Finding) -> tuple[str, int]:
    """A finding's place as a sort key: its file, then its line (or sample) as a number (``:30`` before
    ``:109``); a finding without a place by its location's text."""
    place = finding.place
    if place is not None:
        return place.file, place.line or place.sample or 0
    where = finding.consumer_location or ""
    file, _, line = where.rpartition(":")  # a probe that made no Place: for sorting only, never for a report
    return (file, int(line)) if file and line.isdigit() else (where, 0)


@dataclass(frozen=True)
class Finding:
    check: str
    """What made the finding: an audit probe's name, or a gate rule's (``"probe"`` in both JSON schemas)."""
    status: Status
    symbol: str
    consumer_location: str | None
    vllm_location: str | None
    message: str
    evidence: Evidence = field(default_factory=Evidence)
    fix: str | None = None
    kind: FindingKind | None = None
    """None for findings about the build or the audit itself."""
    code: str | None = None
    """The consumer's source line."""
    allowed: str | None = None
    """The allow-list reason when the finding was accepted."""
    touchpoint: str | None = None
    """The touchpoint as the scan named it; with check and location, a finding's identity across builds."""
    confirmation: Confirmation | None = None
    """For the runtime confirmation's findings: their verdict on other probes' static findings."""
    place: Place | None = None
    """``consumer_location`` split into file and line (or sample); None where there is no location, or where
    the location is a file name and nothing more."""

    def __post_init__(self) -> None:
        if not self.message or not self.message.strip():
            raise ValueError(f"finding of {self.check} for {self.symbol} has an empty message")

    @property
    def key(self) -> tuple[str, str, str | None]:
        """Identity across builds: the same check on the same consumer line and symbol."""
        return (self.check, self.touchpoint or self.symbol, self.consumer_location)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "probe": self.check,
            "status": self.status.value,
            "symbol": self.symbol,
            "consumer_location": self.consumer_location,
            "vllm_location": self.vllm_location,
            "message": self.message,
            "evidence": self.evidence.as_dict(),
            "fix": self.fix,
        }
        if self.kind:
            out["kind"] = self.kind
        if self.code:
            out["code"] = self.code
        if self.allowed:
            out["allowed"] = self.allowed
        if self.place:
            out["place"] = self.place.as_dict()
        return out

    @property
    def file_and_line(self) -> tuple[str | None, int | None]:
        """The file of ``consumer_location`` (whole, whatever ':' it holds) and its line, if it names one."""
        if self.place:
            return self.place.file, self.place.line
        return self.consumer_location, None


def status_counts(findings: tuple[Finding, ...] | list[Finding]) -> dict[str, int]:
    """How many findings have each status, and how many an allow-list accepted."""
    counts = {s.value: 0 for s in Status}
    for finding in findings:
        counts[finding.status.value] += 1
    counts["allowed"] = sum(1 for f in findings if f.allowed)
    return counts
