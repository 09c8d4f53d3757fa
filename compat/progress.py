"""A one-line progress bar on stderr, drawn only when stderr is a terminal (never in logs or CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Call with (done, total); redraws at most ten times a second, and clears the line when finished."""

    def __init__(self, stream: TextIO | None = None, width: int = 30, unit: str = "files") -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.unit = unit
        self.started = time.perf_counter()
        self._last = 0.0

    @classmethod
    def for_terminal(cls, enabled: bool = True, unit: str = "files") -> ProgressBar | None:
        return cls(unit=unit) if enabled and sys.stderr.isatty() else None

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        filled = int(self.width * done / max(total, 1))
        rate = done / max(now - self.started, 1e-9)
        line = f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {self.unit}, {rate:,.0f}/s"
        self.stream.write(line)
        if done >= total:
            self.stream.write("\r" + " " * len(line) + "\r")
        self.stream.flush()
