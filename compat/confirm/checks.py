"""One check of the runtime confirmation in a child process (``compat.confirm.engine``): what it observed or how it
observed nothing, and the same check tried in one dtype after another until one observes something."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from compat import child

DEFAULT_TIMEOUT_S = 300.0
ENTRY = "compat.confirm.engine"


def _env(tp: int) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if tp > 1:
        # The default CPU thread binding wants one NUMA node per worker; bind one core each instead.
        cores = os.cpu_count() or tp
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i % cores) for i in range(tp)))
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_child(spec: dict, timeout: float = DEFAULT_TIMEOUT_S, entry: str = ENTRY) -> dict:
    """Run one check in a child process (``python -m entry SPEC OUT PROGRESS``); never raises.

    The result is the child's observations, or ``error`` (the check raised, with its traceback), or
    ``unconfirmed`` (the child died by a signal or ran past ``timeout``: nothing was observed, so nothing can
    be confirmed), each with the last step the child reached and the tail of its log.
    """
    with tempfile.TemporaryDirectory(prefix="compat-confirm-") as tmp:
        spec_path, out_path, progress = Path(tmp, "spec.json"), Path(tmp, "out.json"), Path(tmp, "progress")
        spec_path.write_text(json.dumps(spec))
        ended = child.run([sys.executable, "-m", entry, str(spec_path), str(out_path), str(progress)],
                          env=_env(spec.get("tp", 1)), timeout=timeout, log=Path(tmp, "child.log"))
        steps = progress.read_text().splitlines() if progress.exists() else []
        where = {"last_step": steps[-1] if steps else None, "steps": steps, "log": ended.tail()}
        at = f" during step '{steps[-1]}'" if steps else " before its first step"
        if ended.timed_out:
            return {"unconfirmed": f"the {spec['check']} check ran past {timeout:.0f} s{at}", **where}
        if out_path.exists():
            result = json.loads(out_path.read_text())
            if "error" in result or "unsupported" in result:
                result["log"] = where["log"]
            return result
        if ended.signal is not None:
            return {"unconfirmed": f"the {spec['check']} check {ended.describe()}{at}", "signal": ended.signal,
                    **where}
        return {"error": f"the {spec['check']} check exited with status {ended.returncode} without a result{at}",
                "traceback": where["log"], **where}


FAILURES = ("unconfirmed", "unsupported", "error")
"""How a check can observe nothing: killed by a signal or a timeout, refused by the engine (it cannot run
the model here: vLLM's NotImplementedError while starting), or raised."""


def failed(result: dict) -> bool:
    """The check observed nothing: it raised, the engine refused, it died by a signal or ran past its timeout."""
    return any(key in result for key in FAILURES)


def outcome(result: dict) -> str:
    """What became of a check: ``ran``, or the message of how it observed nothing."""
    return "ran" if not failed(result) else next(result[key] for key in FAILURES if key in result)


def check_in_dtypes(spec: dict, dtypes: tuple[str, ...], timeout: float = DEFAULT_TIMEOUT_S,
                    entry: str = ENTRY, run_child: Callable[[dict, float, str], dict] = run_child) -> dict:
    """Run a check in the first dtype the build runs; the next is tried only when one observed nothing.

    The result records the dtype it ran in and every attempt, so that the report says which was used and
    why. When every attempt failed, the last failure stands, its message naming the earlier ones; it
    stays ``unconfirmed`` when any attempt died by a signal or a timeout (the machine, not the check,
    stopped it), and is ``unsupported`` when the engine refused the model in every dtype. ``run_child`` runs one
    attempt (a test passes a stand-in).
    """
    attempts: list[tuple[str, dict]] = []
    for dtype in dtypes:
        result = run_child({**spec, "dtype": dtype}, timeout, entry)
        attempts.append((dtype, result))
        if not failed(result):
            break
    dtype, result = attempts[-1]
    result = {**result, "dtype": dtype, "attempts": [f"{d}: {outcome(r)}" for d, r in attempts]}
    if failed(result) and len(attempts) > 1:
        earlier = "; ".join(f"in {d}: {outcome(r)}" for d, r in attempts[:-1])
        if any("unconfirmed" in r for _, r in attempts):
            key = "unconfirmed"
        else:
            key = "unsupported" if all("unsupported" in r for _, r in attempts) else "error"
        last = next(result.pop(k) for k in FAILURES if k in result)
        result[key] = f"{last} (in {dtype}; earlier {earlier})"
    return result
