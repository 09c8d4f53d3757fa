"""A progress bar (``rich``, on standard error) over the engine child's prompts, read from the file the runner
rewrites after each call; the engine's start-up shows as its own phase."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType


def _done(progress: Path) -> tuple[str | None, int]:
    try:
        state = json.loads(progress.read_text())
        return state.get("job"), int(state.get("done", 0))
    except (OSError, ValueError):
        return None, 0  # not written yet (the engine is starting), or being replaced


class Bar:
    """``with Bar(progress_file, total) as bar:`` then ``bar.update()`` whenever (``compat.child.run``'s watch)."""

    def __init__(self, progress: Path, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = progress
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bar = Progress(*columns, console=Console(stderr=True), transient=True)
        self.task = self.bar.add_task("starting the engine", total=total)

    def __enter__(self) -> Bar:
        self.bar.__enter__()
        return self

    def update(self) -> None:
        job, done = _done(self.progress)
        if job is not None:
            self.bar.update(self.task, completed=done, description=f"extracting ({job})")

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.bar.__exit__(kind, value, trace)
