"""Findings alike in all but where they are (one rule, one message, one fix: 200,000 empty files each "has 0
bytes") summarised in the reports people read: the first ``SHOWN`` in full where they fall, then one line
saying how many more there are and naming a few of them. The JSON and JUnit reports keep every finding: a
program reads those, and each finding there is its file's verdict."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from compat.findings import Finding

SHOWN = 3
"""Findings of a repeated kind shown in full before the rest are summarised."""
SUMMARISED_OVER = 5
"""A kind is summarised only where it repeats more than this: up to this many are all shown."""
NAMED = 3
"""Of the summarised findings, how many a summary names (and the last, after an ellipsis)."""


@dataclass(frozen=True)
class Repeats:
    """The findings of one kind not shown in full (``more``), after the last of the ``SHOWN`` that are (``like``)."""

    like: Finding
    more: tuple[Finding, ...]

    def names(self) -> list[str]:
        """Where a few of them are: the first ``NAMED`` and the last."""
        where = [f.consumer_location or f.symbol for f in self.more]
        return where if len(where) <= NAMED + 1 else [*where[:NAMED], "…", where[-1]]

    def text(self) -> str:
        return (f"{len(self.more):,} more findings alike (same rule, status, message and fix) not shown: "
                f"{', '.join(self.names())}; the JSON report lists each")


def _kind(f: Finding) -> tuple:
    """All a finding says but where it is. Its symbol is part of what it says unless it names the place itself
    (a finding placed at a file or a sample, not at a line: the gate's, whose symbol is ``file`` or ``file#i``)."""
    about_place = f.place is not None and f.place.line is None
    return (f.status, f.check, f.message, f.fix, f.allowed, f.vllm_location, f.evidence,
            None if about_place else f.symbol)


def summarised(findings: Sequence[Finding] | Iterable[Finding]) -> list[Finding | Repeats]:
    """``findings`` in their order, each kind that repeats more than ``SUMMARISED_OVER`` times cut to its first
    ``SHOWN`` and a ``Repeats`` after the last of them."""
    findings = list(findings)
    kinds = [_kind(f) for f in findings]
    counts = Counter(kinds)
    if not counts or max(counts.values()) <= SUMMARISED_OVER:
        return list(findings)
    out: list[Finding | Repeats] = []
    seen: Counter = Counter()
    rest: dict[tuple, tuple[int, Finding, list[Finding]]] = {}  # per kind: where its summary goes, what it is like
    for f, kind in zip(findings, kinds, strict=True):
        if counts[kind] <= SUMMARISED_OVER:
            out.append(f)
            continue
        seen[kind] += 1
        if seen[kind] <= SHOWN:
            out.append(f)
            if seen[kind] == SHOWN:
                rest[kind] = (len(out), f, [])
                out.append(f)  # holds the summary's place until the rest is known
        else:
            rest[kind][2].append(f)
    for at, like, more in rest.values():
        out[at] = Repeats(like, tuple(more))
    return out
