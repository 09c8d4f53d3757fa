"""``python -m compat.matrix``: audit one consumer against many vLLM builds and print the matrix.

Exit codes: 0 nothing fails under --fail-on (default: broken or error), 1 a touchpoint fails in some build (with
--baseline: only one that fails in a build where the baseline had it fine), 2 the matrix could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from compat import buildspec, policy
from compat.audit.pipeline import DEFAULT_CONSUMER, AuditOptions, Auditor
from compat.cache import atomic_write_text, cache_dir
from compat.cli import guarded, printable
from compat.errors import CompatError
from compat.matrix.builds import resolved
from compat.matrix.render import FORMATS, render
from compat.matrix.result import Matrix, regressions
from compat.matrix.run import FETCH_WORKERS, Request, cache_bytes
from compat.matrix.run import run as run_matrix

DEFAULT_BUILDS = ">=0.11"
SUFFIXES = {"json": ".json", "markdown": ".md", "html": ".html", "junit": ".junit.xml"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.matrix", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--consumer", default=DEFAULT_CONSUMER, help=f"what to audit (default: {DEFAULT_CONSUMER})")
    p.add_argument("--vllm", action="append", default=None,
                   help="builds: a specifier (>=0.11: every matching release; newest:>=0.11 the newest only), a "
                        "version, latest, installed, a wheel/sdist/source directory, a wheel URL, git+URL@REF; "
                        f"repeat for more (default: {DEFAULT_BUILDS})")
    p.add_argument("--index-url", action="append", default=[],
                   help="find versions here instead (vLLM's nightly index); repeatable")
    p.add_argument("--find-links", action="append", default=[], help="a directory or page of files; repeatable")
    p.add_argument("--pre", action="store_true", help="include pre-releases and dev builds")
    p.add_argument("--format", choices=FORMATS, default="terminal")
    p.add_argument("--output", type=Path, help="write the chosen format here instead of standard output")
    p.add_argument("--output-dir", type=Path,
                   help="also write matrix.html, matrix.md, matrix.json and matrix.junit.xml here")
    p.add_argument("--all-rows", action="store_true", help="list touchpoints that are ok everywhere too")
    p.add_argument("--baseline", type=Path,
                   help="a previous run's JSON: exit 1 only when a touchpoint fails in a build it was fine in there")
    policy.add_option(p)
    p.add_argument("--jobs", type=int, default=FETCH_WORKERS, help="builds fetched at once")
    p.add_argument("--all-files", action="store_true", help="audit the consumer's tests and examples too")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    p.add_argument("--debug", action="store_true", help="show full tracebacks for internal errors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return guarded("compat.matrix", args.debug, lambda: _matrix(args))


def _load_baseline(path: Path) -> Matrix:
    try:
        return Matrix.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CompatError(f"--baseline {path}: not a matrix JSON file ({type(exc).__name__}: {exc})") from exc


def _matrix(args: argparse.Namespace) -> int:
    fail_on = policy.choose(args.fail_on)
    specs = [buildspec.parse(text) for text in args.vllm or [DEFAULT_BUILDS]]  # bad input: one line, exit 2
    baseline = _load_baseline(args.baseline) if args.baseline else None
    options = AuditOptions(consumer=args.consumer, confirm="never", all_files=args.all_files, fail_on=fail_on)
    scan = Auditor(options).scan_consumer()
    request = Request([s.text for s in specs], args.index_url, args.find_links, args.pre)
    matrix = run_matrix(scan, request, options, workers=max(1, args.jobs))
    matrix.fail_on = fail_on
    for spec in specs:
        print(f"compat.matrix: {resolved(spec, _columns_of(spec, matrix))}", file=sys.stderr)
    color = args.color == "always" or (args.color == "auto" and args.output is None and sys.stdout.isatty())
    text = printable(render(matrix, args.format, color=color and args.format == "terminal",
                            all_rows=args.all_rows))
    if args.output:
        atomic_write_text(args.output, text)
    else:
        sys.stdout.write(text)
    if args.output_dir:
        for fmt, suffix in SUFFIXES.items():
            path = args.output_dir / f"matrix{suffix}"
            atomic_write_text(path, printable(render(matrix, fmt, all_rows=args.all_rows)))
            print(f"matrix: {path}", file=sys.stderr)
    used = cache_bytes(matrix.cache)
    print(f"matrix: cache {_size(used)} used in {cache_dir()} (the {len(matrix.cache)} entries the builds were "
          "read from or fetched into)", file=sys.stderr)
    if baseline is not None:
        found = regressions(baseline, matrix, fail_on)
        for line in found:
            print(f"REGRESSION {line}", file=sys.stderr)
        return 1 if found else 0
    failing = matrix.failing()
    for line in failing[:SHOWN]:
        print(f"FAILING {line}", file=sys.stderr)
    if len(failing) > SHOWN:
        print(f"FAILING ... and {len(failing) - SHOWN} more (--fail-on {fail_on.value})", file=sys.stderr)
    return 1 if failing else 0


SHOWN = 20
"""Failing cells listed on standard error."""


def _columns_of(spec: buildspec.BuildSpec, matrix: Matrix) -> list:
    """The matrix's columns ``spec`` resolved to: the releases it admits, or the one build it names."""
    if not spec.releases:
        return [c for c in matrix.columns if c.spec in (spec.value, spec.text) or c.spec.startswith("git+")
                and c.spec == f"git+{spec.value}@{spec.ref}"]
    from packaging.version import InvalidVersion, Version

    admitted = []
    for column in matrix.columns:
        try:
            version = Version(column.version or column.label)
        except InvalidVersion:
            continue
        if column.error is None and (spec.specifier is None or version in spec.specifier):
            admitted.append(column)
    return admitted if spec.many else admitted[-1:]


def _size(n: int) -> str:
    """``n`` bytes in the largest binary unit under 1024 of it, and exactly."""
    size, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n:,} bytes" if unit == "bytes" else f"{size:.1f} {unit} ({n:,} bytes)"


def run() -> None:
    sys.exit(main())
