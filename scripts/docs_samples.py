#!/usr/bin/env python3
"""Regenerate every sample output the README and docs/ show, so that none can drift from what the tools print.

    scripts/docs_samples.py                 run every sample and rewrite its block in the docs
    scripts/docs_samples.py audit matrix    only these (a sample needing another's files runs that one first)
    scripts/docs_samples.py --check [...]   run them and fail where a block differs (digits aside)
    scripts/docs_samples.py --list          the samples, what each needs, and where each is shown

A sample block in a Markdown file is the fenced block right after a marker line ``<!-- sample: NAME -->``; the
script writes it as ``$ COMMAND`` followed by what the command printed (standard output and standard error, in
order), cut to the lines the sample keeps (``...`` marks a cut). Commands run in one scratch directory (kept with
``--workdir DIR``), in this order, with this Python, ``COLUMNS=110`` and no colour. ``--check`` compares with
every digit masked: timings, sizes and errors of random weights change from run to run; words, lines and their
order may not. Needs: ``network`` (releases from the package index, cached after the first run) and ``torch``, ``vllm``
(an installed vLLM that runs an engine: ``./scripts/test`` sets up ``.venv`` with one).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- sample: ([a-z0-9-]+) -->$")
WIDTH = 110


@dataclass(frozen=True)
class Sample:
    name: str
    command: str
    """As shown, after ``$``; ``python`` is this interpreter when it runs."""
    needs: tuple[str, ...] = ()
    after: str | None = None
    """A sample whose files this one reads (run first when not asked for)."""
    head: int | None = None
    tail: int = 0
    keep: str | None = None
    """A regular expression: keep only the lines it matches (after head/tail would cut)."""
    exits: tuple[int, ...] = (0, 1)
    setup: str | None = None
    """A command run first (not shown) that makes the files the sample reads."""


SAMPLES = [
    Sample("audit", "python -m compat.audit --vllm 0.32.0 --no-reports", ("network",)),
    Sample("audit-details", "python -m compat.audit --vllm 0.17.0 --no-reports --details", ("network",),
           head=40),
    Sample("upgrade", "python -m compat.audit --baseline 0.11.0 --vllm 0.17.0 --no-reports", ("network",),
           head=24),
    Sample("fix", "python -m compat.fix --vllm '>=0.30,<0.34' --apply patched", ("network",), head=8, tail=2),
    Sample("fix-full", "python -m compat.fix --vllm '>=0.30,<0.34' --apply patched", ("network",)),
    Sample("extract", "python -m compat.extract --patched patched --check --dtype float32 --out run",
           ("network", "vllm"), after="fix", keep=r"^(compat\.extract|  gate|  check)"),
    Sample("extract-brief", "python -m compat.extract --patched patched --check --dtype float32 --out run",
           ("network", "vllm"), after="fix",
           keep=r"^(compat\.extract|  check (realistic|split|preempt|relabel|nonfinite) )"),
    Sample("gate", "python -m compat.gate run/main --values", ("vllm",), after="extract"),
    Sample("gate-seed", "python -m compat.gate seed --model models/llama", ("torch",),
           setup="python -m tests.seed_dataset ."),
    Sample("matrix", "python -m compat.matrix --vllm '>=0.30,<0.34'", ("network",), head=18),
    Sample("matrix-full", "python -m compat.matrix --vllm '>=0.30,<0.34'", ("network",)),
    Sample("bisect", "python -m compat.bisect --good 0.11.0 --bad 0.18.0 --touchpoint "
           "'call|vllm.v1.request.Request|speculators/data_generation/vllm_hidden_states_generator.py:234'",
           ("network",)),
]
BY_NAME = {s.name: s for s in SAMPLES}


def _run(command: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    argv[0] = sys.executable
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)


def shown(sample: Sample, workdir: Path, ran: dict[str, list[str]]) -> list[str]:
    """Run the sample's command (once per command in a run: ``ran`` keeps each one's output) and return the block's
    lines: the command, then its output as the sample keeps it."""
    if sample.command not in ran:
        ran[sample.command] = _output(sample, workdir)
    lines = ran[sample.command]
    if sample.keep:
        lines = [line for line in lines if re.search(sample.keep, line)]
    if sample.head is not None and len(lines) > sample.head + sample.tail:
        lines = lines[:sample.head] + ["..."] + (lines[-sample.tail:] if sample.tail else [])
    return [f"$ {sample.command}", *lines]


def _output(sample: Sample, workdir: Path) -> list[str]:
    if sample.setup:
        made = _run(sample.setup, workdir)
        if made.returncode:
            raise SystemExit(f"sample {sample.name}: setup `{sample.setup}` exited {made.returncode}:\n"
                             + "\n".join(made.stdout.splitlines()[-30:]))
    done = _run(sample.command, workdir)
    lines = [line.rstrip() for line in done.stdout.splitlines()]
    if done.returncode not in sample.exits:
        tail = "\n".join(lines[-30:])
        raise SystemExit(f"sample {sample.name}: `{sample.command}` exited {done.returncode}:\n{tail}")
    home = str(Path.home())
    cache = os.environ.get("COMPAT_CACHE_DIR")
    if cache:  # shown as where it is by default: the samples do not depend on where a run keeps its cache
        lines = [line.replace(cache.rstrip(os.sep), "~/.cache/compat") for line in lines]
    return [line.replace(str(workdir) + os.sep, "").replace(home + os.sep, "~" + os.sep) for line in lines]


def blocks(text: str) -> dict[str, tuple[int, int]]:
    """Each sample marker's block in ``text``: name -> (first line inside the fence, line of the closing fence)."""
    lines = text.split("\n")
    found: dict[str, tuple[int, int]] = {}
    for i, line in enumerate(lines):
        match = MARKER.match(line)
        if not match:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise SystemExit(f"sample marker {match.group(1)!r} at line {i + 1} is not followed by a fenced block")
        end = next((j for j in range(i + 2, len(lines)) if lines[j] == "```"), None)
        if end is None:
            raise SystemExit(f"sample {match.group(1)!r} at line {i + 1}: its block is not closed")
        found[match.group(1)] = (i + 2, end)
    return found


