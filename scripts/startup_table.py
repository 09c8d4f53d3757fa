"""Write docs/startup-and-defaults.md: every start-up step and default of vLLM's that speculators 0.3.0 meets
differently from vLLM 0.11.0 (the build it was written for), release by release up to the newest one read, with
the verdict on each platform and the reason, as the audit derives them from each release's code.

    python scripts/startup_table.py [--releases '>=0.11.0,<=0.34.0'] [--output docs/startup-and-defaults.md]

Each release is audited as ``python -m compat.audit --vllm X`` audits it (the start-up and defaults probes, with
0.11.0 as the written-for build); a row is a step or field, from the first release where it is not ok (or first
appears, for a step) to the newest, with the newest release's verdict per platform.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from compat import sources
from compat.audit.pipeline import AuditOptions, Auditor
from compat.cache import atomic_write_text
from compat.consumer.scan import scan_tree
from compat.findings import Finding, Status
from compat.fix.pipeline import resolve_builds
from compat.vllm.builds import open_build

ROOT = Path(__file__).resolve().parent.parent
PROBES = ("startup", "defaults")
PLATFORMS = ("cuda", "cpu")


@dataclass
class Row:
    probe: str
    name: str
    first: str
    seen: list[str] = field(default_factory=list)
    last: Finding | None = None
    last_version: str = ""


def _platform_verdict(finding: Finding, platform: str) -> str:
    extra = dict(finding.evidence.extra)
    said = extra.get(f"platform_{platform}")
    if finding.check == "startup":
        return said or finding.status.value
    return f"{finding.status.value}: {said}" if said else finding.status.value


def _name(finding: Finding) -> str:
    if finding.check == "startup":
        return (finding.touchpoint or finding.symbol).removeprefix("startup:")
    return finding.symbol.removeprefix("vllm.config.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default=">=0.11.0")
    parser.add_argument("--output", default=str(ROOT / "docs" / "startup-and-defaults.md"))
    args = parser.parse_args(argv)
    versions, _ = resolve_builds(args.releases)
    versions = [v for v in versions if v.endswith(".0")]
    scan = scan_tree(sources.tree_from_release("speculators", "0.3.0"))
    written_for = open_build("0.11.0").surface
    auditor = Auditor(AuditOptions(confirm="never"))
    rows: dict[tuple[str, str], Row] = {}
    for version in versions:
        print(f"startup_table: vLLM {version}", file=sys.stderr)
        result = auditor.run(scan, open_build(version), written_for=written_for)
        for finding in result.findings:
            if finding.check not in PROBES:
                continue
            key = (finding.check, _name(finding))
            interesting = finding.status is not Status.OK or finding.check == "startup" and (
                "on CUDA:" in finding.message or "new since" in finding.message)
            if key not in rows and not interesting:
                continue
            row = rows.setdefault(key, Row(finding.check, key[1], version))
            row.seen.append(version)
            row.last, row.last_version = finding, version
    lines = [
        "# Start-up steps and defaults, vLLM 0.11.0 to " + versions[-1],
        "",
        "Written by `scripts/startup_table.py` (do not edit by hand): every start-up step the engine core performs",
        "that speculators 0.3.0's hand-built pipeline does not, and every default of a config it builds, that the",
        "audit judges differently from vLLM 0.11.0 (the build speculators was written for), with the newest",
        "release's verdict on each platform and why. Releases read: " + ", ".join(versions) + ".",
        "",
        "| kind | step or field | from | verdict | CUDA | CPU | why (newest release) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in sorted(rows.values(), key=lambda r: (r.probe, versions.index(r.first), r.name)):
        assert row.last is not None
        why = row.last.message.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {row.probe} | `{row.name}` | {row.first} | {row.last.status.value} ({row.last_version}) | "
                     f"{_platform_verdict(row.last, 'cuda')} | {_platform_verdict(row.last, 'cpu')} | {why} |")
    atomic_write_text(Path(args.output), "\n".join(lines) + "\n")
    print(f"startup_table: wrote {args.output} ({len(rows)} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
