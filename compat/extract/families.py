"""``compat.extract --arch all``: what each decoder family gave through the patched consumer, one line each.

A family's outcome is read from its run's report, in this order: the generator refused it (at start: the
consumer's own refusal or the shim's, naming the class; or at a call: non-finite states, naming the sample and
layer); vLLM's own engine computes it differently from HF (its prompt log-probs beyond the measured float32
spread: no capture of its states can equal HF's, and the size is the finding); the states were right (the checks
passed); else the states were wrong while vLLM's own computation agrees: the capture is wrong, and only that fails.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

SHIM_FILE = "_vllm_compat.py"
REFUSAL = "CaptureRefused"
"""The shim's refusal to capture a model (``fixers/capture.py``)."""
NON_FINITE = "NonFiniteStates"
"""The shim's refusal of a call whose states hold NaN or infinity (``fixers/steps.py``)."""


class Outcome(StrEnum):
    PASS = "pass"
    """Every sample equals HF float32 within the check's bound."""
    REFUSED = "refused"
    """The generator raised before returning anything wrong: at start, or at a call (with why)."""
    VLLM_DIFFERS = "vllm-differs"
    """vLLM's own engine computes the family differently from HF: a finding about the build, with its size."""
    FAIL = "fail"
    """Wrong states from an engine that computes the family right: the capture is wrong."""


@dataclass(frozen=True)
class FamilyOutcome:
    family: str
    architecture: str
    outcome: Outcome
    message: str
    seconds: float

    @property
    def failed(self) -> bool:
        return self.outcome == Outcome.FAIL

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": str(self.outcome)}


def outcome(family: str, report: dict[str, Any]) -> FamilyOutcome:
    arch, seconds = report.get("architecture", "?"), report.get("seconds", 0.0)
    crash = report.get("crash")
    if crash is not None:
        run = report.get("run", {})
        if "start_error" in run.get("engines", {}).get("main", {}) or "error" in run:
            # Nothing was returned: a refusal, unless the shim's own code broke (anything but its refusal there).
            frames = [line for line in crash.get("traceback", "").splitlines() if line.strip().startswith("File ")]
            broke = bool(frames) and SHIM_FILE in frames[-1] and REFUSAL not in crash["error"]
            return FamilyOutcome(family, arch, Outcome.FAIL if broke else Outcome.REFUSED,
                                 f"at start: {crash['error']}", seconds)
        if NON_FINITE in crash["error"]:
            return FamilyOutcome(family, arch, Outcome.REFUSED, f"at a call: {crash['error']}", seconds)
        return FamilyOutcome(family, arch, Outcome.FAIL, f"a call raised: {crash['error']}", seconds)
    own = report.get("own")
    checks = report.get("checks", [])
    if report.get("verdict") == "pass":
        said = "; ".join(c["message"] for c in checks if c["state"] == "pass") or "the gate's HF reference passed"
        return FamilyOutcome(family, arch, Outcome.PASS, said, seconds)
    wrong = "; ".join(f"{c['name']}: {c['message']}" for c in checks if c["state"] != "pass" and c["state"] !=
                      "not run") or "; ".join(f["message"][:160] for f in report.get("gate_failures", [])[:2])
    if own is not None and "error" not in own and not own["agrees"]:
        return FamilyOutcome(family, arch, Outcome.VLLM_DIFFERS, f"{own['message']}; the captured states: {wrong}",
                             seconds)
    why = own["message"] if own is not None and "error" not in own else \
        f"vLLM's own computation not compared: {own['error']}" if own is not None else ""
    return FamilyOutcome(family, arch, Outcome.FAIL, f"{wrong}; {why}".strip("; "), seconds)


def render(rows: list[FamilyOutcome], header: bool = True) -> str:
    lines = [f"  {'family':12} {'architecture':24} {'outcome':13} what"] if header else []
    for r in rows:
        lines.append(f"  {r.family:12} {r.architecture:24} {str(r.outcome):13} {r.message}")
    return "\n".join(lines)
