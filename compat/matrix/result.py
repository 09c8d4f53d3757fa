"""The version matrix: one consumer's touchpoints (rows) against many vLLM builds (columns).

A cell is what the audit of that build says about that touchpoint. Columns are in build order (releases by
version, then the builds named without one in the order given); for each row the matrix says the first
build where it broke and the last one before it where it was fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compat import __version__
from compat.findings import Finding, Status
from compat.policy import DEFAULT, FailOn, fails

SCHEMA = "compat.matrix/1"
LEGEND = {"ok": "ok", "broken": "broken",
          "changed": "changed (resolves, but a default or behaviour it relies on differs)",
          "unknown": "unknown (could not be checked)", "error": "error (the build could not be read or audited)"}
"""What each cell status means, for the legends of every rendering."""
BLANK = "no finding: the audit of that build said nothing about this touchpoint"
STORY = ("first bad (last good): the first build where it fails by --fail-on, broken by default (the last ok build "
         "before it, '-' when none was ok before it); 'at or before B': already failing at B, the range's first "
         "build, so when it broke is not known; 'fixed in F': ok again from F; 'broken again in A': and failing "
         "again from A")


@dataclass(frozen=True)
class Column:
    """One build: ``label`` names it in the matrix, ``spec`` is what opens it (a version, a path)."""

    label: str
    spec: str
    version: str | None = None
    origin: str = ""
    error: str | None = None
    """Why the build could not be fetched or read: the whole column is ``error``."""


@dataclass(frozen=True)
class Cell:
    status: Status
    message: str
    vllm_location: str | None = None
    fix: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def of(finding: Finding) -> Cell:
        return Cell(finding.status, finding.message, finding.vllm_location, finding.fix,
                    finding.evidence.as_dict())


def row_key(probe: str, touchpoint: str, location: str | None) -> str:
    """A row's key (``rows[].key`` in the matrix JSON, what ``python -m compat.bisect --touchpoint`` takes)."""
    return f"{probe}|{touchpoint}|{location}"


@dataclass(frozen=True)
class Story:
    """A row read along the builds: where it first broke, whether it was already broken at the range's first
    build (the matrix cannot tell when before that), where it was fine again, and where it broke again."""

    first_bad: str | None = None
    last_good: str | None = None
    broken_before_range: bool = False
    fixed_in: str | None = None
    broken_again_in: str | None = None

    def label(self) -> str:
        if self.first_bad is None:
            return "-"
        if self.broken_before_range:
            text = f"at or before {self.first_bad}"
        else:
            text = f"{self.first_bad} ({self.last_good or '-'})"
        if self.fixed_in:
            text += f", fixed in {self.fixed_in}"
        if self.broken_again_in:
            text += f", broken again in {self.broken_again_in}"
        return text


@dataclass
class Row:
    probe: str
    touchpoint: str
    location: str | None
    code: str | None = None
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return row_key(self.probe, self.touchpoint, self.location)

    def first_bad(self, columns: list[Column], fail_on: FailOn = DEFAULT) -> tuple[str | None, str | None]:
        """(first build where this touchpoint fails under ``fail_on`` (``compat.policy``), last build before it where
        it was ok)."""
        last_ok = None
        for column in columns:
            cell = self.cells.get(column.label)
            if cell is None:
                continue
            if cell.status != Status.ERROR and fails(cell.status, fail_on):
                return column.label, last_ok
            if cell.status == Status.OK:
                last_ok = column.label
        return None, last_ok

    def story(self, columns: list[Column], fail_on: FailOn = DEFAULT) -> Story:
        """What happened to this touchpoint over ``columns``, read in build order, failing as ``fail_on`` says."""
        bad, good = self.first_bad(columns, fail_on)
        if bad is None:
            return Story()
        labels = [c.label for c in columns]
        readable = [c.label for c in columns if c.error is None]
        before = bool(readable) and bad == readable[0]
        fixed = again = None
        for label in labels[labels.index(bad) + 1:]:
            cell = self.cells.get(label)
            if cell is None:
                continue
            if fixed is None and cell.status == Status.OK:
                fixed = label
            elif fixed is not None and cell.status != Status.ERROR and fails(cell.status, fail_on):
                again = label
                break
        return Story(bad, good, before, fixed, again)

    def worst(self) -> str:
        order = ("error", "broken", "changed", "unknown", "ok")
        present = {c.status for c in self.cells.values()}
        return next((s for s in order if s in present), "ok")


