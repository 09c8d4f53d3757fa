"""Run the gate on hostile input the way an attacker's dataset would meet it: in a child process under a
memory cap (``RLIMIT_AS``) and a timeout, with the JSON report written to a file, so a test can assert that
the run finished in seconds, stayed small, and still reported every other file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEMORY_CAP = 3 << 30
"""Address space, not resident memory: torch's libraries alone map about 1.5 GiB of it."""
TIMEOUT = 60

# The child caps itself, runs the gate, and reports its own peak resident memory and address space on its last
# stderr line: VmHWM and VmPeak of its own address space (ru_maxrss would include the parent's memory at fork: a
# test process that has grown to a gigabyte would make every child look that large).
_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from compat.gate.cli import main

def peak_kb(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))

try:
    code = main(sys.argv[1:])
finally:
    print(f"maxrss_kb={{peak_kb('VmHWM:')}} vmpeak_kb={{peak_kb('VmPeak:')}}", file=sys.stderr)
sys.exit(code)
"""


@dataclass
class CappedRun:
    returncode: int
    report: dict | None
    stderr: str
    seconds: float
    max_rss_mb: float
    max_vm_mb: float
    """Peak address space (VmPeak): what ``RLIMIT_AS`` caps."""

    def findings(self, path_part: str = "") -> list[dict]:
        """Findings whose file contains ``path_part`` (all of them with the default)."""
        return [f for f in (self.report or {}).get("findings", []) if path_part in f["symbol"]]

    def failing(self, path_part: str = "") -> list[dict]:
        return [f for f in self.findings(path_part) if f["status"] != "ok" and not f.get("allowed")]


def run_capped(*args: str | os.PathLike, timeout: float = TIMEOUT, cap: int = MEMORY_CAP) -> CappedRun:
    """``python -m compat.gate ARGS --format json --output FILE`` under the cap; the report parsed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        started = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD.format(cap=cap), *map(str, args), "--format",
                                   "json", "--no-progress", "--output", str(out)], capture_output=True, text=True,
                                  env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the gate ran past {timeout} s on {args}") from None
        seconds = time.perf_counter() - started
        lines = proc.stderr.strip().splitlines()
        peaks = dict(item.split("=") for item in lines[-1].split()) if lines and lines[-1].startswith("maxrss_kb=") \
            else {}
        rss, vm = (int(peaks[key]) / 1024 if key in peaks else float("nan") for key in ("maxrss_kb", "vmpeak_kb"))
        report = json.loads(out.read_text()) if out.exists() else None
    return CappedRun(proc.returncode, report, "\n".join(lines[:-1]), seconds, rss, vm)
