"""What the tools report, written to one directory per run, so that a reshaping of the code can be shown to
change none of it: ``python scripts/golden.py DIR`` then ``diff -r BEFORE AFTER``.

It writes, for the corpus of ``benchmarks/consumers.py`` (held-out consumers included): each consumer's scan
(every touchpoint, model patch, step loop and class, as JSON) and its audit at the vLLM it pins and at the later
builds (JSON with every finding, ok ones too); the default audit in every report format, in upgrade mode, and
against the installed vLLM read at run time; the matrix and the fix over a bounded range; and the gate over a
dataset with a fault of every phase (headers, then ``--values``) and over the seed's dataset. Gate datasets are
built once under ``$GOLDEN_DATA`` (default /tmp/compat-golden-data), so both runs read the same bytes.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from consumers import CORPUS, HELD_OUT  # noqa: E402

PY = sys.executable
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "NO_COLOR": "1", "COLUMNS": "120"}
DATA = Path(os.environ.get("GOLDEN_DATA", "/tmp/compat-golden-data"))


def run(out: Path, name: str, *args: str) -> None:
    done = subprocess.run([PY, *args], cwd=ROOT, env=ENV, capture_output=True, text=True)
    (out / f"{name}.out").write_text(done.stdout)
    (out / f"{name}.err").write_text(f"exit {done.returncode}\n{done.stderr}")


def plain(value):
    """A dataclass tree as JSON-able data, enums by value, so renamed Python types do not show."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def scans(out: Path) -> None:
    from compat.consumer.scan import scan_tree
    from compat.consumer.source import open_consumer

    for name, release, _pinned, _later in CORPUS + HELD_OUT:
        scan = scan_tree(open_consumer(f"{name}=={release}"))
        (out / f"scan-{name}-{release}.json").write_text(json.dumps(plain(scan), indent=1, sort_keys=True))


def datasets() -> None:
    if (DATA / "done").exists():
        return
    from tests.seed_dataset import main as seed
    from tests.test_gate_parallel import mixed

    mixed(DATA / "mixed")
    seed([str(DATA / "seed")])
    (DATA / "done").write_text("")


VARYING = [
    (re.compile(r"0x[0-9a-f]{6,}"), "0x…"),  # an object's address in a printed default value
    (re.compile(r'"seconds": [0-9.]+'), '"seconds": …'),  # how long the gate took
    (re.compile(r"^ - leaked .*\n", re.M), ""),  # what triton's bindings leak at exit (stderr), in no fixed order
    (re.compile(r"^nanobind: leaked .*\n", re.M), ""),
]
"""What differs from one run of the same code to the next, masked before comparing."""


def compare(before: Path, after: Path) -> int:
    """Print every file whose masked text differs (or that only one run has); 0 when none does."""
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differing = 0
    for name in names:
        texts = []
        for side in (before, after):
            text = (side / name).read_text() if (side / name).exists() else "<missing>"
            for pattern, mask in VARYING:
                text = pattern.sub(mask, text)
            texts.append(text)
        if texts[0] != texts[1]:
            differing += 1
            diff = difflib.unified_diff(texts[0].splitlines(), texts[1].splitlines(), str(before / name),
                                        str(after / name), lineterm="", n=1)
            print("\n".join(list(diff)[:40]))
    print(f"{len(names)} files compared, {differing} differ")
    return 1 if differing else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"]:
        return compare(Path(argv[1]), Path(argv[2]))
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    datasets()
    jobs = []
    for name, release, pinned, later in CORPUS + HELD_OUT:
        for build in (pinned, *later):
            jobs.append((f"audit-{name}-{release}-at-{build}", "-m", "compat.audit", "--consumer",
                         f"{name}=={release}", "--vllm", build, "--written-for", pinned, "--format", "json",
                         "--show-ok", "--no-reports", "--confirm", "never"))
    for fmt in ("json", "markdown", "terminal", "junit", "github"):
        jobs.append((f"default-0.11.0-{fmt}", "-m", "compat.audit", "--vllm", "0.11.0", "--format", fmt,
                     "--no-reports", "--confirm", "never", "--color", "never"))
    jobs += [
        ("default-static-installed", "-m", "compat.audit", "--format", "json", "--show-ok", "--no-reports",
         "--confirm", "never"),
        ("default-runtime-installed", "-m", "compat.audit", "--vllm", "installed", "--format", "json",
         "--show-ok", "--no-reports", "--confirm", "never"),
        ("upgrade-0.11.0-to-0.20.0", "-m", "compat.audit", "--vllm", "0.20.0", "--baseline", "0.11.0",
         "--format", "json", "--no-reports", "--confirm", "never"),
        ("matrix", "-m", "compat.matrix", "--vllm", ">=0.30,<0.34", "--format", "json"),
        ("fix", "-m", "compat.fix", "--vllm", ">=0.30,<0.34"),
        ("gate-mixed", "-m", "compat.gate", str(DATA / "mixed"), "--format", "json", "--show-ok"),
        ("gate-mixed-values", "-m", "compat.gate", str(DATA / "mixed"), "--values", "--format", "json",
         "--show-ok"),
        ("gate-seed", "-m", "compat.gate", str(DATA / "seed" / "seed"), "--values", "--format", "json",
         "--show-ok"),
    ]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda job: run(out, job[0], *job[1:]), jobs))
    scans(out)
    print(f"{len(jobs)} runs and {len(CORPUS + HELD_OUT)} scans written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
