"""The ``reference`` rule: stored layers agree with HF transformers' recomputation (``compat.gate.recompute``)."""

from __future__ import annotations

from collections.abc import Sequence

from compat.findings import Status
from compat.gate.recompute import ComparisonError, state_name
from compat.gate.rules.rule import Context, Phase, ReferenceSubject, Rule, RuleFinding


def _reference(c: ReferenceSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if isinstance(c, ComparisonError):
        return [RuleFinding(f"reference check could not run: {c.error_type}: {c.message}", status=Status.ERROR,
                            found=c.error_type, traceback=c.traceback)]
    tol, rows = c.tolerance, c.rows
    problems = []
    for row in rows:
        rel, cos, target, best = row["rel"], row["min_cos"], row["state"], row["best_state"]
        if rel > tol.max_rel or cos < tol.min_cos:
            msg = (f"{c.view.layers[row['slot']].name}: relative error {rel:.3g} (max {tol.max_rel:g}), min cosine "
                   f"{cos:.4f} (min {tol.min_cos:g}) against "
                   f"{state_name(target, c.n_layers) if target is not None else '-'}")
            if best is not None and best != target and row["best_rel"] <= tol.max_rel:
                msg += f"; it matches {state_name(best, c.n_layers)} (relative error {row['best_rel']:.3g})"
            problems.append(msg)
    if c.expected_states is None and not problems:
        order = [r["state"] for r in rows if isinstance(r["state"], int)]
        if order != sorted(order) or len(set(order)) != len(order):
            problems.append(f"stored layers match residual-stream states {order}: not in increasing depth")
    matched = ", ".join(str(r["state"]) for r in rows)
    if problems:
        hint = ""
        if c.expected_states is not None and all(
                r["best_state"] is not None and isinstance(r["state"], int)
                and r["best_state"] == r["state"] + (1 if c.numbering == "input" else -1) for r in rows):
            other = "output" if c.numbering == "input" else "input"
            hint = f" All layers are off by one: the file follows --layer-numbering {other}."
        return [RuleFinding(f"{len(problems)} of {len(rows)} layers differ from HF transformers: "
                            + "; ".join(problems) + hint,
                            "check the layer ids and numbering convention, the slicing, and the model weights",
                            expected=f"states {[r['state'] for r in rows]}", found=matched)]
    worst = max(r["rel"] for r in rows)
    return [RuleFinding(f"{len(rows)} layers match HF transformers (states {matched}; worst relative error "
                        f"{worst:.2g}, tolerance {tol.max_rel:g})", status=Status.OK)]


REFERENCE = Rule(
    "reference", "--reference: HF transformers on the same weights reproduces each layer within the dtype's "
                 "tolerance (relative L2 error and per-token cosine)",
    Phase.REFERENCE, _reference)
