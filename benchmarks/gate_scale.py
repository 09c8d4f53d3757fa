"""How the gate scales: files/s and GB/s with 1 and 2 workers on local disk and on S3, a worker's peak memory by
the largest file, and a throughput model from the measured figures to N nodes.

    python benchmarks/gate_scale.py [--tiny 3000] [--s3-tiny 200] [--medium 16] [--medium-mb 4]
                                    [--memory-mb 8 64 256] [--s3-memory-mb 8 256] [--repeat 1] [--dir DIR]
                                    [--nodes 16] [--cores 16] [--dataset-tb 10] [--latency-ms 100]
                                    [--connection-gbps 5] [--nic-gbps 12.5] [--prefix-rps 5500] [--prefixes 1]
                                    [--store-gbps 0]

Makes (once; reused from --dir) a synthetic dataset as the tools write it: ``--tiny`` files for header mode (four
in five vLLM-layout ``.safetensors``, one in five speculators ``.pt``: T 16..128 x 4 layers x hidden 64 bf16,
those of ``benchmarks/gate_speed.py``), ``--medium`` samples of about ``--medium-mb`` MiB for ``--values``
(half speculators ``.pt``, half vLLM ``.safetensors``, 4 layers x hidden 4096 bf16: a Llama-8B-sized state) and,
for the memory figures, two vLLM files of each ``--memory-mb`` size. Then:

1. Throughput: one ``run_gate`` per line, each in a child process of its own (the S3 server and its proxy stay in
   this one; the child's interpreter start and imports, torch's with ``--values``, are not in the time), header
   mode over the tiny files and ``--values`` over the medium ones, with ``--jobs 1`` and ``--jobs 2`` (workers
   started whatever the run's size: ``mapstep.WORKER_START_SECONDS = 0``, so their start, torch's import with
   ``--values`` included, is in the time), on local disk (warm page cache) and on moto's S3 server on loopback
   (``tests/object_store.py``, as the tests start it), reached through the counting proxy there: the requests a
   file costs are counted, not guessed. S3 gets ``--s3-tiny`` tiny files of their own (moto answers some 20 to
   100 requests a second on 2 busy cores). Peak RSS: the child's (VmHWM) and its largest worker's
   (``getrusage(RUSAGE_CHILDREN).ru_maxrss``).
2. Memory: the same with ``--values --jobs 2`` over two files of each ``--memory-mb`` size (one a worker), and
   by ``s3://`` for ``--s3-memory-mb``. ``value_stats.CHUNK_BYTES`` (32 MiB) is the most a worker reads at once.
3. The model: one worker checks a file of the medium set's mean size S in ``S / r + q * latency`` seconds, where
   r is the measured ``--jobs 1`` ``--values`` rate on local disk (file bytes over the whole run) and q the
   requests a file cost on S3 (measured; its reads are sequential, so each request's first-byte latency adds);
   at most ``--connection-gbps`` (one connection at a time). A node runs ``--cores`` workers, at most
   ``--nic-gbps``; the cluster ``--nodes`` nodes, at most the store's request rate (``--prefix-rps`` per prefix x
   ``--prefixes``, each file q requests) and ``--store-gbps`` where given (S3 states no aggregate limit). It
   prints each bound, which binds, the time for ``--dataset-tb``, the same at other latencies, and the bound
   were a worker's requests overlapped. The reduce step (one process, after the map) is not in the model.

Defaults of the model and their sources: Amazon S3 "Best practices design patterns: optimizing Amazon S3
performance" (docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html): at least 5,500
GET/HEAD requests per second per partitioned prefix, first-byte latencies of roughly 100-200 ms (the low end
taken), up to 100 Gb/s per instance; AWS re:Post "Maximizing Amazon S3 transfer throughput to Amazon EC2
instances": at most 5 Gb/s per connection; a node of 16 cores (32 vCPUs: EC2 m6i.8xlarge or c6i.8xlarge) has a
12.5 Gb/s network.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Imports below are made inside functions: worker processes (spawned) import this module again, and should not
# import torch unless their work needs it.

LAYERS = 4
WIDE = 4096
"""The medium and memory files' hidden size (Llama-3-8B's)."""

_CHILD = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from compat.gate import GateOptions, mapstep, run_gate
mapstep.WORKER_START_SECONDS = 0.0
spec = json.loads(sys.argv[1])
if spec["values"]:
    import torch  # as the command line does before it reads a file
options = GateOptions(paths=tuple(p if "://" in p else Path(p) for p in spec["paths"]), hidden_size=spec["hidden"],
                      layers=spec["layers"], values=spec["values"], jobs=spec["jobs"],
                      storage_options=tuple(tuple(o) for o in spec["storage"]))
started = time.perf_counter()
result = run_gate(options)
seconds = time.perf_counter() - started
with open("/proc/self/status") as status:
    own = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({{"seconds": seconds, "files": result.summary.files, "bytes": result.summary.bytes,
                  "failing": [f.message for f in result.failing()][:3], "gate_mb": own / 1024,
                  "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}))
"""


