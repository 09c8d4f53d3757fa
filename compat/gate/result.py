"""``GateResult``: the gate's findings and summary, rendered by ``compat.report`` like the audit's.

JSON schema ``compat.gate/1`` (``as_json``)::

    {"schema": "compat.gate/1", "generated_by": "compat X.Y.Z",
     "paths": [str], "source_root": str,
     "options": {"layout", "values", "override_data_config", "nonfinite", "reference", "reference_samples",
                 "reference_device", "layer_numbering",
                 "ignore", "strict", "follow_links"},
     "expected": {"hidden_size" | "dtype" | "layers" | "layer_ids" | "vocab_size": {"value", "source"} | null},
     "summary": {"files", "samples", "tokens", "bytes", "value_bytes", "seconds",
                 "layouts": {layout: files}, "failures_by_rule": {rule: n},
                 "skipped_samples": [location], "reused", "ok", "broken", "changed", "unknown", "error", "allowed",
                 "exit_code", "strict"},
     "consistency": null | {"directory (layout)": {"samples", "outliers",
                 "shared_prefix": {"groups", "samples", "note"}, "scale": {"samples", "note"}}},
     "reference": null | {"model", "numbering", "recomputed", "candidates",
                 "picked": [{"sample", "why"}],
                 "partial": {"samples", "of", "failed", "deepest_state", "layers", ["note"]},
                 "pairing": {"samples", "checked", "layer", "typical_lean", "strength", ["note"]},
                 "samples": [{"sample", "layers": [{"slot", "layer_id", "state", "max_rel", "rel", "min_cos",
                 "best_state", "best_rel"}]}]},
     "notes": [str],
     "findings": [Finding.as_dict()]}

A finding's ``probe`` is the rule name, ``symbol`` the file (``file#sample`` for list files),
``consumer_location`` the path relative to ``source_root`` (``path:sample``), ``place`` the same split
(``{"file", "line": null, "sample"}``: a file name may hold ':'), ``vllm_location`` null,
``evidence.expected`` / ``evidence.found`` the two sides of the check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from compat import __version__
from compat.findings import Finding
from compat.gate.expect import Expectations
from compat.gate.recompute import RANDOM
from compat.policy import FailOn, Verdict

SCHEMA = "compat.gate/1"


@dataclass(frozen=True)
class GateSummary:
    files: int = 0
    samples: int = 0
    tokens: int = 0
    bytes: int = 0
    """Size of the files checked."""
    value_bytes: int = 0
    """Tensor bytes read by --values (0 without it)."""
    seconds: float = 0.0
    layouts: tuple[tuple[str, int], ...] = ()
    skipped_samples: tuple[str, ...] = ()
    reused: int = 0
    """Files whose results were taken from ``--state``'s file, unchanged since they were checked, not read."""


