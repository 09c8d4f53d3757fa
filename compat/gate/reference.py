"""``--reference MODEL_DIR``: recompute a few samples with HF transformers and compare every stored layer.

Layer numbering, stated because the two pipelines differ by one:

- speculators (``layer_ids=k``, layout ``speculators-pt``): the OUTPUT of decoder layer ``k``;
- vLLM (``eagle_aux_hidden_state_layer_ids=k``, layout ``vllm-safetensors``): the state ENTERING layer ``k``.

The reference runs the model in float32 with hooks on the decoder layers and indexes the residual stream
as states ``s_0`` (embeddings, entering layer 0) .. ``s_n`` (output of the last layer, before the final
norm): output numbering maps ``k`` to ``s_{k+1}``, input numbering to ``s_k``. HF's ``hidden_states[j]`` is
``s_j`` for ``j < n``; its last entry is after the final norm (EAGLE-1/2's ``hidden_state``), kept as the
extra state ``final_norm``. Each stored layer is compared with its state (relative L2 error over the
sample, smallest per-token cosine) and with every other state, so a mismatch says which state it does match.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat.errors import CompatError
from compat.findings import Status
from compat.gate.expect import Expectations
from compat.gate.read import Layout, SampleView
from compat.gate.read.tensor_data import open_sample
from compat.gate.rules import Verdict


@dataclass(frozen=True)
class Tolerance:
    max_rel: float
    min_cos: float


# Measured on this project's tiny models, vLLM CPU extraction vs a float32 HF forward on the same weights:
# Llama float32 agrees to 3e-7 (cosine 1.0); bfloat16 to 7e-3 relative (cosine >= 0.99996). DeepSeek-V3
# (MLA + MoE) differs by 2-3% relative even in float32, with single tokens down to cosine 0.97 (RUNTIME.md:
# cause not found), so MLA/MoE model types get a looser bound. A wrong layer is off by tens of percent
# (adjacent layers of the tiny models have cosine 0.5-0.8).
TOLERANCES = {"float32": Tolerance(1e-3, 0.9999), "float64": Tolerance(1e-3, 0.9999),
              "float16": Tolerance(1e-2, 0.9995), "bfloat16": Tolerance(3e-2, 0.999)}
LOOSE_MODEL_TYPES = {"deepseek_v2": Tolerance(8e-2, 0.95), "deepseek_v3": Tolerance(8e-2, 0.95),
                     "kimi_k2": Tolerance(8e-2, 0.95)}
NUMBERINGS = ("auto", "output", "input")


def tolerance(dtype: str, model_type: str | None, max_rel: float | None, min_cos: float | None) -> Tolerance:
    base = TOLERANCES.get(dtype, TOLERANCES["bfloat16"])
    loose = LOOSE_MODEL_TYPES.get(model_type or "")
    if loose is not None:
        base = Tolerance(max(base.max_rel, loose.max_rel), min(base.min_cos, loose.min_cos))
    return Tolerance(max_rel if max_rel is not None else base.max_rel,
                     min_cos if min_cos is not None else base.min_cos)


def state_name(j: int | str, n_layers: int) -> str:
    if j == "final_norm":
        return "after the final norm (HF hidden_states[-1])"
    if j == 0:
        return "s_0: embeddings, entering layer 0"
    if j == n_layers:
        return f"s_{j}: output of layer {j - 1} (the last)"
    return f"s_{j}: output of layer {j - 1} = entering layer {j}"


class HFReference:
    """A float32 HF model whose forward returns every residual-stream state (see module docstring)."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        except Exception as exc:
            raise CompatError(f"--reference {model_dir}: transformers cannot load it "
                              f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from exc
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        self.model.eval()
        self.layers = self.model.get_decoder().layers
        self._outputs: list = []
        for layer in self.layers:
            layer.register_forward_hook(self._hook)

    def _hook(self, _module, _inputs, output) -> None:
        self._outputs.append(output[0] if isinstance(output, tuple) else output)

    def states(self, token_ids) -> dict[int | str, Any]:
        import torch

        self._outputs = []
        with torch.no_grad():
            out = self.model(token_ids.reshape(1, -1).long(), output_hidden_states=True)
        states: dict[int | str, Any] = {0: out.hidden_states[0][0]}
        for k, h in enumerate(self._outputs):
            states[k + 1] = h.reshape(-1, h.shape[-1])
        states["final_norm"] = out.hidden_states[-1][0]
        return states


def _compare(stored, ref) -> tuple[float, float]:
    import torch

    x, r = stored.float(), ref.float()
    rel = float((x - r).norm() / r.norm().clamp_min(1e-12))
    norms = x.norm(dim=-1) * r.norm(dim=-1)
    cos = (x * r).sum(-1) / norms.clamp_min(1e-30)
    cos = torch.where(norms > 1e-30, cos, torch.ones_like(cos))  # two zero rows agree
    return rel, float(cos.min())


def _expected_states(view: SampleView, exp: Expectations, numbering: str) -> list[int] | None:
    if exp.layer_ids is None or len(exp.layer_ids.value) != len(view.layers) or numbering == "infer":
        return None
    ids = list(exp.layer_ids.value)
    if view.layout is Layout.VLLM_SAFETENSORS:
        ids.sort()  # vLLM stores aux layers in ascending id order
    return [k + 1 if numbering == "output" else k for k in ids]


def resolve_numbering(requested: str, layout: Layout) -> str:
    if requested != "auto":
        return requested
    return {Layout.SPECULATORS_PT: "output", Layout.VLLM_SAFETENSORS: "input"}.get(layout, "infer")


_NUMBERING_TEXT = {"output": "layer id k = output of decoder layer k (speculators' layer_ids)",
                   "input": "layer id k = state entering decoder layer k (vLLM's eagle_aux_hidden_state_layer_ids)",
                   "infer": "no layer ids: each stored layer is matched to the closest residual-stream state"}


def _pick(candidates: list[SampleView], k: int) -> list[SampleView]:
    if k <= 0 or not candidates:
        return []
    if len(candidates) <= k:
        return candidates
    step = (len(candidates) - 1) / (k - 1) if k > 1 else 0
    return [candidates[round(i * step)] for i in range(k)]


def run_reference(options: Any, exp: Expectations, candidates: list[SampleView], verdicts: dict) -> dict:
    """Compare up to ``options.reference_samples`` sound samples with HF; adds verdicts, returns the report."""
    ref = HFReference(options.reference)
    n_layers = len(ref.layers)
    model_type = getattr(ref.model.config, "model_type", None)
    report: dict[str, Any] = {"model": str(options.reference), "numbering": "", "samples": []}
    numberings = set()
    for view in _pick(candidates, options.reference_samples):
        numbering = resolve_numbering(options.layer_numbering, view.layout)
        if exp.layer_ids is None or len(exp.layer_ids.value) != len(view.layers):
            numbering = "infer"  # no ids to number: say which states the layers are, and check their order
        numberings.add(_NUMBERING_TEXT[numbering])
        key = (view.file, view.index)
        try:
            entry, verdict = _check_sample(ref, view, exp, numbering, n_layers, model_type, options)
        except Exception as exc:  # noqa: BLE001 - one sample failing to run is a finding, the others still run
            verdicts.setdefault(key, []).append((Verdict(
                "reference", f"reference check could not run: {type(exc).__name__}: {exc}", status=Status.ERROR,
                found=type(exc).__name__), traceback.format_exc()))
            continue
        report["samples"].append(entry)
        verdicts.setdefault(key, []).append((verdict, None))
    report["numbering"] = "; ".join(sorted(numberings)) or "no sample was compared"
    return report


def _check_sample(ref: HFReference, view: SampleView, exp: Expectations, numbering: str, n_layers: int,
                  model_type: str | None, options: Any) -> tuple[dict, Verdict]:
    with open_sample(view) as st:
        ids = st.token_ids()
        stored = [st.layer(i) for i in range(len(view.layers))]
    states = ref.states(ids)
    tol = tolerance(view.layers[0].dtype, model_type, options.max_rel, options.min_cos)
    wanted = _expected_states(view, exp, numbering)
    ids_used = sorted(exp.layer_ids.value) if exp.layer_ids and view.layout is Layout.VLLM_SAFETENSORS else (
        list(exp.layer_ids.value) if exp.layer_ids else None)
    rows, problems = [], []
    for slot, x in enumerate(stored):
        scores = {j: _compare(x, s) for j, s in states.items() if s.shape == x.shape}
        best = min(scores, key=lambda j: scores[j][0]) if scores else None
        target = wanted[slot] if wanted is not None else best
        rel, cos = scores.get(target, (float("inf"), -1.0))
        row = {"slot": slot, "layer_id": ids_used[slot] if ids_used and wanted is not None else None,
               "state": target, "rel": rel, "min_cos": cos, "max_rel": tol.max_rel, "required_cos": tol.min_cos,
               "best_state": best, "best_rel": scores[best][0] if best is not None else None}
        rows.append(row)
        if rel > tol.max_rel or cos < tol.min_cos:
            msg = (f"{view.layers[slot].name}: relative error {rel:.3g} (max {tol.max_rel:g}), min cosine {cos:.4f} "
                   f"(min {tol.min_cos:g}) against {state_name(target, n_layers) if target is not None else '-'}")
            if best is not None and best != target and scores[best][0] <= tol.max_rel:
                msg += f"; it matches {state_name(best, n_layers)} (relative error {scores[best][0]:.3g})"
            problems.append(msg)
    if wanted is None and not problems:
        order = [r["state"] for r in rows if isinstance(r["state"], int)]
        if order != sorted(order) or len(set(order)) != len(order):
            problems.append(f"stored layers match residual-stream states {order}: not in increasing depth")
    entry = {"sample": f"{view.file}" + (f"#{view.index}" if view.index is not None else ""),
             "tokens": int(ids.numel()), "numbering": numbering, "dtype": view.layers[0].dtype, "layers": rows}
    matched = ", ".join(str(r["state"]) for r in rows)
    if problems:
        hint = ""
        if wanted is not None and all(r["best_state"] is not None and isinstance(r["state"], int)
                                      and r["best_state"] == r["state"] + (1 if numbering == "input" else -1)
                                      for r in rows):
            other = "output" if numbering == "input" else "input"
            hint = f" All layers are off by one: the file follows --layer-numbering {other}."
        return entry, Verdict("reference", f"{len(problems)} of {len(rows)} layers differ from HF transformers: "
                              + "; ".join(problems) + hint,
                              "check the layer ids and numbering convention, the slicing, and the model weights",
                              expected=f"states {[r['state'] for r in rows]}", found=matched)
    worst = max(r["rel"] for r in rows)
    return entry, Verdict("reference", f"{len(rows)} layers match HF transformers (states {matched}; worst relative "
                          f"error {worst:.2g}, tolerance {tol.max_rel:g})", status=Status.OK)
