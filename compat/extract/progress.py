"""A progress bar (``rich``, on standard error) over the engine child's samples, read from the file the
runner rewrites after each batch; the engine's start-up shows as its own phase."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

POLL_S = 0.5


def _done(progress: Path) -> tuple[str | None, int]:
    try:
        state = json.loads(progress.read_text())
        return state.get("job"), int(state.get("done", 0))
    except (OSError, ValueError):
        return None, 0  # not written yet (the engine is starting), or being replaced


def follow(child: subprocess.Popen, progress: Path, total: int, timeout: float) -> int:
    """Wait for ``child`` (raising ``TimeoutExpired`` past ``timeout``), showing its samples as they are saved."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    deadline = time.monotonic() + timeout
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting the engine", total=total)
        while child.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(child.args, timeout)
            job, done = _done(progress)
            if job is not None:
                bar.update(task, completed=done, description=f"extracting ({job})")
            time.sleep(POLL_S)
        bar.update(task, completed=_done(progress)[1])
    return child.returncode
