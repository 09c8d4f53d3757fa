"""Time one audit (speculators 0.3.0 against a vLLM release) from a cold and from a warm cache.

    python benchmarks/audit_speed.py [--vllm 0.32.0] [--repeat 5]

Cold: an empty cache directory (the release and speculators are downloaded and extracted, then
every module the touchpoints need is parsed). Warm: the same cache, second and later runs, as
`python -m compat.audit` runs them in a fresh process. Aim: under 0.3 s warm on a 2-core machine.

The runs write and use bytecode caches (``PYTHONDONTWRITEBYTECODE`` is cleared for them), as an installed
package has: without them every run compiles the tool's sources again, which costs about 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(cache: str, vllm: str) -> float:
    env = dict(os.environ, COMPAT_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "compat.audit", "--vllm", vllm, "--no-reports", "--format",
                           "json", "--output", os.devnull], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"audit failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default="0.32.0")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compat-bench-") as cache:
        cold = run_once(cache, args.vllm)
        # Cold but with downloads in place: only the parsing and the surface memo are rebuilt.
        for memo in Path(cache, "surfaces").glob("*.json"):
            memo.unlink()
        parse_only = run_once(cache, args.vllm)
        warm = [run_once(cache, args.vllm) for _ in range(args.repeat)]
    print(f"audit of speculators 0.3.0 against vllm {args.vllm} (written-for evidence from 0.11.0 included)")
    print(f"cold (empty cache: download, extract, parse): {cold:6.2f} s")
    print(f"cold parse (downloads cached, no memo):      {parse_only:6.2f} s")
    print(f"warm (median of {args.repeat}, process start included): {statistics.median(warm):6.2f} s "
          f"(min {min(warm):.2f}, max {max(warm):.2f})")


if __name__ == "__main__":
    main()