def _states(tokens: int, seed: int):
    """[T, 4, 4096] bf16 states whose RMS grows with depth, made a slice at a time (a 256 MiB file needs no
    GiB of float32 at once)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([1.0, 1.5, 2.0, 3.0]).view(1, LAYERS, 1)
    out = torch.empty(tokens, LAYERS, WIDE, dtype=torch.bfloat16)
    for start in range(0, tokens, 1024):
        part = out[start:start + 1024]
        part.copy_(torch.randn(part.shape, generator=g) * scale)
    return out


def _tokens(megabytes: float) -> int:
    return max(1, round(megabytes * 2**20 / (LAYERS * WIDE * 2)))


def make_medium(directory: Path, files: int, megabytes: float) -> None:
    if directory.is_dir() and len(os.listdir(directory)) == files:
        return
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    for i in range(files):
        tokens = _tokens(megabytes * rng.uniform(0.75, 1.25))
        hs = _states(tokens, i)
        ids = torch.randint(0, 32000, (tokens,), generator=torch.Generator().manual_seed(i))
        if i % 2:
            save_file({"hidden_states": hs, "token_ids": ids}, str(directory / f"hs_{i}.safetensors"))
        else:
            torch.save({"input_ids": ids, "hidden_states": [hs[:, k].contiguous() for k in range(LAYERS)],
                        "loss_mask": torch.ones(tokens, dtype=torch.long)}, directory / f"data_{i}.pt")


def make_memory(directory: Path, megabytes: int) -> None:
    if directory.is_dir() and len(os.listdir(directory)) == 2:
        return
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    tokens = _tokens(megabytes)
    for i in range(2):
        save_file({"hidden_states": _states(tokens, 100 + i),
                   "token_ids": torch.randint(0, 32000, (tokens,), generator=torch.Generator().manual_seed(i))},
                  str(directory / f"hs_{i}.safetensors"))


def make_tiny(root: Path, files: int) -> list[Path]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gate_speed import make

    make(root, files - files // 5, files // 5, 64)
    return [root / "vllm", root / "speculators"]


def size_of(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in p.rglob("*") if f.is_file())


def run(paths: list, jobs: int, values: bool, hidden: int, storage: tuple = ()) -> dict:
    """One ``run_gate`` in a child process of its own (workers forced where ``jobs`` > 1): its seconds, files,
    file bytes, its peak RSS and its largest worker's."""
    spec = {"paths": list(map(str, paths)), "jobs": jobs, "values": values, "hidden": hidden, "layers": LAYERS,
            "storage": [list(o) for o in storage]}
    done = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT)), json.dumps(spec)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the gate's run failed: {done.stderr.strip()[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not figures["failing"], figures["failing"]
    return figures


