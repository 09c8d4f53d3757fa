"""``python -m compat.fix``: a shim module and source edits that make a consumer of vLLM's internals run on
every build of a range, shown as a unified diff (default), written as a patched copy (``--apply DIR``), or
written into the consumer's own files (``--in-place``, the only way this tool changes a user's files).

The fixers try every broken or changed finding. The patched consumer is re-audited against every build of the
range before anything is written; the shim runs only on the builds whose re-audit is clean (it refuses the others,
naming what is left). Exit codes: 0 nothing left fails under --fail-on (``compat.policy``; the fix's default is
changed: a finding no fixer handles counts as at least changed, so the default exits 0 only clean), 1 some remain
(listed, with why no fixer handles them), 2 the fix could not be made (bad input, or code that is not what the
fix was planned for).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from compat import buildspec, policy
from compat.audit.pipeline import DEFAULT_CONSUMER
from compat.cache import atomic_write_text
from compat.cli import guarded
from compat.errors import CompatError
from compat.fix.pipeline import Fix, FixOptions, Verification, plan_fix, restricted, verify, write_copy, write_in_place

FIX_DEFAULT = policy.FailOn.CHANGED
"""The fix fails on what it leaves: a finding no fixer handles counts as at least ``changed``."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.fix", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--consumer", default=DEFAULT_CONSUMER, help=f"as for compat.audit (default {DEFAULT_CONSUMER})")
    p.add_argument("--vllm", default=None,
                   help="a specifier (every release matching it; newest:SPEC the newest only), a version, latest, "
                        "installed, a wheel/sdist/source directory, a URL, git+URL@REF; default: every release from "
                        "the one the consumer pins")
    p.add_argument("--report", type=Path, help="take --consumer and --vllm from an audit's JSON report")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--apply", type=Path, metavar="DIR", help="write a patched copy of the consumer to DIR")
    where.add_argument("--in-place", action="store_true", help="edit the consumer's own files (a directory)")
    p.add_argument("--output", type=Path, help="write the diff to this file instead of standard output")
    p.add_argument("--without", action="append", default=[], metavar="FIXER", help="leave a fixer out")
    p.add_argument("--no-verify", action="store_true", help="do not re-audit the patched consumer")
    policy.add_option(p, default=FIX_DEFAULT)
    p.add_argument("--list-fixers", action="store_true", help="list the fixers and exit")
    p.add_argument("--debug", action="store_true", help="show full tracebacks for internal errors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return guarded("compat.fix", args.debug, lambda: _fix(args))


def _from_report(path: Path) -> tuple[str, str]:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        consumer, build = report["consumer"], report["vllm"]
        return f"{consumer['name']}=={consumer['version']}", build["version"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CompatError(f"--report {path}: not an audit JSON report ({type(exc).__name__}: {exc})") from exc


def _fix(args: argparse.Namespace) -> int:
    if args.list_fixers:
        from compat.fix.fixer import all_fixers

        for fixer in all_fixers():
            print(f"{fixer.name:10} [{', '.join(fixer.checks)}] {fixer.description}")
        return 0
    consumer, vllm = args.consumer, args.vllm
    if args.report:
        consumer, vllm = _from_report(args.report)
    if vllm is not None:
        buildspec.parse(vllm)  # bad input: one line, exit 2, before the consumer is read
    if args.in_place and not Path(consumer).is_dir():
        raise CompatError(f"--in-place needs the consumer as a directory of its sources, not {consumer!r}")
    # The fix's own default is `changed`: what it leaves (a finding no fixer handles is at least changed) fails it.
    fail_on = policy.choose(args.fail_on) if args.fail_on is not None else FIX_DEFAULT
    fix = plan_fix(FixOptions(consumer=consumer, vllm=vllm, without=tuple(args.without), fail_on=fail_on))
    print(f"compat.fix: {fix.resolved}", file=sys.stderr)
    verification = None
    if not args.no_verify:
        # Re-audited on a copy before anything is written, so the shim runs only on builds re-audited clean.
        with tempfile.TemporaryDirectory(prefix="compat-fix-") as tmp:
            verification = verify(write_copy(fix, Path(tmp) / "patched"), fix)
        fix = restricted(fix, verification)
    diff = fix.diff()
    if args.output:
        atomic_write_text(args.output, diff)
    elif not (args.apply or args.in_place):
        sys.stdout.write(diff)
    if args.apply:
        write_copy(fix, args.apply)
        print(f"compat.fix: patched copy written to {args.apply}", file=sys.stderr)
    elif args.in_place:
        for path in write_in_place(fix):
            print(f"compat.fix: wrote {path}", file=sys.stderr)
    summary(fix, verification)
    if verification is not None:
        return 1 if verification.failing() else 0
    remaining = [u for p in fix.plans for u in p.unhandled if policy.fails(u.finding.status, fail_on)]
    return 1 if remaining else 0


def summary(fix: Fix, verification: Verification | None) -> None:
    """What each fixer did, what none handles, and the re-audit, on standard error."""
    err = sys.stderr
    print(f"compat.fix: {fix.ctx.scan.name} {fix.ctx.scan.version or ''} for {fix.ctx.versions}", file=err)
    for plan in fix.plans:
        for note in plan.notes:
            print(f"  {plan.fixer:9} {note}", file=err)
        for item in plan.unhandled:
            f = item.finding
            print(f"  {plan.fixer:9} NOT FIXED {f.check} {f.consumer_location}: {item.reason}", file=err)
    if not fix.changed:
        print("  nothing to change", file=err)
    if verification is None:
        return
    for version, f in verification.claimed:
        print(f"  STILL FAILING (claimed by a fixer) vLLM {version}: {f.check} {f.consumer_location}: {f.message}",
              file=err)
    seen: dict[tuple[str, str, str | None, str], list[str]] = {}
    for version, f in verification.unhandled:
        seen.setdefault((f.check, f.symbol, f.consumer_location, f.status.value), []).append(version)
    for (check, symbol, location, status), versions in sorted(seen.items()):
        print(f"  not handled by any fixer: {status} {check} {symbol} at {location} "
              f"(vLLM {versions[0]}..{versions[-1]}, {len(versions)} builds)", file=err)
    kept: dict[tuple[str, str, str], list[str]] = {}
    for version, f, why in verification.accepted:
        kept.setdefault((f.check, f.symbol, why), []).append(version)
    for (check, symbol, why), versions in sorted(kept.items()):
        print(f"  accepted: {check} {symbol} (vLLM {versions[0]}..{versions[-1]}): {why}", file=err)
    state = "clean" if verification.clean else "NOT clean"
    if verification.failing():
        state += f" ({len(verification.failing())} fail under --fail-on {verification.fail_on.value}: exit 1)"
    elif not verification.clean:
        state += f" (none fails under the --fail-on {verification.fail_on.value} asked for)"
    print(f"  re-audit of the patched consumer against {len(verification.builds)} builds: {state}", file=err)
    for version, left in verification.not_clean().items():
        print(f"  the shim refuses vLLM {version}: its re-audit is not clean ({left})", file=err)


def run() -> None:
    sys.exit(main())
