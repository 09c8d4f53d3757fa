"""What ``--jobs`` buys the gate, and what each worker process costs in memory.

    python benchmarks/gate_jobs.py [--files 20000] [--pt-files 2000] [--large-files 10] [--jobs 1 2] [--dir DIR]
                                   [--repeat 3]

Makes (or reuses, in --dir) the files of ``benchmarks/gate_speed.py``: tiny vLLM-layout safetensors files, tiny
speculators ``.pt`` files, and [1024, 4, 4096] bf16 safetensors files of 32 MiB for ``--values``. Each run is the
command line (``python -m compat.gate DIR --jobs N --format json``) in a child process of its own, which prints
its wall time, its own peak resident memory (VmHWM) and its workers' largest (``getrusage(RUSAGE_CHILDREN)``:
the largest of the children it waited for). ``forced`` runs start the workers whatever the size of the run
(``mapstep.WORKER_START_SECONDS = 0``); the others decide as the command line does. The median of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gate_speed import LAYERS, make, make_large  # noqa: E402

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from compat.gate import mapstep
if {forced!r}:
    mapstep.WORKER_START_SECONDS = 0.0
from compat.gate.cli import main
started = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - started
with open("/proc/self/status") as status:
    own = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({{"code": code, "seconds": seconds, "parent_mb": own / 1024,
                  "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}))
"""


def run(paths: list[Path], jobs: int, forced: bool, *flags: str) -> dict:
    code = _CHILD.format(root=str(ROOT), forced=forced)
    args = [*map(str, paths), "--jobs", str(jobs), "--format", "json", "--output", os.devnull, "--no-progress",
            "--hidden-size", "64" if "--values" not in flags else "4096", "--layers", str(LAYERS), *flags]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    assert measured["code"] == 0, out.stderr
    return measured


def measure(label: str, paths: list[Path], files: int, nbytes: int, jobs: list[int], repeat: int,
            *flags: str) -> None:
    for n in jobs:
        for forced in ((False, True) if n > 1 else (False,)):
            runs = [run(paths, n, forced, *flags) for _ in range(repeat)]
            seconds = statistics.median(r["seconds"] for r in runs)
            workers = max(r["worker_mb"] for r in runs) if n > 1 else 0.0
            how = f"--jobs {n}" + (" forced" if forced else "")
            print(f"{label:34} {how:16} {seconds:7.2f} s {files / seconds:>9,.0f} files/s "
                  f"{nbytes / seconds / 2**20:>8,.1f} MiB/s  peak RSS: gate {max(r['parent_mb'] for r in runs):,.0f} "
                  f"MB, largest worker {workers:,.0f} MB", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--pt-files", type=int, default=2000)
    p.add_argument("--large-files", type=int, default=10)
    p.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dir", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="compat-gate-jobs-") as tmp:
        root = args.dir or Path(tmp)
        make(root, args.files, args.pt_files, 64)
        make_large(root / "large", args.large_files)
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        for label, directory, flags in (("tiny .safetensors, header mode", root / "vllm", ()),
                                        ("tiny .pt, header mode", root / "speculators", ()),
                                        ("32 MiB .safetensors, --values", root / "large", ("--values",))):
            files = list(directory.iterdir())
            measure(label, [directory], len(files), sum(f.stat().st_size for f in files), args.jobs, args.repeat,
                    *flags)


if __name__ == "__main__":
    main()