def measure(label: str, paths: list, values: bool, hidden: int, repeat: int, storage: tuple = (),
            proxy=None) -> dict[int, dict]:
    """``label``'s runs with 1 and 2 workers: a line each, and the figures by worker count."""
    out = {}
    for jobs in (1, 2):
        if proxy is not None:
            proxy.log.clear()
        runs = [run(paths, jobs, values, hidden, storage) for _ in range(repeat)]
        figures = dict(runs[0], seconds=statistics.median(r["seconds"] for r in runs))
        seconds, files, nbytes = figures["seconds"], figures["files"], figures["bytes"]
        asked = ""
        if proxy is not None:
            objects = [e for e in proxy.log if "?" not in e[1]]
            figures["requests_per_file"] = len(objects) / repeat / files
            asked = f"  {figures['requests_per_file']:4.1f} requests/file"
        worker = f"worker {max(r['worker_mb'] for r in runs):4,.0f} MB" if jobs > 1 else " " * 14
        print(f"{label:36} --jobs {jobs} {seconds:7.3f} s {files / seconds:>7,.0f} files/s "
              f"{nbytes / seconds / 1e9:8.4f} GB/s  peak RSS: gate {max(r['gate_mb'] for r in runs):4,.0f} MB "
              f"{worker}{asked}", flush=True)
        out[jobs] = figures
    return out


