"""Accepted findings: a TOML file of entries, each matched against findings and carrying a reason.

    [[allow]]
    probe = "call"                                  # optional
    symbol = "vllm.v1.request.Request"              # optional; a trailing * matches a prefix
    location = "speculators/data_generation/*"      # optional; fnmatch pattern on consumer_location
    status = "broken"                               # optional
    reason = "patched at run time by our shim"      # required
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from pathlib import Path

from compat.errors import CompatError
from compat.findings import Finding

_KEYS = {"probe", "symbol", "location", "status", "reason"}


@dataclass(frozen=True)
class AllowEntry:
    reason: str
    probe: str | None = None
    symbol: str | None = None
    location: str | None = None
    status: str | None = None

    def matches(self, finding: Finding) -> bool:
        if self.probe and self.probe != finding.check:
            return False
        if self.status and self.status != finding.status.value:
            return False
        if self.symbol and not any(fnmatch.fnmatchcase(s or "", self.symbol)
                                   for s in (finding.symbol, finding.touchpoint)):
            return False
        if self.location and not fnmatch.fnmatchcase(finding.consumer_location or "", self.location):
            return False
        return True


def load(path: Path) -> list[AllowEntry]:
    import tomllib  # here, not at the top: only --allow needs it, and every audit imports this module

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CompatError(f"--allow {path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise CompatError(f"--allow {path}: not valid TOML: {exc}") from exc
    entries = []
    for index, raw in enumerate(data.get("allow", [])):
        unknown = set(raw) - _KEYS
        if unknown:
            raise CompatError(f"--allow {path}: entry {index + 1} has unknown keys {sorted(unknown)}")
        if not str(raw.get("reason", "")).strip():
            raise CompatError(f"--allow {path}: entry {index + 1} has no reason; every accepted finding needs one")
        if not any(raw.get(k) for k in ("probe", "symbol", "location")):
            raise CompatError(f"--allow {path}: entry {index + 1} matches everything; name a probe, symbol or "
                              "location")
        entries.append(AllowEntry(**{k: str(v) for k, v in raw.items()}))
    return entries


def apply(findings: list[Finding], entries: list[AllowEntry]) -> list[Finding]:
    out = []
    for finding in findings:
        entry = next((e for e in entries if e.matches(finding)), None)
        out.append(replace(finding, allowed=entry.reason) if entry else finding)
    return out
