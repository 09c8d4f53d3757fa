"""``compat.child.run``: a timeout ends the child's whole session (a worker it started too), and a death by a
signal is told by name. Real processes, no engine."""

from __future__ import annotations

import os
import sys
import time

from compat import child

GRANDCHILD = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(worker.pid))
print("started worker", worker.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by its parent) is not running.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_timeout_ends_the_child_and_the_worker_it_started(tmp_path):
    pid_file = tmp_path / "worker.pid"
    began = time.monotonic()
    ended = child.run([sys.executable, "-c", GRANDCHILD, str(pid_file)], env=dict(os.environ), timeout=3,
                      log=tmp_path / "log")
    assert ended.timed_out and time.monotonic() - began < 30
    assert "ran past 3 s" in ended.describe() and "started worker" in ended.tail()
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)


def test_a_death_by_a_signal_is_told_by_name(tmp_path):
    ended = child.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                      env=dict(os.environ), timeout=30, log=tmp_path / "log")
    assert ended.signal == "SIGSEGV" and ended.describe().startswith("died by SIGSEGV (")
    killed = child.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                       env=dict(os.environ), timeout=30, log=tmp_path / "log2")
    assert "OOM killer" in killed.describe()
    fine = child.run([sys.executable, "-c", "raise SystemExit(3)"], env=dict(os.environ), timeout=30,
                     log=tmp_path / "log3")
    assert fine.returncode == 3 and fine.signal is None and fine.describe() == "exited with status 3"