@dataclass
class Matrix:
    consumer: str
    consumer_version: str | None
    columns: list[Column]
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    cache: list[str] = field(default_factory=list)
    """The cache entries (directories and files) the builds were read from or fetched into."""
    fail_on: FailOn = DEFAULT
    """What fails (``compat.policy``): the first bad build of each row, and the exit code."""

    def interesting(self) -> list[Row]:
        """Rows that are not ok in every build."""
        return [r for r in self.rows if r.worst() != "ok"]

    def failing(self) -> list[str]:
        """What fails under ``fail_on``, one line per row (the exit code without a baseline): the builds where it
        fails, as runs of consecutive builds with one status, and the message of the newest of them."""
        unread = {c.label: c.error for c in self.columns if c.error}
        lines = [f"build {label} could not be read: {error}" for label, error in unread.items()]
        for row in self.rows:
            runs: list[tuple[str, list[str]]] = []  # (status, labels), consecutive in build order
            last: Cell | None = None
            before = None
            for column in self.columns:
                cell = row.cells.get(column.label)
                failed = cell is not None and column.label not in unread and fails(cell.status, self.fail_on)
                status = cell.status if cell is not None and failed else None
                if status is not None:
                    if status == before:
                        runs[-1][1].append(column.label)
                    else:
                        runs.append((status, [column.label]))
                    last = cell
                before = status
            if runs and last is not None:  # a run is recorded with its cell
                where = "; ".join(f"{status} in {_run_text(labels)}" for status, labels in runs)
                lines.append(f"{row.probe} {row.touchpoint} ({row.location}) is {where}: {last.message}")
        return lines

    def as_json(self) -> dict[str, Any]:
        columns = self.columns
        return {
            "schema": SCHEMA,
            "generated_by": f"compat {__version__}",
            "consumer": {"name": self.consumer, "version": self.consumer_version},
            "builds": [{"label": c.label, "spec": c.spec, "version": c.version, "origin": c.origin,
                        "error": c.error} for c in columns],
            "notes": list(self.notes),
            "fail_on": self.fail_on.value,
            "rows": [self._row_json(r) for r in self.rows],
        }

    def _row_json(self, row: Row) -> dict[str, Any]:
        story = row.story(self.columns, self.fail_on)
        return {"key": row.key, "probe": row.probe, "touchpoint": row.touchpoint, "location": row.location,
                "code": row.code, "first_bad": story.first_bad, "last_good": story.last_good,
                "broken_before_range": story.broken_before_range, "fixed_in": story.fixed_in,
                "broken_again_in": story.broken_again_in, "what_happened": story.label(),
                "cells": {label: {"status": c.status, "message": c.message, "vllm_location": c.vllm_location,
                                  "fix": c.fix, "evidence": c.evidence} for label, c in row.cells.items()}}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Matrix:
        columns = [Column(b["label"], b["spec"], b.get("version"), b.get("origin", ""), b.get("error"))
                   for b in data["builds"]]
        rows = [Row(r["probe"], r["touchpoint"], r["location"], r.get("code"),
                    {label: Cell(c["status"], c["message"], c.get("vllm_location"), c.get("fix"),
                                 c.get("evidence") or {}) for label, c in r["cells"].items()})
                for r in data["rows"]]
        return Matrix(data["consumer"]["name"], data["consumer"].get("version"), columns, rows,
                      list(data.get("notes", [])))


def regressions(previous: Matrix, current: Matrix, fail_on: FailOn = DEFAULT) -> list[str]:
    """Touchpoints that fail (under ``fail_on``) in a build where the previous run had them fine: the same build,
    or (for a build the previous run did not have, such as a new nightly) its newest build."""
    before = {r.key: r for r in previous.rows}
    newest = next((c.label for c in reversed(previous.columns) if c.error is None), None)
    found = []
    for row in current.rows:
        old = before.get(row.key)
        if old is None:
            continue
        for label, cell in row.cells.items():
            if cell.status == Status.ERROR or not fails(cell.status, fail_on):
                continue
            was = old.cells.get(label) or (old.cells.get(newest) if newest else None)
            if was is not None and was.status == Status.OK:
                found.append(f"{row.probe} {row.touchpoint} ({row.location}) breaks in {label}, fine in the previous "
                             f"run: {cell.message}")
    return found


def _run_text(labels: list[str]) -> str:
    """'0.12.0' or '0.12.0-0.33.0 (32 builds)'."""
    return labels[0] if len(labels) == 1 else f"{labels[0]}-{labels[-1]} ({len(labels)} builds)"