def where_shown() -> dict[str, list[Path]]:
    shown_in: dict[str, list[Path]] = {}
    for path in DOCS:
        for name in blocks(path.read_text(encoding="utf-8")):
            shown_in.setdefault(name, []).append(path)
    return shown_in


def masked(lines: list[str]) -> list[str]:
    """Numbers (digits with the commas and points between them, and an exponent: a difference is ``0`` on one
    machine and ``2.07e-07`` on another), and the units of sizes (a cache's size is KiB or GiB by what it holds),
    masked."""
    return [re.sub(r"\b[KMGT]iB\b", "XiB", re.sub(r"\d(?:[\d,.]*\d)?(?:e[-+]?\d+)?", "N", line)) for line in lines]


def write_block(path: Path, name: str, new: list[str]) -> None:
    text = path.read_text(encoding="utf-8")
    start, end = blocks(text)[name]
    lines = text.split("\n")
    lines[start:end] = new
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)


def current_block(path: Path, name: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    start, end = blocks(text)[name]
    return text.split("\n")[start:end]


def run_sample(name: str, workdir: Path) -> list[str]:
    """Sample ``name``'s block as its command prints it now, run in ``workdir`` (which holds what it reads)."""
    return shown(BY_NAME[name], workdir, {})


def differences(name: str, lines: list[str], shown_in: dict[str, list[Path]] | None = None) -> list[str]:
    """Each block showing sample ``name`` that differs from ``lines`` (digits masked), as a short diff."""
    found = []
    for path in (shown_in or where_shown()).get(name, []):
        old = masked(current_block(path, name))
        if old != masked(lines):
            diff = list(difflib.unified_diff(old, masked(lines), "shown", "printed now", lineterm="", n=0))
            found.append(f"{path.relative_to(ROOT)}: sample {name}\n    "
                         + "\n    ".join(diff[2:14] + (["..."] if len(diff) > 14 else [])))
    return found


def order(names: list[str]) -> list[Sample]:
    """The samples asked for, each after the sample whose files it reads."""
    chosen: list[Sample] = []

    def add(name: str) -> None:
        sample = BY_NAME[name]
        if sample.after:
            add(sample.after)
        if sample not in chosen:
            chosen.append(sample)

    for name in names:
        add(name)
    return chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="samples to run (default: all)")
    p.add_argument("--check", action="store_true", help="fail where a block differs from today's output")
    p.add_argument("--workdir", type=Path, help="run in this directory and keep it (default: a temporary one)")
    p.add_argument("--list", action="store_true", help="list the samples and where each is shown")
    args = p.parse_args(argv)
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        print(f"docs_samples: no sample named {', '.join(unknown)} (--list names them)", file=sys.stderr)
        return 2
    shown_in = where_shown()
    if args.list:
        for s in SAMPLES:
            places = ", ".join(str(p.relative_to(ROOT)) for p in shown_in.get(s.name, [])) or "not shown"
            print(f"{s.name:14} needs {'+'.join(s.needs) or 'nothing':14} {places}\n{'':14} $ {s.command}")
        return 0
    with tempfile.TemporaryDirectory(prefix="compat-docs-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        differ: list[str] = []
        ran: dict[str, list[str]] = {}
        for sample in order(args.names or list(BY_NAME)):
            print(f"docs_samples: {sample.name}: $ {sample.command}", file=sys.stderr, flush=True)
            new = shown(sample, workdir, ran)
            if args.check:
                differ += differences(sample.name, new, shown_in)
            else:
                for path in shown_in.get(sample.name, []):
                    write_block(path, sample.name, new)
    if differ:
        print("docs_samples: these blocks differ from what the tools print now (scripts/docs_samples.py "
              "rewrites them):\n  " + "\n  ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