@dataclass(frozen=True)
class GateResult(Verdict):
    findings: tuple[Finding, ...]
    summary: GateSummary
    expected: Expectations
    paths: tuple[str, ...]
    source_root: str
    options: dict[str, Any] = field(default_factory=dict)
    reference: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    strict: bool = False
    consistency: dict[str, Any] | None = None
    """Per dataset (``"directory (layout)"``), what the dataset comparison ran (``compat.gate.consistency``); None
    without --values."""

    tool = "compat.gate"

    @property
    def fail_on(self) -> FailOn:
        """The gate's ``--strict`` on the shared policy (``compat.policy``): unknown fails too. The gate makes no
        ``changed`` findings, so its two levels are the policy's ``broken`` and ``unknown``."""
        return FailOn.UNKNOWN if self.strict else FailOn.BROKEN

    def failures_by_rule(self) -> dict[str, int]:
        return dict(sorted(Counter(f.check for f in self.failing()).items()))

    def title(self) -> str:
        s = self.summary
        return f"{s.files} hidden-state files, {s.samples} samples under {self.source_root}"

    def facts(self) -> list[tuple[str, str]]:
        s = self.summary
        rate = f", {s.files / s.seconds:,.0f} files/s" if s.seconds > 0 else ""
        checked = f"{s.files} files, {s.samples} samples, {s.tokens:,} tokens, {_size(s.bytes)}"
        if s.value_bytes:
            checked += f" ({_size(s.value_bytes)} of tensor values read)"
        facts = [("checked", f"{checked} in {s.seconds:.2f} s{rate}"),
                 ("layouts", ", ".join(f"{name}: {n}" for name, n in s.layouts) or "-")]
        e = self.expected
        for label, value in (("hidden", e.hidden_size), ("dtype", e.dtype), ("layers", e.layers),
                             ("layer ids", e.layer_ids)):
            if value is not None:
                shown = list(value.value) if isinstance(value.value, tuple) else value.value
                facts.append((label, f"{shown} ({value.source})"))
        for dataset, c in (self.consistency or {}).items():
            facts.append(("compared", _compared(dataset, c)))
        if self.reference:
            ref = self.reference
            facts.append(("reference", f"{ref['model']}: {ref['numbering']}"))
            facts.append(("verified", _verified(ref)))
        failures = self.failures_by_rule()
        if failures:
            facts.append(("failures", ", ".join(f"{rule}: {n}" for rule, n in failures.items())))
        if s.skipped_samples:
            facts.append(("skipped", f"{len(s.skipped_samples)} samples (--nonfinite skip)"))
        facts += [("note", n) for n in self.notes]
        return facts

    def as_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "schema": SCHEMA,
            "generated_by": f"compat {__version__}",
            "paths": list(self.paths),
            "source_root": self.source_root,
            "options": self.options,
            "expected": self.expected.as_dict(),
            "summary": {"files": s.files, "samples": s.samples, "tokens": s.tokens, "bytes": s.bytes,
                        "value_bytes": s.value_bytes, "seconds": round(s.seconds, 4), "layouts": dict(s.layouts),
                        "failures_by_rule": self.failures_by_rule(), "skipped_samples": list(s.skipped_samples),
                        "reused": s.reused, **self.counts(), "exit_code": self.exit_code, "strict": self.strict},
            "reference": self.reference,
            "consistency": self.consistency,
            "notes": list(self.notes),
            "findings": [f.as_dict() for f in self.findings],
        }


def _compared(dataset: str, c: dict[str, Any]) -> str:
    """What the dataset comparison of one dataset's samples covered."""
    prefix, scale = c["shared_prefix"], c["scale"]
    shared = (f"{prefix['samples']} share first tokens with others ({prefix['groups']} groups)" if not prefix["note"]
              else f"shared first tokens {prefix['note']}")
    scaled = f"{scale['samples']} compared by scale" if not scale["note"] else f"scale {scale['note']}"
    return (f"{dataset}: {c['samples']} samples with the rest of the dataset: {shared}; {scaled}; "
            f"{c['outliers']} outliers")


def _verified(ref: dict[str, Any]) -> str:
    """How many samples the reference check covered, and how."""
    pairing = ref.get("pairing") or {}
    text = f"recomputed {ref.get('recomputed', 0)} of {ref.get('candidates', 0)} samples with HF transformers"
    outliers = sum(1 for p in ref.get("picked", ()) if p["why"] != RANDOM)
    if ref.get("picked"):
        text += f" ({outliers} outliers first, the rest at random)" if outliers else " (at random: no outlier)"
    partial = ref.get("partial")
    if partial:
        text += (f"; every sample's shallowest stored layer recomputed up to it: {partial['samples']} of "
                 f"{partial['of']} (layers run up to {partial['deepest_state']} of {partial['layers']}), "
                 f"{partial['failed']} failed")
        if partial.get("note"):
            text += f" ({partial['note']})"
    if pairing.get("layer"):
        text += (f"; token pairing checked on {pairing['checked']} of {pairing['samples']} (layer {pairing['layer']}, "
                 f"typical lean {pairing['typical_lean']:.3g})")
    elif pairing:
        text += f"; token pairing {pairing.get('note', 'not checked')}"
    return text


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
