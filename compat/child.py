"""One way to run a child process that may start an engine: in a session of its own, with a timeout that ends
the whole session (vLLM's executor starts worker processes of its own: killing only the direct child would leave
tensor-parallel workers running), its output in a log file, and a death by a signal told by name.

Used by the runtime confirmation (``compat.confirm``), the extraction run and its reference run
(``compat.extract``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

LOG_TAIL = 4000
POLL_S = 0.5


@dataclass(frozen=True)
class Ended:
    """How a child ended: its exit status, or that it ran past its timeout (and was killed with its session)."""

    returncode: int | None
    """None when it ran past the timeout."""
    timeout: float
    log: Path

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def signal(self) -> str | None:
        """The name of the signal that ended it ('SIGKILL'), or None."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def describe(self) -> str:
        """'ran past 1800 s', 'died by SIGKILL (Killed), as ...', 'exited with status 3'."""
        if self.returncode is None:
            return f"ran past {self.timeout:.0f} s (its whole session was killed)"
        if self.returncode < 0:
            return f"died by {signal_text(self.returncode)}"
        return f"exited with status {self.returncode}"

    def tail(self, chars: int = LOG_TAIL) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def signal_text(returncode: int) -> str:
    """'SIGILL (Illegal instruction)' for a child that died by a signal (``returncode`` is minus its number)."""
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"signal {-returncode}"
    text = f"{sig.name} ({signal.strsignal(sig) or 'no description'})"
    if sig is signal.SIGKILL:
        text += ", as the kernel's OOM killer sends when memory runs out"
    return text


def run(argv: Sequence[str], *, env: dict[str, str], timeout: float, log: Path,
        watch: Callable[[], None] | None = None) -> Ended:
    """Run ``argv`` to its end or ``timeout``, its output in ``log``; ``watch`` is called about twice a second
    while it runs (a progress bar). Never raises for what the child does."""
    deadline = time.monotonic() + timeout
    with Path(log).open("w") as handle:
        proc = subprocess.Popen(list(argv), stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            while True:
                try:
                    returncode = proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if watch is not None:
                        watch()
                    if time.monotonic() > deadline:
                        kill_session(proc)
                        return Ended(None, timeout, Path(log))
        except BaseException:
            kill_session(proc)  # an interrupt of the parent ends the child's session too
            raise
    if watch is not None:
        watch()
    return Ended(returncode, timeout, Path(log))


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the child's whole session (it leads one: ``start_new_session``), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
