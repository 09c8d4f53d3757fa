"""Time the default audit (speculators 0.3.0, ``--confirm auto``) from a cold and from a warm cache, and say
whether it imported vLLM and ran engines.

    python benchmarks/audit_speed.py [--vllm SPEC] [--repeat 5]

Without ``--vllm`` it is the audit a user gets by default: where vLLM is installed, its files read statically
(never imported), else the latest release; ``--vllm 0.32.0`` times one release, ``--vllm installed`` the
import-based reading of the installed build. Cold: an empty cache directory (speculators, and a release, are
downloaded and extracted, then every module the touchpoints need is parsed). Cold parse: downloads kept, the
surface memo and the findings kept (``compat.audit.memo``) removed. Warm: the same cache, second and later runs,
each a fresh process as ``python -m compat.audit`` is. Aims: under 5 s for the default audit where vLLM is
installed (the issue's), and about 0.3 s warm on a 2-core machine. #36 times the default audit against one cached
release: ``--vllm 0.32.0`` (where vLLM is installed, the default audit now runs the runtime confirmation).

Each run says whether ``vllm`` was in ``sys.modules`` when the audit ended (asked inside the audit's own process)
and whether it started the runtime confirmation's engines. The runs write and use bytecode caches
(``PYTHONDONTWRITEBYTECODE`` is cleared for them), as an installed package has: without them every run compiles
the tool's sources again, which costs about 0.2 s.

Each warm run is paired with a bare ``python -c pass`` started right before it (the same interpreter, the same
environment): the ratio of the two medians is the audit's cost in units of starting Python, which a loaded or
slow machine changes far less than it changes seconds. Aim (#36): within 10x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "audit_speed: vllm imported:"
AUDIT = ("import sys\nfrom compat.audit.cli import main\ncode = main(sys.argv[1:])\n"
         f"print({MARK!r}, 'vllm' in sys.modules, file=sys.stderr)\nsys.exit(code)\n")


@dataclass(frozen=True)
class Run:
    seconds: float
    imported: bool
    engines: bool


def run_once(cache: str, vllm: str | None) -> Run:
    env = dict(os.environ, COMPAT_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    args = ["--no-reports", "--format", "json", "--output", os.devnull] + (["--vllm", vllm] if vllm else [])
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", AUDIT, *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"audit failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    said = next((line for line in proc.stderr.splitlines() if line.startswith(MARK)), f"{MARK} ?")
    return Run(elapsed, said.endswith("True"), "confirming the static verdicts on real engines" in proc.stderr)


def bare_python() -> float:
    """One ``python -c pass``, the floor every process pays."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=None, help="a build spec (default: none, as the default audit)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compat-bench-") as cache:
        cold = run_once(cache, args.vllm)
        # Cold but with downloads in place: only the parsing and the surface memo are rebuilt.
        for memo in [*Path(cache, "surfaces").glob("*.json"), *Path(cache, "audits").glob("*.pickle")]:
            memo.unlink()  # the build memo and the findings kept (compat.audit.memo)
        parse_only = run_once(cache, args.vllm)
        warm, bare = [], []
        for _ in range(args.repeat):
            bare.append(bare_python())
            warm.append(run_once(cache, args.vllm))
    every = [cold, parse_only, *warm]
    times = [w.seconds for w in warm]
    print(f"audit of speculators 0.3.0, --confirm auto, {'--vllm ' + args.vllm if args.vllm else 'no --vllm'} "
          f"(written-for evidence from 0.11.0 included)")
    print(f"cold (empty cache: download, extract, parse): {cold.seconds:6.2f} s")
    print(f"cold parse (downloads cached, no memo):      {parse_only.seconds:6.2f} s")
    print(f"warm (median of {args.repeat}, process start included): {statistics.median(times):6.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f})")
    print(f"bare python -c pass (median of {args.repeat}, paired): {statistics.median(bare):6.3f} s; "
          f"warm audit / bare python: {statistics.median(times) / statistics.median(bare):.1f}x (aim: within 10x)")
    imported = sum(r.imported for r in every)
    print(f"vllm imported: in {imported} of {len(every)} runs")
    print(f"runtime confirmation engines started: {'yes' if any(r.engines for r in every) else 'no'}")


if __name__ == "__main__":
    main()
