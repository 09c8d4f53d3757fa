"""The ``# type: ignore`` comments in the tool's code only ever get fewer.

Each one hides what mypy says about a line. A fix (an annotation, a narrowing, a correct type) is better than a new
comment, so the count may go down but never up: when a change removes some, lower ``MAXIMUM`` to the new count.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("compat", "probes", "fixers")
MAXIMUM = 11
"""The count on 2026-12-02 (issue #24): lower it as comments go, never raise it."""

_IGNORE = re.compile(r"#\s*type:\s*ignore\b")


def _ignores() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _IGNORE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}")
    return found


def test_type_ignores_only_get_fewer() -> None:
    found = _ignores()
    assert len(found) <= MAXIMUM, (
        f"{len(found)} '# type: ignore' comments in {', '.join(PACKAGES)}, over the {MAXIMUM} recorded: fix the "
        "type instead (an annotation, a narrowing, a correct type); the number can only go down.\n" + "\n".join(found))
