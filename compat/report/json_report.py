"""The JSON report (schema ``compat.audit/1``, documented in the README)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from compat import __version__

if TYPE_CHECKING:
    from compat.auditor import AuditResult

SCHEMA = "compat.audit/1"


def as_dict(result: AuditResult) -> dict[str, Any]:
    scan = result.scan
    return {
        "schema": SCHEMA,
        "generated_by": f"compat {__version__}",
        "mode": result.mode,
        "consumer": {"name": scan.name, "version": scan.version, "origin": scan.origin, "files": scan.files,
                     "touchpoints": len(scan.touchpoints), "written_for": scan.written_for},
        "vllm": asdict(result.build),
        "baseline": asdict(result.baseline) if result.baseline else None,
        "written_for": asdict(result.written_for) if result.written_for else None,
        "notes": list(result.notes),
        "summary": {**result.counts(), "exit_code": result.exit_code, "strict": result.strict},
        "findings": [f.as_dict() | {"touchpoint": f.touchpoint} for f in result.findings],
    }


def render(result: AuditResult) -> str:
    return json.dumps(as_dict(result), indent=2) + "\n"
