"""How fast the gate checks a directory of hidden-state files: header-only, and with --values.

    python benchmarks/gate_speed.py [--files 20000] [--pt-files 2000] [--hidden 64] [--dir DIR] [--repeat 3]

Creates (once; reused when --dir already holds them) a directory of files as the tools write them:
vLLM's extraction layout (``hs_{i}.safetensors``: hidden_states [T, 4, hidden] bf16, token_ids [T]) with
T drawn from 16..128, and speculators 0.3.0's ``data_{i}.pt`` (torch.save of input_ids, a list of four
[T, hidden] layers, loss_mask). Then, warm cache, prints files/s and bytes/s for:

- the safetensors library's own metadata reader (safe_open, keys, each tensor's shape and dtype), for
  comparison: the gate's header checks should be limited by the file system as the library is;
- the gate, header-only, over the safetensors files and over the .pt files (torch.load(mmap=True,
  weights_only=True) is timed beside it);
- the gate with --values over a subset (every tensor byte read and checked), and over a few large files
  (T 1024, hidden 4096, 4 layers: 32 MiB each, the size of a real sample) where bytes/s is what counts.

Aim: header-only at least 15,000 small safetensors files/s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from compat.gate import GateOptions, run_gate  # noqa: E402

LAYERS = 4


def make(directory: Path, files: int, pt_files: int, hidden: int) -> None:
    st_dir, pt_dir = directory / "vllm", directory / "speculators"
    if st_dir.is_dir() and len(os.listdir(st_dir)) == files and pt_dir.is_dir() and \
            len(os.listdir(pt_dir)) == pt_files:
        return
    st_dir.mkdir(parents=True, exist_ok=True)
    pt_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    pool = torch.randn(128, LAYERS, hidden, generator=g) * torch.tensor([1.0, 1.5, 2.0, 3.0]).view(1, LAYERS, 1)
    pool = pool.to(torch.bfloat16)
    for i in range(files):
        t = rng.randint(16, 128)
        save_file({"hidden_states": pool[:t].contiguous(), "token_ids": torch.randint(0, 32000, (t,))},
                  str(st_dir / f"hs_{i}.safetensors"))
    for i in range(pt_files):
        t = rng.randint(16, 128)
        torch.save({"input_ids": torch.randint(0, 32000, (t,)),
                    "hidden_states": [pool[:t, k].contiguous() for k in range(LAYERS)],
                    "loss_mask": torch.ones(t, dtype=torch.long)}, pt_dir / f"data_{i}.pt")


def make_large(directory: Path, files: int) -> None:
    if directory.is_dir() and len(os.listdir(directory)) == files:
        return
    directory.mkdir(parents=True, exist_ok=True)
    scale = torch.tensor([1.0, 1.5, 2.0, 3.0]).view(1, LAYERS, 1)
    for i in range(files):
        g = torch.Generator().manual_seed(i)
        hs = (torch.randn(1024, LAYERS, 4096, generator=g) * scale).to(torch.bfloat16)
        save_file({"hidden_states": hs, "token_ids": torch.randint(0, 32000, (1024,), generator=g)},
                  str(directory / f"hs_{i}.safetensors"))


def timed(fn, repeat: int) -> float:
    fn()  # warm the page cache and the imports
    return statistics.median(_once(fn) for _ in range(repeat))


def _once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def du(paths: list[str]) -> int:
    return sum(os.stat(p).st_size for p in paths)


def line(label: str, files: int, seconds: float, nbytes: int) -> None:
    print(f"{label:58} {files / seconds:>10,.0f} files/s {nbytes / seconds / 2**20:>10,.1f} MiB/s "
          f"({files} files, {nbytes / 2**20:,.1f} MiB, {seconds:.3f} s)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=20000, help="vLLM-layout safetensors files")
    p.add_argument("--pt-files", type=int, default=2000, help="speculators-layout .pt files")
    p.add_argument("--values-files", type=int, default=2000, help="files checked with --values")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--large-files", type=int, default=8, help="files of [1024, 4, 4096] bf16 for --values")
    p.add_argument("--dir", type=Path, help="where to keep the files (default: a temporary directory)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="compat-gate-bench-") as tmp:
        root = args.dir or Path(tmp)
        started = time.perf_counter()
        make(root, args.files, args.pt_files, args.hidden)
        print(f"files in {root} (made or found in {time.perf_counter() - started:.1f} s); hidden {args.hidden}, "
              f"{LAYERS} layers, T 16..128, bfloat16; {os.cpu_count()} CPUs")
        st = sorted(str(p) for p in (root / "vllm").iterdir())
        pt = sorted(str(p) for p in (root / "speculators").iterdir())

        def library():
            for path in st:
                with safe_open(path, framework="pt") as f:
                    for key in f.keys():
                        s = f.get_slice(key)
                        s.get_shape()
                        s.get_dtype()

        def torch_load():
            for path in pt:
                torch.load(path, mmap=True, weights_only=True, map_location="cpu")

        def gate(paths, hidden=args.hidden, **kw):
            def run():
                result = run_gate(GateOptions(paths=tuple(Path(x) for x in paths), hidden_size=hidden,
                                              dtype="bfloat16", layers=LAYERS, **kw))
                assert result.exit_code == 0, [f.message for f in result.failing()][:3]
                run.value_bytes = result.summary.value_bytes
            return run

        st_bytes, pt_bytes = du(st), du(pt)
        line("safetensors library: safe_open + shapes (reference)", len(st), timed(library, args.repeat), st_bytes)
        line("gate header-only, vllm-safetensors", len(st), timed(gate([root / "vllm"]), args.repeat), st_bytes)
        line("torch.load(mmap, weights_only) of the .pt files (reference)", len(pt),
             timed(torch_load, args.repeat), pt_bytes)
        line("gate header-only, speculators-pt", len(pt), timed(gate([root / "speculators"]), args.repeat),
             pt_bytes)
        subset = st[: args.values_files]
        with tempfile.TemporaryDirectory(prefix="compat-gate-values-") as sub:
            for path in subset:  # hard links: the same files, in a directory of their own
                os.link(path, os.path.join(sub, os.path.basename(path)))
            run = gate([sub], values=True)
            seconds = timed(run, args.repeat)
            line("gate --values, vllm-safetensors (file bytes)", len(subset), seconds, du(subset))
            print(f"{'':58} {'':>10} {'':7} {run.value_bytes / seconds / 2**20:>10,.1f} MiB/s of tensor values")
        if args.large_files:
            make_large(root / "large", args.large_files)
            large = sorted(str(p) for p in (root / "large").iterdir())
            seconds = timed(gate([root / "large"], hidden=4096, values=True), args.repeat)
            line("gate --values, large vllm-safetensors [1024, 4, 4096] bf16", len(large), seconds, du(large))
        pt_subset = pt[: args.values_files]
        run = gate(pt_subset, values=True)
        seconds = timed(run, args.repeat)
        line("gate --values, speculators-pt (file bytes)", len(pt_subset), seconds, du(pt_subset))
        print(f"{'':58} {'':>10} {'':7} {run.value_bytes / seconds / 2**20:>10,.1f} MiB/s of tensor values")


if __name__ == "__main__":
    main()
