"""The runtime confirmation's progress on stderr."""

from __future__ import annotations

import sys
import time
from typing import Any

from compat.confirm.checks import outcome


class Progress:
    """The confirmation's progress on stderr: a rich bar on a terminal; elsewhere (logs, CI) one plain line per
    finished check."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.perf_counter()
        self.bar: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("confirming on real engines: {task.description}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task("starting", total=total)

    def starting(self, name: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=name)

    def finished(self, name: str, result: dict, started: float) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
            return
        print(f"compat.confirm: {self.done}/{self.total} {name}: {outcome(result)} "
              f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
