"""The status policy every tool shares: which findings fail a run, and the exit code that follows.

Statuses are ordered by severity: ``error`` > ``broken`` > ``changed`` > ``unknown`` > ``ok``. ``--fail-on LEVEL``
names the lowest status that fails; every more severe one fails too, and ``error`` (the check itself could not
run) always fails. The default is ``broken``: a ``changed`` finding still works, differently (review it), and an
``unknown`` one could not be decided. ``--strict`` is ``--fail-on unknown``. A finding an allow-list accepted never
fails. ``compat.audit``, ``compat.matrix``, ``compat.bisect`` (what counts as bad), ``compat.fix`` (what its
verification fails on) and the pytest plugin (``--vllm-compat-fail-on``) decide with these functions.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING

from compat.errors import CompatError
from compat.findings import Finding, Status, status_counts


class FailOn(str, Enum):
    BROKEN = "broken"
    CHANGED = "changed"
    UNKNOWN = "unknown"


DEFAULT = FailOn.BROKEN
CHOICES = tuple(level.value for level in FailOn)


def parse(text: str) -> FailOn:
    """``--fail-on`` text as a level; anything else is one line of bad input (exit 2)."""
    try:
        return FailOn(str(text).strip().lower())
    except ValueError:
        raise CompatError(f"--fail-on {text!r}: not one of {', '.join(CHOICES)}") from None


def choose(fail_on: str | FailOn | None, strict: bool = False) -> FailOn:
    """The level from ``--fail-on`` and the older ``--strict`` (which means ``unknown``); both at once must agree."""
    if fail_on is None:
        return FailOn.UNKNOWN if strict else DEFAULT
    level = fail_on if isinstance(fail_on, FailOn) else parse(fail_on)
    if strict and level is not FailOn.UNKNOWN:
        raise CompatError(f"--strict means --fail-on unknown; it contradicts --fail-on {level.value}")
    return level


def fails(status: Status | str, fail_on: FailOn = DEFAULT) -> bool:
    """Whether a finding of ``status`` fails a run under ``fail_on``."""
    status = Status(status)
    if status is Status.OK:
        return False
    return status.rank <= Status(fail_on.value).rank


def failing(findings: Iterable[Finding], fail_on: FailOn = DEFAULT) -> list[Finding]:
    """The findings that fail a run, unless an allow-list accepted them."""
    return [f for f in findings if fails(f.status, fail_on) and not f.allowed]


def exit_code(statuses: Iterable[Status | str], fail_on: FailOn = DEFAULT) -> int:
    """1 when any of ``statuses`` fails under ``fail_on``, else 0."""
    return 1 if any(fails(s, fail_on) for s in statuses) else 0


def add_option(parser: argparse.ArgumentParser, flag: str = "--fail-on", default: FailOn = DEFAULT) -> None:
    """``--fail-on`` as every command line spells it (checked by ``choose``, so bad input is one line); ``default``
    is what the tool takes when it is not given (the help says so; the tool applies it)."""
    parser.add_argument(flag, default=None, metavar="{" + ",".join(CHOICES) + "}",
                        help=f"the lowest status that fails the run: {', '.join(CHOICES)} (default {default.value}; "
                             "error always fails)")


class Verdict:
    """Mixin for results holding ``findings`` and ``fail_on``: counts, failing findings, exit code."""

    findings: tuple[Finding, ...]
    if TYPE_CHECKING:  # declared only: a result holds it as a field (the audit's) or computes it (the gate's)
        @property
        def fail_on(self) -> FailOn: ...

    def counts(self) -> dict[str, int]:
        return status_counts(self.findings)

    def failing(self) -> list[Finding]:
        return failing(self.findings, self.fail_on)

    @property
    def exit_code(self) -> int:
        return 1 if self.failing() else 0
