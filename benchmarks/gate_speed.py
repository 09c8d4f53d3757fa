"""How fast the gate checks a directory of hidden-state files, and what a hostile header costs it.

    python benchmarks/gate_speed.py [--files 20000] [--pt-files 2000] [--values-files 2000] [--hidden 64]
                                    [--large-files 8] [--header-mb 100] [--dir DIR] [--repeat 3]
                                    [--partial-layers 16]

Creates (once; reused when --dir already holds them) a directory of files as the tools write them:
vLLM's extraction layout (``hs_{i}.safetensors``: hidden_states [T, 4, hidden] bf16, token_ids [T]) with
T drawn from 16..128, and speculators 0.3.0's ``data_{i}.pt`` (torch.save of input_ids, a list of four
[T, hidden] layers, loss_mask). Then, warm cache, prints:

- tiny files, header mode: the gate's time per file beside a loop that only opens each file
  (``with open(p, "rb") as f: f.read(64)``), and their ratio, for .safetensors and for .pt; the safetensors
  library's metadata reader (safe_open, keys, shapes, dtypes) and ``torch.load(mmap=True, weights_only=True)``
  beside them for reference;
- tiny files, ``--values``: the gate's time per file (every tensor byte read and checked), for both;
- ``--values`` over a few large files (T 1024, hidden 4096, 4 layers: 32 MiB each, a real sample's size),
  where bytes/s is what counts;
- ``--reference``'s recompute per token on a Llama of --partial-layers layers: the full model (the samples the full
  check picks) beside the partial one every sample gets (the embeddings and layer 0), and their ratio;
- tiny files, whole process (unless --no-process): ``python -m compat.gate DIR`` on each layout's directory, header
  mode and ``--values``, beside a child that only opens each file: wall time (start, imports and report included),
  their ratio, and the command's peak RSS;
- a header of --header-mb MB, in two shapes (1.4 million one-element tensors; one tensor and a
  ``__metadata__`` of a million strings): the gate's time and peak resident memory (VmHWM) on it beside the
  safetensors library's (``safe_open`` of the file, keys and metadata), each in a child process of its own.

Aims: header mode at least 15,000 small safetensors files/s on a 2-core machine, and per tiny file within 3x
the open-only loop; a 100 MB header linear in its size, the memory it takes within 3x its size (#37).

100 MB headers (2026-12-07, third sitting: the header walked an entry at a time): 1.4 million tensors 6.9 s,
peak RSS 239 MB from 24 MB at start (2.1x its size; 9.2 s and 1,044 MB, 10x, parsed whole); a million metadata
strings 1.9 s, 216 MB (1.9x; 1.7 s and 483 MB before). The safetensors library: 4.2 s, 1,213 MB and 1.8 s, 784 MB.

Whole process on 50,000 files of each layout (``--files 50000 --pt-files 50000``, 2026-12-07, second sitting):
header mode 2.9x (.safetensors) and 5.9x (.pt) the open-only process, ``--values`` 47-57x and 57-62x; with
``--values`` computed in numpy (third sitting, against 30.0 s and 33.8 s before in the same sitting): 12.1 s, 21x
and 15.1 s, 31x (docs/performance.md has the tables).

Measured on the 2-core development machine (shared with other jobs: figures vary by up to 2x run to run),
before (81daa0b) and after the "Bounded cost" changes, over 20,000 .safetensors and 2,000 .pt files
(``--values-files 200 --large-files 0 --repeat 1``; the 100 MB headers are the defaults'):

- 100 MB header of 1.4 million one-element tensors: gate 26.6 s and 2,193 MB peak RSS before (60 s under
  load), 8.4 s and 1,040 MB after; the safetensors library 4.9 s and 1,213 MB. Header of a million metadata
  strings: gate 3.5 s, 479 MB before; 1.6 s, 479 MB after; the library 2.0 s, 784 MB.
- tiny files, header mode, per file: .pt 201 us (21x the open-only loop's 9.7 us) before, 135 us (16x its
  8.3 us) after: not within 3x (reading the zip directory, each member checked against its local header, and
  unpickling the stubs are most of it); .safetensors 47 us (4.1x) before, 46 us (5.4x) after.
- tiny files with --values, per file: .pt 1,095 us before, 463 us after; .safetensors 459 us, 255 us.
- --values of a 629 MB sample (the CLI in a child process): VmPeak 1,906 MB before (the file mapped whole),
  914 MB after (one chunk at a time), where the process starts at about 680 MB (torch).
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import pickle
import random
import statistics
import struct
import subprocess
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


def make_distinct(directory: Path, source: Path, files: int) -> None:
    """``files`` of ``source``'s vLLM files again, each header made unlike any other by a ``__metadata__`` entry:
    the gate parses a header once per run and remembers it (most of a dataset's repeat, one token count at a
    time), so these measure a dataset where none repeats."""
    if directory.is_dir() and len(os.listdir(directory)) == files:
        return
    from safetensors.torch import load_file

    directory.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        save_file(load_file(str(source / f"hs_{i}.safetensors")), str(directory / f"hs_{i}.safetensors"),
                  metadata={"sample": str(i)})


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


def make_header(path: Path, megabytes: int, shape: str) -> None:
    """A valid safetensors file whose header is about ``megabytes`` MB: ``tensors``, one-element F32 tensors
    (about 70 bytes of header each); ``metadata``, one tensor and a ``__metadata__`` of 80-character strings."""
    if path.exists():
        return
    target, parts, size, n = megabytes * 10**6 - 200, [], 0, 0  # 200 bytes for the rest: at most 100 MB in all
    if shape == "tensors":
        while size < target - 100:
            parts.append(f'"t{n:07d}":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * n},{4 * n + 4}]}}')
            size, n = size + len(parts[-1]) + 1, n + 1
        header, data = "{" + ",".join(parts) + "}", bytes(4 * n)
    else:
        while size < target - 100:
            parts.append(f'"k{n:08d}":"{"v" * 80}"')
            size, n = size + len(parts[-1]) + 1, n + 1
        header = '{"__metadata__":{' + ",".join(parts) + '},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
        data = bytes(4)
    raw = header.encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


# Each measurement of a hostile header runs in a child process of its own, so one's memory does not count in
# another's; the child prints its seconds and its resident memory before and at its peak (VmHWM).
_CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
def rss(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith(field))
{imports}
base = rss("VmRSS:")
started = time.perf_counter()
{work}
print(json.dumps({{"seconds": time.perf_counter() - started, "base_mb": base, "peak_mb": rss("VmHWM:"),
                  "what": what}}))
"""
_GATE = ("from pathlib import Path\nfrom compat.gate import GateOptions, run_gate",
         "result = run_gate(GateOptions(paths=(Path({path!r}),)))\n"
         "what = [f.message[:70] for f in result.failing()]")
