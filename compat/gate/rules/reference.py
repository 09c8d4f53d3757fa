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
    tol, layers = c.tolerance, c.layers
    problems = []
    for m in layers:
        if m.rel > tol.max_rel or m.min_cos < tol.min_cos:
            msg = (f"{c.view.layers[m.slot].name}: relative error {m.rel:.3g} (max {tol.max_rel:g}), min cosine "
                   f"{m.min_cos:.4f} (min {tol.min_cos:g}) against "
                   f"{state_name(m.state, c.n_layers) if m.state is not None else '-'}")
            if m.best_state is not None and m.best_state != m.state and m.best_rel <= tol.max_rel:
                msg += f"; it matches {state_name(m.best_state, c.n_layers)} (relative error {m.best_rel:.3g})"
            problems.append(msg)
    if c.expected_states is None and not problems:
        order = [m.state for m in layers if isinstance(m.state, int)]
        if order != sorted(order) or len(set(order)) != len(order):
            problems.append(f"stored layers match residual-stream states {order}: not in increasing depth")
    matched = ", ".join(str(m.state) for m in layers)
    if problems:
        hint = ""
        if c.expected_states is not None and all(
                m.best_state is not None and isinstance(m.state, int)
                and m.best_state == m.state + (1 if c.numbering == "input" else -1) for m in layers):
            other = "output" if c.numbering == "input" else "input"
            hint = f" All layers are off by one: the file follows --layer-numbering {other}."
        return [RuleFinding(f"{len(problems)} of {len(layers)} layers differ from HF transformers: "
                            + "; ".join(problems) + hint,
                            "check the layer ids and numbering convention, the slicing, and the model weights",
                            expected=f"states {[m.state for m in layers]}", found=matched)]
    worst = max(m.rel for m in layers)
    return [RuleFinding(f"{len(layers)} layers match HF transformers (states {matched}; worst relative error "
                        f"{worst:.2g}, tolerance {tol.max_rel:g})", status=Status.OK)]


REFERENCE = Rule(
    "reference", "--reference: HF transformers on the same weights reproduces each layer within the dtype's "
                 "tolerance (relative L2 error and per-token cosine)",
    Phase.REFERENCE, _reference)
