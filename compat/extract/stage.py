"""The consumer as the extraction run imports it: patched by ``compat.fix`` (or, for the baseline, with only
the platform fixer, so that it runs on vLLM's CPU builds at all), written to a directory of its own.

When the consumer's top package fails to import in this environment for a reason outside the generator
(speculators 0.3.0's ``__init__`` builds model-config registries that pydantic rejects under transformers 5),
the staged copy's top ``__init__`` is replaced by an empty one and the report says so, with the error: the
generator's own modules still run as released (and patched).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compat.errors import CompatError

if TYPE_CHECKING:
    from compat.fix.pipeline import Fix

PLATFORM_ONLY = "platform"


@dataclass(frozen=True)
class Staged:
    root: Path
    fix: Fix
    notes: tuple[str, ...]


def _import_error(root: Path, module: str) -> str | None:
    """The last line of what importing ``module`` from ``root`` raises in a fresh interpreter (None: it imports)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in proc.stderr.strip().splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*:", line)]
    return (raised or lines or [f"exit status {proc.returncode}"])[-1]


def stage(consumer: str, dest: Path, generator_module: str, vllm: str | None = None,
          without: tuple[str, ...] = (), unpatched: bool = False) -> Staged:
    """Patch ``consumer`` for ``vllm`` (a range or build; default: every release from its pin on, so that one
    patch serves every engine) and write it to ``dest``."""
    # Here, not at the top: an engine's own environment runs an earlier-made patched copy without LibCST.
    from compat.fix.pipeline import FixOptions, plan_fix, write_copy
    from compat.fixers import all_fixers

    if unpatched:
        without = tuple(f.name for f in all_fixers() if f.name != PLATFORM_ONLY)
    fix = plan_fix(FixOptions(consumer=consumer, vllm=vllm, without=without))
    root = write_copy(fix, dest)
    notes = [f"{'baseline: only the platform fixer' if unpatched else 'patched'} for {fix.ctx.versions}"
             + (f" (left out: {', '.join(without)})" if without and not unpatched else "")]
    return Staged(root, fix, tuple(notes + prepare(root, generator_module)))


def copy_patched(patched: Path, dest: Path, generator_module: str) -> tuple[Path, list[str]]:
    """A patched copy made earlier (``compat.fix --apply``), copied so that its files stay as they are."""
    if not Path(patched).is_dir():
        raise CompatError(f"--patched {patched}: not a directory")
    shutil.copytree(patched, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest, [f"patched copy {patched}"] + prepare(dest, generator_module)


def prepare(root: Path, generator_module: str) -> list[str]:
    """Make ``generator_module`` importable from ``root``; the notes say what had to change."""
    notes = []
    top = generator_module.split(".")[0]
    error = _import_error(root, top)
    if error is not None:
        init = root / top / "__init__.py"
        init.write_text(f'"""{top}\'s own __init__ is left out of this extraction run: it raised {error!r}."""\n')
        notes.append(f"{top}/__init__.py raised {error} in this environment; the run imports {generator_module} "
                     f"without it (the generator's own modules are unchanged)")
    error = _import_error(root, generator_module)
    if error is not None:
        raise CompatError(f"the staged consumer cannot import {generator_module}: {error}")
    return notes


def child_env(staged: Path, tp: int) -> dict[str, str]:
    """The environment of a process that runs the staged consumer on the installed vLLM."""
    root = str(Path(__file__).resolve().parents[2])
    # The staged consumer first, then this project, then whatever the caller's path already holds.
    path = [str(staged), root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if tp > 1:
        cores = os.cpu_count() or tp
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i % cores) for i in range(tp)))
    return env