_LIBRARY = ("from safetensors import safe_open",
            "with safe_open({path!r}, framework='numpy') as f:\n"
            "    what = [len(list(f.keys())), len(f.metadata() or {{}})]")


def in_child(imports: str, work: str, path: Path) -> dict:
    code = _CHILD.format(root=str(ROOT), imports=imports, work=work.format(path=str(path)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def headers(root: Path, megabytes: int) -> None:
    for shape, what in (("tensors", "one-element tensors"), ("metadata", "one tensor, a __metadata__ of strings")):
        path = root / f"header_{megabytes}mb_{shape}.safetensors"
        make_header(path, megabytes, shape)
        print(f"header of {megabytes} MB: {what}")
        for label, (imports, work) in (("gate (run_gate on the file)", _GATE),
                                       ("safetensors library (safe_open: keys, metadata)", _LIBRARY)):
            m = in_child(imports, work, path)
            grown = (m['peak_mb'] - m['base_mb']) / megabytes
            aim = "; the aim: 3x" if label.startswith("gate") else ""
            print(f"  {label:50} {m['seconds']:8.2f} s  peak RSS {m['peak_mb']:>6,} MB (at start "
                  f"{m['base_mb']:,} MB: {grown:.1f}x the header's size more{aim})  {str(m['what'])[:70]}")


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


def per_file(label: str, files: int, seconds: float, opened: float | None = None) -> None:
    ratio = f"  {seconds / opened:5.1f}x the open-only loop" if opened else ""
    print(f"{label:58} {seconds / files * 1e6:>10,.1f} us per file{ratio}")


def open_only(paths: list[str]):
    """The floor a per-file check is compared with: open each file and read its first 64 bytes."""
    def run():
        for path in paths:
            with open(path, "rb") as f:
                f.read(64)
    return run


def bare_safetensors(paths: list[str]):
    """The least a Python reader of safetensors headers does, and nothing it checks: open, read the header,
    ``json.loads`` it. What the gate's per-file cost is above this is its checks, its views and its report."""
    def run():
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                head = os.read(fd, 4096)
            finally:
                os.close(fd)
            json.loads(head[8:8 + int.from_bytes(head[:8], "little")])
    return run


_CENTRAL = struct.Struct("<4s4x2H4x3I3H8xI")


class _Stub:
    def __init__(self, *args) -> None:
        self.args = args


class _BareUnpickler(pickle.Unpickler):
    """Unpickles torch.save's ``data.pkl`` into stubs, trusting it: no allow-list but the names it needs."""

    def find_class(self, module: str, name: str):
        return _Stub if name == "_rebuild_tensor_v2" else collections.OrderedDict if name == "OrderedDict" else name

    def persistent_load(self, pid):
        return pid


def bare_torch(paths: list[str]):
    """The least a Python reader of torch.save files does to know their tensors, and nothing it checks: read the
    file, find the zip directory's entries with one unpack each, unpickle ``data.pkl`` into stubs."""
    def run():
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                data = os.read(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            end = data.rfind(b"PK\x05\x06")
            count, _, pos = struct.unpack_from("<10xHII", data, end)
            members = {}
            for _ in range(count):
                _, _, _, _, _, _, nlen, elen, clen, header = _CENTRAL.unpack_from(data, pos)
                members[data[pos + 46:pos + 46 + nlen]] = header
                pos += 46 + nlen + elen + clen
            header = next(at for name, at in members.items() if name.endswith(b"data.pkl"))
            nlen, elen = struct.unpack_from("<HH", data, header + 26)
            _BareUnpickler(io.BytesIO(data[header + 30 + nlen + elen:])).load()
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=20000, help="vLLM-layout safetensors files")
    p.add_argument("--pt-files", type=int, default=2000, help="speculators-layout .pt files")
    p.add_argument("--values-files", type=int, default=2000, help="files checked with --values")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--large-files", type=int, default=8, help="files of [1024, 4, 4096] bf16 for --values")
    p.add_argument("--header-mb", type=int, default=100, help="size of the hostile headers (0: skip them)")
    p.add_argument("--dir", type=Path, help="where to keep the files (default: a temporary directory)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-process", dest="process", action="store_false",
                   help="skip the whole-process figures (the command line on each directory)")
    p.add_argument("--partial-layers", type=int, default=16,
                   help="layers of the model the partial recompute's cost is measured on (0: skip it)")
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
        print("tiny files, header mode")
        opened = timed(open_only(st), args.repeat)
        per_file("  open-only loop, .safetensors", len(st), opened)
        per_file("  check-free Python reader (open, read, json.loads)", len(st), timed(bare_safetensors(st),
                                                                                        args.repeat), opened)
        seconds = timed(gate([root / "vllm"]), args.repeat)
        per_file("  gate header-only, vllm-safetensors", len(st), seconds, opened)
        line("  gate header-only, vllm-safetensors", len(st), seconds, st_bytes)
        distinct = min(len(st), 3000)
        make_distinct(root / "vllm-distinct", root / "vllm", distinct)
        unique = sorted(str(p) for p in (root / "vllm-distinct").iterdir())
        per_file(f"  ... {distinct} of them, no two headers alike: open-only", distinct,
                 unique_opened := timed(open_only(unique), args.repeat))
        per_file(f"  ... {distinct} of them, no two headers alike: gate", distinct,
                 timed(gate([root / "vllm-distinct"]), args.repeat), unique_opened)
        line("  safetensors library: safe_open + shapes (reference)", len(st), timed(library, args.repeat),
             st_bytes)
        opened = timed(open_only(pt), args.repeat)
        per_file("  open-only loop, .pt", len(pt), opened)
        per_file("  check-free Python reader (zip directory, unpickle)", len(pt), timed(bare_torch(pt),
                                                                                         args.repeat), opened)
        seconds = timed(gate([root / "speculators"]), args.repeat)
        per_file("  gate header-only, speculators-pt", len(pt), seconds, opened)
        line("  gate header-only, speculators-pt", len(pt), seconds, pt_bytes)
        line("  torch.load(mmap, weights_only) of the .pt files (reference)", len(pt),
             timed(torch_load, args.repeat), pt_bytes)
        print("tiny files, --values")
        subset = st[: args.values_files]
        with tempfile.TemporaryDirectory(prefix="compat-gate-values-") as sub:
            for path in subset:  # hard links: the same files, in a directory of their own
                os.link(path, os.path.join(sub, os.path.basename(path)))
            run = gate([sub], values=True)
            seconds = timed(run, args.repeat)
            per_file("  gate --values, vllm-safetensors", len(subset), seconds)
            line("  gate --values, vllm-safetensors (file bytes)", len(subset), seconds, du(subset))
        pt_subset = pt[: args.values_files]
        run = gate(pt_subset, values=True)
        seconds = timed(run, args.repeat)
        per_file("  gate --values, speculators-pt", len(pt_subset), seconds)
        line("  gate --values, speculators-pt (file bytes)", len(pt_subset), seconds, du(pt_subset))
        if args.process:
            whole_process(root, args.hidden, args.repeat)
        if args.large_files:
            make_large(root / "large", args.large_files)
            large = sorted(str(p) for p in (root / "large").iterdir())
            seconds = timed(gate([root / "large"], hidden=4096, values=True), args.repeat)
            line("gate --values, large vllm-safetensors [1024, 4, 4096] bf16", len(large), seconds, du(large))
        if args.header_mb:
            headers(root, args.header_mb)
        if args.partial_layers:
            partial_cost(root, args.partial_layers, args.repeat)


_OPEN_ONLY = """
import os, sys
top = sys.argv[1]
for name in os.listdir(top):
    with open(os.path.join(top, name), "rb") as f:
        f.read(64)
"""


def _process_seconds(command: list[str], repeat: int) -> tuple[float, int]:
    """The median wall time of ``command`` (a child process, its start included) and its peak RSS in MB (the
    largest of its runs, from ``wait4``'s account of that child alone)."""
    times, peak = [], 0
    for _ in range(repeat):
        with tempfile.TemporaryFile() as errors:
            started = time.perf_counter()
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, cwd=ROOT)
            _, status, usage = os.wait4(child.pid, 0)
            times.append(time.perf_counter() - started)
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode not in (0, 1):
                errors.seek(0)
                raise SystemExit(f"{command}: exit {child.returncode}: {errors.read().decode()[-500:]}")
        peak = max(peak, usage.ru_maxrss // 1024)
    return statistics.median(times), peak


def whole_process(root: Path, hidden: int, repeat: int) -> None:
    """What a user waits for: the command line on each layout's directory (interpreter start, imports, every
    file, the report) beside a child process that only opens each file, and the command's peak RSS."""
    print("tiny files, whole process (python -m compat.gate DIR, the terminal report to a pipe)")
    for layout in ("vllm", "speculators"):
        top = root / layout
        count = len(os.listdir(top))
        opened, _ = _process_seconds([sys.executable, "-c", _OPEN_ONLY, str(top)], repeat)
        print(f"  {layout:12} {count} files: open-only loop {opened:6.2f} s")
        base = [sys.executable, "-m", "compat.gate", str(top), "--hidden-size", str(hidden), "--layers",
                str(LAYERS), "--no-progress"]
        for label, extra in (("header mode", []), ("--values", ["--values"])):
            seconds, peak = _process_seconds(base + extra, repeat)
            print(f"  {layout:12} {label:12} {seconds:6.2f} s  {seconds / opened:5.1f}x the open-only loop  "
                  f"(peak RSS {peak:,} MB)")


def partial_cost(root: Path, layers: int, repeat: int) -> None:
    """``--reference``'s two recomputes per token on a Llama of ``layers`` layers (hidden 256): the full model
    (every state) and the partial one every sample gets (the embeddings and layer 0: the shallowest state of
    speculators' usual first id)."""
    from compat.gate.recompute import HFReference
    from compat.models import build

    model = build("llama", root / f"llama-{layers}", hidden_size=256, num_layers=layers, force=True).path
    ids = torch.randint(3, 1000, (512,), generator=torch.Generator().manual_seed(0))
    full, part = HFReference(model), HFReference(model, layers=1)
    print(f"--reference recompute per token, Llama of {layers} layers (hidden 256), 512 tokens")
    costs = {}
    for label, ref in (("full model (the picked samples)", full), ("up to s_1 (every sample)", part)):
        ref.states(ids)
        costs[label] = timed(lambda ref=ref: ref.states(ids), repeat) / ids.numel()
        print(f"  {label:<40} {costs[label] * 1e6:8.1f} us/token")
    print(f"  partial / full: {costs['up to s_1 (every sample)'] / costs['full model (the picked samples)']:.3f}")


if __name__ == "__main__":
    main()
