"""``python -m compat.matrix``: audit one consumer against many vLLM builds and print the matrix.

Exit codes: 0 done (and, with --baseline, nothing broke that was fine in the baseline), 1 a touchpoint broke in
a build where the baseline had it fine, 2 the matrix could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from compat.audit.pipeline import DEFAULT_CONSUMER, AuditOptions, Auditor
from compat.cache import atomic_write_text, cache_dir
from compat.cli import guarded, printable
from compat.errors import CompatError
from compat.matrix.model import Matrix, regressions
from compat.matrix.render import FORMATS, render
from compat.matrix.run import FETCH_WORKERS, Request, cache_bytes
from compat.matrix.run import run as run_matrix

DEFAULT_BUILDS = ">=0.11"
SUFFIXES = {"json": ".json", "markdown": ".md", "html": ".html", "junit": ".junit.xml"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.matrix", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--consumer", default=DEFAULT_CONSUMER, help=f"what to audit (default: {DEFAULT_CONSUMER})")
    p.add_argument("--vllm", action="append", default=None,
                   help="builds: a specifier (>=0.11), a version, latest, a wheel/sdist/source directory, a wheel "
                        f"URL, git+URL@REF; repeat for more (default: {DEFAULT_BUILDS})")
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
                   help="a previous run's JSON: exit 1 when a touchpoint breaks in a build it was fine in there")
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
    baseline = _load_baseline(args.baseline) if args.baseline else None
    options = AuditOptions(consumer=args.consumer, confirm="never", all_files=args.all_files)
    scan = Auditor(options).scan_consumer()
    request = Request(args.vllm or [DEFAULT_BUILDS], args.index_url, args.find_links, args.pre)
    matrix = run_matrix(scan, request, options, workers=max(1, args.jobs))
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
        found = regressions(baseline, matrix)
        for line in found:
            print(f"REGRESSION {line}", file=sys.stderr)
        return 1 if found else 0
    return 0


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
