"""Build the matrix: expand what the user names into builds, fetch them in parallel, audit each.

A build that cannot be fetched or read becomes a column of ``error`` with the reason; the others go on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from packaging.version import Version

from compat.audit.pipeline import AuditOptions, Auditor
from compat.cache import cache_dir
from compat.consumer.result import Scan
from compat.errors import CompatError
from compat.findings import Status
from compat.matrix import builds
from compat.matrix.builds import Request
from compat.matrix.result import Cell, Column, Matrix, Row
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
    return list(fetch_each(columns, request, progress, workers))


def fetch_each(columns: list[Column], request: Request, progress: Callable[[str], None] | None = None,
               workers: int = FETCH_WORKERS) -> Iterator[tuple[Column, OpenedBuild | None]]:
    """``fetch``, yielding each build in column order as soon as it and those before it are open, so that
    auditing begins while later builds still download."""
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
        yield from pool.map(one, columns)


def _cache_entries(build: OpenedBuild) -> list[str]:
    """The cache entries a build was read from: the top folder of its files under the cache, and its memo."""
    root = cache_dir().resolve()
    found = []
    for path in (getattr(build.surface.build, "root", None), getattr(build.surface, "path", None)):
        if not path:
            continue
        try:
            parts = Path(path).resolve().relative_to(root).parts
        except ValueError:
            continue  # not in the cache: a checkout or an installed build
        if len(parts) >= 2:
            found.append(str(root.joinpath(*parts[:2])))
            archive = root / "dists" / parts[1].rpartition("-")[0]
            if parts[0] == "src" and archive.is_file():  # the downloaded archive it was extracted from
                found.append(str(archive))
    return found


def cache_bytes(entries: Iterable[str]) -> int:
    """Bytes of the files under ``entries`` (each counted once)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for entry in dict.fromkeys(entries):
        for top, _, files in os.walk(entry) if os.path.isdir(entry) else [("", [], [entry])]:
            for name in files:
                try:
                    st = os.lstat(os.path.join(top, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


def audit_all(scan: Scan, opened: Iterable[tuple[Column, OpenedBuild | None]], options: AuditOptions,
              progress: Callable[..., None] | None = None) -> Matrix:
    """Audit the scan against each opened build; rows are the findings' touchpoints. ``progress(label, counts)``
    is called as each build is done, with its findings counted by status."""
    auditor = Auditor(options)
    rows: dict[tuple, Row] = {}
    columns: list[Column] = []
    notes: list[str] = []
    cache: list[str] = []
    for column, build in opened:
        counts: dict[str, int] = {}
        if build is not None:
            try:
                result = auditor.run(scan, build)
            except Exception as exc:  # noqa: BLE001 - one build's failure is its column's error
                column = Column(column.label, column.spec, column.version, column.origin,
                                f"the audit failed: {type(exc).__name__}: {exc}")
                build = None
            else:
                cache += _cache_entries(build)
                for finding in result.findings:
                    counts[finding.status.value] = counts.get(finding.status.value, 0) + 1
                    row = rows.get(finding.key)
                    if row is None:
                        row = rows[finding.key] = Row(finding.check, finding.touchpoint or finding.symbol,
                                                      finding.consumer_location, finding.code)
                    row.cells[column.label] = Cell.of(finding)
                notes += [f"{column.label}: {n}" for n in result.notes if "files left out" not in n]
        columns.append(column)
        if progress is not None:
            progress(column, counts)
    for column in columns:
        if column.error:
            for row in rows.values():
                row.cells[column.label] = Cell(Status.ERROR, f"build {column.label} could not be read: {column.error}")
    ordered = sorted(rows.values(), key=lambda r: (r.probe, r.location or "", r.touchpoint))
    return Matrix(scan.name, scan.version, columns, ordered, notes, list(dict.fromkeys(cache)))


def run(scan: Scan, request: Request, options: AuditOptions, show_progress: bool = True,
         workers: int = FETCH_WORKERS, stream: TextIO | None = None) -> Matrix:
    """The matrix. With ``show_progress``: a progress bar when standard error is a terminal, else one line per
    build as it is done, with its counts, flushed to ``stream`` (standard error)."""
    columns = expand(request)
    if not columns:
        raise CompatError(f"no vLLM build matches {', '.join(request.specs)}")
    stream = stream or sys.stderr
    if show_progress and stream.isatty():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            fetching = bar.add_task("fetching builds", total=len(columns))
            opened = fetch_each(columns, request, lambda _: bar.advance(fetching), workers)
            auditing = bar.add_task("auditing", total=len(columns))
            return audit_all(scan, opened, options, lambda *_: bar.advance(auditing))
    done = 0

    def line(column: Column, counts: dict[str, int]) -> None:
        nonlocal done
        done += 1
        what = f"ERROR: {column.error}" if column.error else ", ".join(
            f"{counts.get(s, 0)} {s}" for s in ("ok", "broken", "changed", "unknown", "error"))
        stream.write(f"matrix: [{done}/{len(columns)}] {column.label}: {what}\n")
        stream.flush()

    return audit_all(scan, fetch_each(columns, request, workers=workers), options,
                     line if show_progress else None)
