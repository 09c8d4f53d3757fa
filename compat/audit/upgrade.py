"""Upgrade mode: audit one consumer against two builds and keep only what changed between them."""

from __future__ import annotations

import re
from dataclasses import replace

from compat.audit.pipeline import Auditor
from compat.audit.result import AuditResult
from compat.findings import Evidence
from compat.vllm.builds import open_build


def upgrade(auditor: Auditor, baseline: str, target: str | None) -> AuditResult:
    options = auditor.options
    scan = auditor.scan_consumer()
    base = open_build(baseline, options.target)
    new = open_build(target, options.target, options.vllm_version)
    before = auditor.run(scan, base, written_for=None)
    after = auditor.run(scan, new, written_for=base.surface)
    previous = {f.key: f for f in before.findings}
    changed = []
    for finding in after.findings:
        old = previous.get(finding.key)
        if old is not None and old.status == finding.status and _same(old.evidence.audited, finding.evidence.audited):
            continue
        was = old.status.value if old is not None else "absent"
        evidence = Evidence(written_for=old.evidence.audited if old is not None else None,
                            audited=finding.evidence.audited, written_for_build=base.surface.build.version,
                            traceback=finding.evidence.traceback, extra=finding.evidence.extra)
        # A status that changed says so, "absent" for a touchpoint the baseline did not have (a new start-up step
        # the consumer needs no more than before is "absent -> ok", with why).
        message = finding.message if old is not None and old.status == finding.status else (
            f"{was} -> {finding.status.value}: {finding.message}")
        changed.append(replace(finding, message=message, evidence=evidence))
    notes = tuple(dict.fromkeys(before.notes + after.notes))
    return AuditResult(scan, after.build, tuple(changed), None, notes, options.fail_on, base.surface.build, "upgrade")


def _same(before: str | None, after: str | None) -> bool:
    """Equal evidence, ignoring line numbers: code that only moved within a file has not changed."""
    strip = re.compile(r":\d+\b")
    return strip.sub("", before or "") == strip.sub("", after or "")
