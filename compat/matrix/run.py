"""Build the matrix: expand what the user names into builds, fetch them in parallel, audit each.

A build that cannot be fetched or read becomes a column of ``error`` with the reason; the others go on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from packaging.version import Version

from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer.model import Scan
from compat.errors import CompatError
from compat.matrix import builds
from compat.matrix.builds import Request
from compat.matrix.model import Cell, Column, Matrix, Row
from compat.vllm.builds import OpenedBuild, open_build

FETCH_WORKERS = 8



def expand(request: Request) -> list[Column]:
    """One column per build the specs name, releases in version order first, then the rest in the order given."""
    releases: dict[str, Column] = {}
    others: list[Column] = []
    for spec in request.specs:
        try:
            for column in builds.columns_for(spec, request):
                if builds.is_release_spec(column.spec):
                    releases.setdefault(column.label, column)
                else:
                    others.append(column)
        except CompatError as exc:
            others.append(Column(spec, spec, error=str(exc)))
    ordered = sorted(releases.values(), key=lambda c: Version(c.spec))
    return ordered + others


def fetch(columns: list[Column], request: Request, progress: Callable[[str], None] | None = None,
          workers: int = FETCH_WORKERS) -> list[tuple[Column, OpenedBuild | None]]:
    """Open every build, downloading in parallel; a failure is kept as the column's error."""
    def one(column: Column) -> tuple[Column, OpenedBuild | None]:
        if column.error:
            return column, None
        try:
            opened = open_build(builds.local_spec(column, request), request.target)
            build = opened.surface.build
            found = Column(column.label, column.spec, build.version or column.version, build.origin)
            return found, opened
        except CompatError as exc:
            return Column(column.label, column.spec, column.version, error=str(exc)), None
        except Exception as exc:  # noqa: BLE001 - a build that cannot be read is a column of errors
            return Column(column.label, column.spec, column.version,
                          error=f"{type(exc).__name__}: {exc}"), None
        finally:
            if progress is not None:
                progress(column.label)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, columns))


def audit_all(scan: Scan, opened: Iterable[tuple[Column, OpenedBuild | None]], options: AuditOptions,
              progress: Callable[[str], None] | None = None) -> Matrix:
    """Audit the scan against each opened build; rows are the findings' touchpoints."""
    auditor = Auditor(options)
    rows: dict[tuple, Row] = {}
    columns: list[Column] = []
    notes: list[str] = []
    for column, build in opened:
        if build is not None:
            try:
                result = auditor.run(scan, build)
            except Exception as exc:  # noqa: BLE001 - one build's failure is its column's error
                column = Column(column.label, column.spec, column.version, column.origin,
                                f"the audit failed: {type(exc).__name__}: {exc}")
                build = None
            else:
                for finding in result.findings:
                    row = rows.get(finding.key)
                    if row is None:
                        row = rows[finding.key] = Row(finding.check, finding.touchpoint or finding.symbol,
                                                      finding.consumer_location, finding.code)
                    row.cells[column.label] = Cell.of(finding)
                notes += [f"{column.label}: {n}" for n in result.notes if "files left out" not in n]
        columns.append(column)
        if progress is not None:
            progress(column.label)
    for column in columns:
        if column.error:
            for row in rows.values():
                row.cells[column.label] = Cell("error", f"build {column.label} could not be read: {column.error}")
    ordered = sorted(rows.values(), key=lambda r: (r.probe, r.location or "", r.touchpoint))
    return Matrix(scan.name, scan.version, columns, ordered, notes)


def run(scan: Scan, request: Request, options: AuditOptions, show_progress: bool = True,
        workers: int = FETCH_WORKERS) -> Matrix:
    columns = expand(request)
    if not columns:
        raise CompatError(f"no vLLM build matches {', '.join(request.specs)}")
    if show_progress and sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            fetching = bar.add_task("fetching builds", total=len(columns))
            opened = fetch(columns, request, lambda _: bar.advance(fetching), workers)
            auditing = bar.add_task("auditing", total=len(columns))
            return audit_all(scan, opened, options, lambda _: bar.advance(auditing))
    return audit_all(scan, fetch(columns, request, workers=workers), options)
