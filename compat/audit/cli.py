"""``python -m compat.audit``: audit a consumer of vLLM's internals against a vLLM build.

Exit codes: 0 nothing fails, 1 a finding fails under --fail-on (default: broken or error), 2 the audit could not
run (or --vllm names several builds: this reads one).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from compat import policy
from compat.audit.pipeline import DEFAULT_CONSUMER, AuditOptions, Auditor
from compat.audit.result import SCHEMA, AuditResult
from compat.cache import atomic_write_text
from compat.cli import JsonErrors, emit, exit_after, guarded
from compat.probe import DEFAULT_ARCHITECTURES, DEFAULT_WORKER_CLASS
from compat.report import Format, View, render


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.audit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--consumer", default=DEFAULT_CONSUMER,
                   help="requirement (speculators==0.3.0), installed distribution, wheel/sdist, .py file or "
                        f"directory (default: {DEFAULT_CONSUMER})")
    p.add_argument("--vllm", default=None,
                   help="one build: installed | latest | VERSION | newest:SPECIFIER | wheel/sdist | source directory | "
                        "URL | git+URL@REF; a bare SPECIFIER (every matching release) is refused unless one release "
                        "matches; installed imports the installed vLLM and reads it with inspect.signature "
                        "(default: where vLLM is installed, its files read statically, without importing it; "
                        "else latest)")
    p.add_argument("--baseline", default=None,
                   help="upgrade mode: audit this build too and report only what changed between the two")
    p.add_argument("--written-for", default="auto",
                   help="the vLLM the consumer was written for, shown as evidence (default: its own pin, from "
                        "pyproject.toml, setup.cfg, requirements*.txt or its metadata; 'none' to skip)")
    p.add_argument("--format", choices=[f.value for f in Format], default=Format.TERMINAL.value)
    p.add_argument("--output", type=Path, help="write the report to this file instead of standard output")
    p.add_argument("--reports-dir", type=Path, default=Path("reports"),
                   help="where the JSON and Markdown reports also land (default: reports/)")
    p.add_argument("--no-reports", action="store_true", help="do not write reports/ files")
    p.add_argument("--allow", type=Path, help="TOML allow-list of accepted findings, each with a reason")
    policy.add_option(p)
    p.add_argument("--strict", action="store_true", help="the same as --fail-on unknown")
    p.add_argument("--worker-class", default=DEFAULT_WORKER_CLASS,
                   help=f"vLLM worker class RPC names resolve against (default: {DEFAULT_WORKER_CLASS})")
    p.add_argument("--vllm-version", help="version to assume for the audited build (dev builds)")
    p.add_argument("--architectures", default=",".join(DEFAULT_ARCHITECTURES),
                   help="comma-separated model architectures the model-convention probe checks "
                        f"(default: {','.join(DEFAULT_ARCHITECTURES)})")
    p.add_argument("--confirm", choices=["auto", "always", "never"], default="auto",
                   help="confirm the semantic probes on real engines (tiny models, child processes, about 2 minutes; "
                        "installed vLLM only); auto (default): only when a verdict it checks is unknown statically; "
                        "always: every time")
    p.add_argument("--confirm-timeout", type=float, default=300.0, help="seconds per engine check (default 300)")
    p.add_argument("--target", default="vllm", help=argparse.SUPPRESS)
    p.add_argument("--all-files", action="store_true",
                   help="audit the consumer's tests, examples and docs too (default: only what it ships)")
    p.add_argument("--show-ok", action="store_true", help="list ok findings too")
    p.add_argument("--details", action="store_true",
                   help="show each finding in full (message, symbol, evidence, fix) instead of one line per finding "
                        "(the terminal format; the others always hold everything)")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    p.add_argument("--list-probes", action="store_true", help="list the probes and exit")
    p.add_argument("--debug", action="store_true", help="show full tracebacks for internal errors")
    return p


def _slug(text: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text or "unknown").strip("-")


def write_reports(result: AuditResult, directory: Path) -> list[Path]:
    scan = result.scan
    stem = f"{result.mode}-{_slug(scan.name)}-{_slug(scan.version)}-vllm-"
    stem += f"{_slug(result.baseline.version)}-to-" if result.baseline else ""
    stem += _slug(result.build.version)
    written = []
    for fmt, suffix in ((Format.JSON, ".json"), (Format.MARKDOWN, ".md")):
        path = directory / f"{stem}{suffix}"
        atomic_write_text(path, render(result, fmt))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    json_errors = JsonErrors(SCHEMA, args.output) if args.format == Format.JSON.value else None
    return guarded("compat.audit", args.debug, lambda: _audit(args), json_errors)


def _audit(args: argparse.Namespace) -> int:
    if args.list_probes:
        from compat.probes import all_probes

        for probe in all_probes():
            print(f"{probe.name:12} {probe.description}")
        return 0
    fail_on = policy.choose(args.fail_on, args.strict)
    said: list[str] = []
    vllm = _one_build(args.vllm, "--vllm", args.target, said)
    baseline = _one_build(args.baseline, "--baseline", args.target, said)
    options = AuditOptions(consumer=args.consumer, vllm=vllm,
                           written_for=None if args.written_for == "none" else args.written_for,
                           worker_class=args.worker_class, allow=args.allow, fail_on=fail_on,
                           target=args.target, vllm_version=args.vllm_version,
                           architectures=tuple(a.strip() for a in args.architectures.split(",") if a.strip()),
                           confirm=args.confirm, confirm_timeout=args.confirm_timeout, all_files=args.all_files)
    if options.allow is not None:
        from compat.audit import allowlist

        allowlist.load(options.allow)  # bad allow-lists fail before any download
    auditor = Auditor(options)
    if baseline:
        from compat.audit.upgrade import upgrade

        result = upgrade(auditor, baseline, vllm)
    else:
        result = auditor.run()
    for line in said:
        print(f"compat.audit: {line}", file=sys.stderr)
    written = [] if args.no_reports else write_reports(result, args.reports_dir)
    fmt = Format(args.format)
    emit(result, fmt, args.color, args.output, args.show_ok,
         View(details=args.details, written=tuple(str(p) for p in written)))
    if fmt is not Format.TERMINAL:  # the terminal report names them itself, above its last line
        for path in written:
            print(f"report: {path}", file=sys.stderr)
    return result.exit_code


def _one_build(text: str | None, flag: str, target: str, said: list[str]) -> str | None:
    """The one build ``text`` names (``compat.buildspec``; what it resolved to appended to ``said``, for standard
    error once the audit ran); None: the default build."""
    if text is None:
        return None
    from compat.matrix.builds import Request, one_build

    spec, line = one_build(text, Request([text], target=target), "compat.audit", flag)
    said.append(line)
    return spec


def run() -> None:
    exit_after(main)
