"""The audit's result: the scan, the build, the findings, and what the reports say about them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from compat import __version__
from compat.consumer.result import Scan
from compat.findings import Finding
from compat.policy import DEFAULT, FailOn, Verdict
from compat.report import build_label
from compat.vllm.surface import BuildInfo

SCHEMA = "compat.audit/1"


@dataclass(frozen=True)
class AuditResult(Verdict):
    scan: Scan
    build: BuildInfo
    findings: tuple[Finding, ...]
    written_for: BuildInfo | None = None
    notes: tuple[str, ...] = ()
    fail_on: FailOn = DEFAULT
    baseline: BuildInfo | None = None
    mode: str = "audit"

    tool = "vllm-compat"

    @property
    def source_root(self) -> str:
        return self.scan.root

    def title(self) -> str:
        title = f"{self.scan.name} {self.scan.version or ''}".rstrip() + f" against {build_label(self.build)}"
        return title + (f" (upgrade from {self.baseline.version})" if self.baseline else "")

    def facts(self) -> list[tuple[str, str]]:
        scan = self.scan
        facts = [("consumer", f"{scan.name} {scan.version or ''} ({scan.origin})".replace("  ", " ")
                  + (f"; name from {scan.name_at}" if scan.name_at else "")),
                 ("vLLM", f"{build_label(self.build)} - {self.build.origin}")]
        if scan.pin is not None:
            facts.append(("vLLM pin", scan.pin.describe()))
        if self.baseline:
            facts.append(("baseline", f"{build_label(self.baseline)} - {self.baseline.origin}; only what changed "
                                      "between the two builds is listed"))
        elif self.written_for:
            facts.append(("written for", f"{build_label(self.written_for)} (evidence shows its signatures)"))
        facts += [("note", n) for n in self.notes]
        facts.append(("scanned", f"{scan.files} files, {len(scan.touchpoints)} touchpoints"))
        return facts

    def as_json(self) -> dict[str, Any]:
        scan = self.scan
        return {
            "schema": SCHEMA,
            "generated_by": f"compat {__version__}",
            "mode": self.mode,
            "consumer": {"name": scan.name, "version": scan.version, "origin": scan.origin, "files": scan.files,
                         "touchpoints": len(scan.touchpoints), "written_for": scan.written_for,
                         "name_from": scan.name_at, "pin": asdict(scan.pin) if scan.pin else None},
            "vllm": asdict(self.build),
            "baseline": asdict(self.baseline) if self.baseline else None,
            "written_for": asdict(self.written_for) if self.written_for else None,
            "notes": list(self.notes),
            "summary": {**self.counts(), "exit_code": self.exit_code,
                        "fail_on": self.fail_on.value, "strict": self.fail_on is FailOn.UNKNOWN},
            "findings": [f.as_dict() | {"touchpoint": f.touchpoint} for f in self.findings],
        }
