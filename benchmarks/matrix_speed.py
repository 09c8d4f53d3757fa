"""How fast the version matrix is, and what reading a nightly wheel costs.

    python benchmarks/matrix_speed.py                 # warm matrix (>=0.11) and the range-reading ratio
    python benchmarks/matrix_speed.py --cold 4        # also: the 4 newest releases from an empty cache,
                                                      # fetched 8 at a time and then one at a time

Warm: every build's answers are in the cache (run the matrix once first). Range ratio: a nightly-style wheel
(a real release's Python files beside 96 MiB of incompressible binaries) served on loopback, read with range
requests: bytes fetched over the wheel's size.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat import sources  # noqa: E402
from compat.audit.pipeline import AuditOptions, Auditor  # noqa: E402
from compat.matrix.run import Request, expand, fetch, run  # noqa: E402
from compat.sources import remote  # noqa: E402
from tests.loopback import serve  # noqa: E402


def warm(spec: str) -> None:
    options = AuditOptions(confirm="never")
    started = time.perf_counter()
    scan = Auditor(options).scan_consumer()
    run(scan, Request([spec]), options, show_progress=False)  # fills the cache if it is cold
    first = time.perf_counter() - started
    times = []
    for _ in range(3):
        started = time.perf_counter()
        scan = Auditor(options).scan_consumer()
        matrix = run(scan, Request([spec]), options, show_progress=False)
        times.append(time.perf_counter() - started)
    print(f"matrix {spec}: {len(matrix.columns)} builds x {len(matrix.rows)} touchpoints; first run {first:.1f} s, "
          f"warm {min(times):.2f} s (best of 3), {sorted(times)[1]:.2f} s (median)")


def cold(newest: int) -> None:
    columns = expand(Request([">=0.11"]))[-newest:]
    for workers in (8, 1):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["COMPAT_CACHE_DIR"] = cache
            started = time.perf_counter()
            opened = fetch(columns, Request([]), workers=workers)
            took = time.perf_counter() - started
            # Whole archives (sdists) land in dists/; a wheel's Python files are fetched with range requests and
            # their directory records how many bytes that took.
            size = sum(p.stat().st_size for p in Path(cache, "dists").glob("*")) + sum(
                int(p.read_text().split()[0]) for p in Path(cache, "remote").glob("*/.complete")
                if p.read_text().split()[:1] and p.read_text().split()[0].isdigit())
            errors = [c.label for c, b in opened if b is None]
            print(f"cold fetch of {', '.join(c.label for c in columns)} with {workers} at a time: {took:.1f} s, "
                  f"{size / 2**20:.0f} MiB downloaded ({size / 2**20 / took:.1f} MiB/s)"
                  + (f"; failed: {errors}" if errors else ""))
    os.environ.pop("COMPAT_CACHE_DIR", None)


def ranges(version: str = "0.12.0", blob_mib: int = 96) -> None:
    release = sources.tree_from_release("vllm", version).root
    with tempfile.TemporaryDirectory() as root:
        name = f"vllm-{version}.dev1+gabc-cp38-abi3-manylinux1_x86_64.whl"
        wheel = Path(root, name)
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
            files = sorted((release / "vllm").rglob("*.py"))
            for i, path in enumerate(files):
                zf.write(path, path.relative_to(release).as_posix())
                if i % (len(files) // 4) == 0:  # compiled kernels between the Python files, as in vLLM's wheels
                    zf.writestr(zipfile.ZipInfo(f"vllm/_C{i}.abi3.so"), os.urandom(blob_mib // 5 * 2**20))
        server, url = serve(Path(root), True)
        os.environ["COMPAT_CACHE_DIR"] = str(Path(root, "cache"))
        try:
            transfer = remote.Transfer()
            started = time.perf_counter()
            remote.wheel_sources(f"{url}/{name}", transfer)
            took = time.perf_counter() - started
        finally:
            server.shutdown()
            os.environ.pop("COMPAT_CACHE_DIR", None)
    print(f"nightly-style wheel ({transfer.size / 2**20:.0f} MiB, the Python files of vLLM {version}): fetched "
          f"{transfer.fetched / 2**20:.1f} MiB in {transfer.requests} range requests, ratio {transfer.ratio:.3f}, "
          f"{took:.1f} s on loopback")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default=">=0.11")
    p.add_argument("--cold", type=int, default=0, help="also fetch this many newest releases from an empty cache")
    args = p.parse_args()
    warm(args.spec)
    ranges()
    if args.cold:
        cold(args.cold)
    return 0


if __name__ == "__main__":
    sys.exit(main())
