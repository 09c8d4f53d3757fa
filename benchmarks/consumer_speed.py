"""Time the audit of large released consumers, warm and cold, against the same audit by an earlier commit of the
tool (by default 9031ae0, main before the scan was cached), in one run on this machine.

    python benchmarks/consumer_speed.py [--against 9031ae0] [--repeat 3] [--skip-against] [--cold] [--only NAME]
    python benchmarks/consumer_speed.py --only kunlun --against 83a2d12    # #36: within 2x of main before it

Each audit is the whole process (``python -m compat.audit``, start-up included, bytecode caches on) with the
release already downloaded. Warm: the second and later runs. Cold (``--cold``): the scan cache and the build memo
of this tool emptied first (a separate cache directory with the downloads linked in). Targets (#20): warm, at
most 2 s for a consumer of 5,000 touchpoints and 6 s for one of 12,000. This tree keeps an audit's findings where
its inputs are immutable (``compat.audit.memo``), so its warm audit reads them back; "probes run" is the same warm
audit with the kept findings removed before each run (scan and build memo warm, every probe run): the figure to
hold against an earlier commit that kept none. (#36: vllm-kunlun, the largest consumer of the second corpus,
within 2x of main before #36, 83a2d12.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "9031ae0"
# (consumer release, vLLM, extra flags): about 5,000 and about 12,000 touchpoints.
CASES = [
    ("vllm-rbln==0.12.0", "0.30.0", ()),
    ("vllm-ascend==0.18.0", "0.18.0", ("--all-files",)),
    ("vllm-kunlun==0.11.1", "0.14.0", ()),
]
TARGETS = {0: 2.0, 1: 6.0}


def forget_findings(cache: str | None = None) -> None:
    """Remove the findings this tree keeps (``compat.audit.memo``), so the next audit runs every probe."""
    sys.path.insert(0, str(ROOT))
    from compat.cache import cache_dir

    home = Path(cache) if cache else cache_dir()
    for kept in (home / "audits").glob("*.pickle"):
        kept.unlink()


def run_once(code: Path, consumer: str, vllm: str, extra: tuple[str, ...], cache: str | None = None,
             forget: bool = False) -> tuple[float, dict]:
    if forget:
        forget_findings(cache)
    env = dict(os.environ, PYTHONPATH=str(code))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if cache:
        env["COMPAT_CACHE_DIR"] = cache
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "compat.audit", "--consumer", consumer, "--vllm", vllm,
                               "--confirm", "never", "--no-reports", "--format", "json", "--output", out.name,
                               *extra], env=env, capture_output=True, text=True, cwd=code)
        elapsed = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            raise SystemExit(f"audit of {consumer} at {vllm} by {code} failed (exit {proc.returncode}): "
                             f"{proc.stderr.strip()[-2000:]}")
        report = json.loads(Path(out.name).read_text())
    return elapsed, report


def cold_cache() -> str:
    """A cache directory with this machine's downloads and extracted sources, but no scans and no memos."""
    from compat.cache import cache_dir

    sys.path.insert(0, str(ROOT))
    home = cache_dir()
    fresh = tempfile.mkdtemp(prefix="compat-cold-")
    for name in ("dists", "src", "releases", "index", "remote"):
        if (home / name).exists():
            os.symlink(home / name, Path(fresh, name))
    return fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default=BASELINE, help=f"the earlier commit to time (default {BASELINE})")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-against", action="store_true", help="time this tree only")
    parser.add_argument("--cold", action="store_true", help="also time a cold audit (no scan cache, no memo)")
    parser.add_argument("--only", default="", help="the cases whose consumer contains this")
    args = parser.parse_args()
    trees = [("this tree", ROOT)]
    scratch = None
    if not args.skip_against:
        scratch = tempfile.mkdtemp(prefix="compat-against-")
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
        trees.append((f"{args.against}", Path(scratch)))
    try:
        for number, (consumer, vllm, extra) in enumerate(CASES):
            if args.only not in consumer:
                continue
            for label, code in trees:
                run_once(code, consumer, vllm, extra)  # fills the caches this code keeps
                ways = [("warm", False)] + ([("warm, probes run", True)] if code == ROOT else [])
                for way, forget in ways:
                    timed = [run_once(code, consumer, vllm, extra, forget=forget) for _ in range(args.repeat)]
                    seconds = [t for t, _ in timed]
                    summary = timed[0][1]["summary"]
                    touchpoints = timed[0][1]["consumer"]["touchpoints"]
                    target = f" (target {TARGETS[number]:.0f} s)" if code == ROOT and number in TARGETS else ""
                    print(f"{consumer} @ {vllm} {' '.join(extra)}: {touchpoints} touchpoints, "
                          f"{summary['broken']} broken; {label}: {way} {statistics.median(seconds):.2f} s "
                          f"(min {min(seconds):.2f}, max {max(seconds):.2f}){target}", flush=True)
            if args.cold:
                cache = cold_cache()
                try:
                    cold, _ = run_once(ROOT, consumer, vllm, extra, cache)
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                print(f"{consumer} @ {vllm}: this tree, cold (scan and build memo rebuilt): {cold:.1f} s", flush=True)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