def model(args: argparse.Namespace, rate: float, file_bytes: float, requests: float) -> None:
    """The throughput model (see the module's docstring), printed bound by bound."""
    latency = args.latency_ms / 1e3
    per_worker = file_bytes / (file_bytes / rate + requests * latency)
    bounds = {
        "workers' reading (measured rate, sequential requests)": args.nodes * args.cores * per_worker,
        f"one connection per worker ({args.connection_gbps:g} Gb/s)": args.nodes * args.cores *
        args.connection_gbps / 8 * 1e9,
        f"node network ({args.nic_gbps:g} Gb/s x {args.nodes})": args.nodes * args.nic_gbps / 8 * 1e9,
        f"store request rate ({args.prefix_rps:,} req/s x {args.prefixes} prefix)":
            args.prefix_rps * args.prefixes / requests * file_bytes,
    }
    if args.store_gbps:
        bounds[f"store bandwidth ({args.store_gbps:g} Gb/s)"] = args.store_gbps / 8 * 1e9
    dataset = args.dataset_tb * 1e12
    print(f"\nModel: {args.nodes} nodes x {args.cores} workers, files of {file_bytes / 2**20:.1f} MiB, "
          f"{requests:.1f} requests each, {args.latency_ms:g} ms first-byte latency, measured worker rate "
          f"{rate / 1e9:.3f} GB/s")
    for name, value in bounds.items():
        print(f"  {name:60} {value / 1e9:8.2f} GB/s")
    binding = min(bounds, key=bounds.get)
    rate_all = bounds[binding]
    print(f"  binds: {binding}: {args.dataset_tb:g} TB in {dataset / rate_all / 3600:.2f} h "
          f"({dataset / rate_all / 60:,.0f} min)")
    for ms in (10, 30, 100, 200):
        worker = args.nodes * args.cores * file_bytes / (file_bytes / rate + requests * ms / 1e3)
        best = min(worker, *list(bounds.values())[1:])
        print(f"    at {ms:3} ms: workers {worker / 1e9:6.2f} GB/s, cluster {best / 1e9:6.2f} GB/s, "
              f"{args.dataset_tb:g} TB in {dataset / best / 3600:5.2f} h")
    hidden = dict(bounds)
    hidden["workers' reading (measured rate, sequential requests)"] = args.nodes * args.cores * rate
    other = min(hidden, key=hidden.get)
    print(f"  were requests overlapped (latency hidden), the bound would be {other}: "
          f"{hidden[other] / 1e9:.2f} GB/s, {args.dataset_tb:g} TB in {dataset / hidden[other] / 3600:.2f} h")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", type=int, default=3000, help="tiny files for header mode (local)")
    p.add_argument("--s3-tiny", type=int, default=200, help="tiny files for header mode on S3")
    p.add_argument("--medium", type=int, default=16, help="samples for --values")
    p.add_argument("--medium-mb", type=float, default=4.0, help="their mean size in MiB")
    p.add_argument("--memory-mb", type=int, nargs="*", default=[8, 64, 256], help="largest-file sizes, local")
    p.add_argument("--s3-memory-mb", type=int, nargs="*", default=[8, 256], help="largest-file sizes, on S3")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--dir", type=Path, help="where to keep the files (default: a temporary directory)")
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--cores", type=int, default=16)
    p.add_argument("--dataset-tb", type=float, default=10.0)
    p.add_argument("--latency-ms", type=float, default=100.0)
    p.add_argument("--connection-gbps", type=float, default=5.0)
    p.add_argument("--nic-gbps", type=float, default=12.5)
    p.add_argument("--prefix-rps", type=int, default=5500)
    p.add_argument("--prefixes", type=int, default=1)
    p.add_argument("--store-gbps", type=float, default=0.0, help="the store's aggregate bandwidth (0: no limit)")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.object_store import Proxy, S3Server, storage_options

    with tempfile.TemporaryDirectory(prefix="compat-gate-scale-") as tmp:
        root = args.dir or Path(tmp)
        started = time.perf_counter()
        tiny = make_tiny(root / "tiny", args.tiny)
        s3_tiny = make_tiny(root / "s3-tiny", args.s3_tiny)
        make_medium(root / "medium", args.medium, args.medium_mb)
        for mb in sorted(set(args.memory_mb) | set(args.s3_memory_mb)):
            make_memory(root / f"memory-{mb}", mb)
        medium_bytes = size_of([root / "medium"])
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; files made or found in {root} in "
              f"{time.perf_counter() - started:.1f} s: {args.tiny} tiny ({size_of(tiny) / 1e6:.1f} MB), "
              f"{args.medium} medium ({medium_bytes / 1e6:.1f} MB)", flush=True)
        server = S3Server()
        proxy = Proxy(server.endpoint)
        try:
            started = time.perf_counter()
            urls = [server.upload(p, "scale", f"s3-tiny/{p.name}") for p in s3_tiny]
            medium_url = server.upload(root / "medium", "scale", "medium")
            memory_urls = {mb: server.upload(root / f"memory-{mb}", "scale", f"memory-{mb}")
                           for mb in args.s3_memory_mb}
            print(f"uploaded to moto's S3 on loopback in {time.perf_counter() - started:.1f} s\n", flush=True)
            storage = storage_options(proxy.endpoint)
            measure(f"local, header, {args.tiny} tiny", tiny, False, 64, args.repeat)
            local = measure(f"local, --values, {args.medium} x ~{args.medium_mb:g} MiB", [root / "medium"], True,
                            WIDE, args.repeat)
            measure(f"S3, header, {args.s3_tiny} tiny", urls, False, 64, args.repeat, storage, proxy)
            remote = measure(f"S3, --values, {args.medium} x ~{args.medium_mb:g} MiB", [medium_url], True, WIDE,
                             args.repeat, storage, proxy)
            print("\nPeak RSS by the largest file, --values --jobs 2 (two files of the size, one a worker):")
            for where, sizes in (("local", args.memory_mb), ("S3", args.s3_memory_mb)):
                for mb in sizes:
                    figures = run([root / f"memory-{mb}"] if where == "local" else [memory_urls[mb]], 2, True,
                                  WIDE, () if where == "local" else storage_options(server.endpoint))
                    print(f"  {where:5} largest file {mb:4} MiB: largest worker {figures['worker_mb']:6,.0f} MB, "
                          f"gate process {figures['gate_mb']:5,.0f} MB ({figures['seconds']:.1f} s)", flush=True)
        finally:
            proxy.stop()
            server.stop()
        one = local[1]
        # a worker on another node did not list the files: it asks each one's size (a HEAD), as --jobs 2 does here
        model(args, one["bytes"] / one["seconds"], one["bytes"] / one["files"],
              max(remote[1]["requests_per_file"], remote[2]["requests_per_file"]))


if __name__ == "__main__":
    main()
