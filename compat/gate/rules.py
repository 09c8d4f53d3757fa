"""The gate's rules: each a name, what it checks, and a check over one sample's header (shapes and dtypes).

Value rules (``--values``) live in ``compat.gate.values``; the reference check in ``compat.gate.reference``.
Each check returns ``Verdict``s for what is wrong and nothing when the rule holds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from compat.findings import Status
from compat.gate.expect import Expectations, Expected
from compat.gate.read import Layout, SampleView
from compat.gate.read.tensors import FLOATS, INTEGERS, shape_text

RULES: dict[str, str] = {
    "readable": "the file opens and parses: a safetensors header consistent with the file's size, or "
                "torch.load(weights_only=True) succeeding",
    "layout": "the file follows a known layout (or the one --layout names): its keys and their types",
    "layer_count": "as many layers as expected (--layers, --layer-ids, data_config.json, else most samples)",
    "layer_shape": "each layer is [T, hidden] (vllm-safetensors: one [T, n_layers, hidden] tensor); layers agree",
    "seq_len": "one row per token: every layer has T == len(token ids) rows",
    "hidden_size": "the last dimension is the model's hidden size (--hidden-size, --model, data_config.json, "
                   "else most samples)",
    "dtype": "the layers' dtype is the expected one (--dtype, else the model config's dtype, else most samples)",
    "token_ids": "token ids are a non-empty 1-D integer tensor (--values: within the model's vocabulary)",
    "loss_mask": "loss_mask is 1-D, integer or bool, one entry per token (--values: only 0 and 1)",
    "finite": "--values: no NaN or Inf (policy --nonfinite fail|warn|skip)",
    "nonzero_layer": "--values: no layer is all zeros",
    "distinct_layers": "--values: no two layers are identical",
    "layer_order": "--values: the residual stream's median per-token RMS does not fall below half its value at an "
                   "earlier layer (it grows with depth; a fall means layers reversed or shuffled)",
    "reference": "--reference: HF transformers on the same weights reproduces each layer within the dtype's "
                 "tolerance (relative L2 error and per-token cosine)",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One thing wrong with a sample (or, with status OK, a passed check worth reporting)."""

    rule: str
    message: str
    fix: str | None = None
    expected: str | None = None
    found: str | None = None
    status: Status = Status.BROKEN
    allowed: str | None = None


def _layer_count(s: SampleView, exp: Expectations) -> Verdict | None:
    want = exp.layers
    if want is None or not s.layers or len(s.layers) == want.value:
        return None
    n = len(s.layers)
    ids = f" {list(exp.layer_ids.value)}" if exp.layer_ids else ""
    hint = ""
    if n > 2 * want.value and all(len(t.shape) == 1 for t in s.layers):
        hint = " (one entry per token, not per layer: see layer_shape)"
    elif abs(n - want.value) == 1:
        hint = " (one layer too many or too few: check the layer ids passed to the extraction)"
    plural = "s" if n != 1 else ""
    return Verdict("layer_count", f"{n} layer{plural} where {want.value}{ids} were expected ({want.source}){hint}",
                   "capture exactly the configured layer ids, one tensor per layer",
                   expected=str(want.value), found=str(n))


def _layer_shape(s: SampleView) -> Verdict | None:
    hs = s.stacked
    if hs is not None and len(hs.shape) != 3:
        return Verdict("layer_shape", f"hidden_states has shape {list(hs.shape)}: vLLM's extraction writes "
                       f"[T, n_layers, hidden] (rank 3), this is rank {len(hs.shape)}",
                       "save hidden_states as one [tokens, layers, hidden] tensor per request")
    if not s.layers:
        return None
    bad = [t for t in s.layers if len(t.shape) != 2]
    if bad:
        shapes = Counter(shape_text(t.shape) for t in bad)
        what = ", ".join(f"{n} of {shape}" for shape, n in shapes.most_common(3))
        msg = f"{len(bad)} of {len(s.layers)} layers are not [T, hidden] (rank 2): {what}"
        tokens = s.tokens
        if all(len(t.shape) == 1 for t in bad) and len(s.layers) > 8:
            msg += (f". A list of {len(s.layers)} one-dimensional tensors is one [{len(s.layers)}, hidden] tensor "
                    "iterated as if it were the list of layers (e.g. a collective_rpc reply indexed with [0] picked "
                    "the first layer instead of the first rank), then sliced per sample")
            if tokens is not None and all(t.shape[0] == tokens for t in bad):
                msg += f" to its {tokens} tokens"
        return Verdict("layer_shape", msg, "keep one [tokens, hidden] tensor per captured layer",
                       expected="[T, hidden] per layer", found=what)
    shapes = {t.shape for t in s.layers}
    if len(shapes) > 1:
        listed = ", ".join(f"{t.name} {shape_text(t.shape)}" for t in s.layers[:6])
        return Verdict("layer_shape", f"layers disagree in shape: {listed}", "slice every layer the same way",
                       found=listed)
    return None


def _seq_len(s: SampleView) -> Verdict | None:
    tokens = s.tokens
    rows = {t.shape[0] for t in s.layers if len(t.shape) >= 2}
    if tokens is None or not rows or rows == {tokens}:
        return None
    wrong = sorted(r for r in rows if r != tokens)
    r = wrong[0]
    ids = "input_ids" if s.layout is not Layout.VLLM_SAFETENSORS else "token_ids"
    msg = f"layers have {', '.join(map(str, wrong))} rows but {ids} has {tokens} tokens"
    if r > tokens:
        fix = "slice each layer per sample: h[offset:offset + len(ids)], offsets accumulated over the batch"
        msg += f": {r - tokens} rows too many, the batch looks concatenated without per-sample slicing"
    else:
        fix = "disable prefix caching for extraction (cached tokens are never recomputed, so never captured)"
        msg += (f": {tokens - r} rows missing (prefix-cache hits or chunked prefill losing rows, "
                "or a truncated capture)")
    return Verdict("seq_len", msg, fix, expected=f"{tokens} rows", found=f"{r} rows")


def _hidden_size(s: SampleView, exp: Expectations) -> Verdict | None:
    want = exp.hidden_size
    if want is None:
        return None
    dims = sorted({t.shape[-1] for t in s.layers if len(t.shape) >= 2 and t.shape[-1] != want.value})
    if not dims:
        return None
    msg = f"layers have hidden size {', '.join(map(str, dims))}, expected {want.value} ({want.source})"
    if s.layout is Layout.EAGLE and dims[0] % want.value:
        msg += f"; {s.layout.layers_key} width {dims[0]} is not a multiple of {want.value} either"
    return Verdict("hidden_size", msg, "extract from the model whose config you pass, without tensor-parallel "
                   "sharding of the hidden dimension", expected=str(want.value), found=str(dims[0]))


def _dtype(s: SampleView, exp: Expectations) -> Verdict | None:
    dtypes = sorted({t.dtype for t in s.layers})
    if not dtypes:
        return None
    if len(dtypes) > 1:
        return Verdict("dtype", f"layers disagree in dtype: {', '.join(dtypes)}", "store every layer in one dtype",
                       found=", ".join(dtypes))
    if dtypes[0] not in FLOATS:
        return Verdict("dtype", f"layers are {dtypes[0]}, not a floating-point dtype", found=dtypes[0])
    want = exp.dtype
    if want is not None and dtypes[0] != want.value:
        return Verdict("dtype", f"layers are {dtypes[0]}, expected {want.value} ({want.source})",
                       "extract with the model's dtype, or pass --dtype if another one was intended",
                       expected=want.value, found=dtypes[0])
    return None


def _token_ids(s: SampleView) -> Verdict | None:
    t = s.token_ids
    name = "token_ids" if s.layout is Layout.VLLM_SAFETENSORS else "input_ids"
    if t is None:
        if any(f.entry != "loss_mask" for f in s.faults):
            return None  # the layout finding already names the missing key
        return Verdict("token_ids", f"{name} is not a tensor")
    if len(t.shape) != 1 or t.shape[0] == 0 or t.dtype not in INTEGERS:
        return Verdict("token_ids", f"{name} is {shape_text(t.shape)} {t.dtype}; expected a non-empty 1-D integer "
                       "tensor", "store the prompt's token ids as a 1-D int64 tensor",
                       expected="[T] int64", found=f"{shape_text(t.shape)} {t.dtype}")
    return None


def _loss_mask(s: SampleView) -> Verdict | None:
    m = s.loss_mask
    if m is None:
        if s.layout is Layout.VLLM_SAFETENSORS:
            return None  # vLLM's files carry no mask; speculators keeps it in its arrow dataset
        return Verdict("loss_mask", "loss_mask is missing", "save the loss mask with each sample")
    tokens = s.tokens
    if len(m.shape) != 1 or (m.dtype not in INTEGERS and m.dtype != "bool"):
        return Verdict("loss_mask", f"loss_mask is {shape_text(m.shape)} {m.dtype}; expected 1-D integer or bool",
                       expected="[T] int64", found=f"{shape_text(m.shape)} {m.dtype}")
    if tokens is not None and m.shape[0] != tokens:
        return Verdict("loss_mask", f"loss_mask has {m.shape[0]} entries for {tokens} tokens",
                       "truncate the mask with the ids (speculators: loss_mask[:len(input_ids)])",
                       expected=str(tokens), found=str(m.shape[0]))
    return None


def check_header(s: SampleView, exp: Expectations) -> list[Verdict]:
    """Every header rule over one sample."""
    out = [Verdict("loss_mask" if f.entry == "loss_mask" else "layout", f.message, f.fix) for f in s.faults]
    for verdict in (_layer_count(s, exp), _layer_shape(s), _seq_len(s), _hidden_size(s, exp), _dtype(s, exp),
                    _token_ids(s), _loss_mask(s)):
        if verdict is not None:
            out.append(verdict)
    return out


def _majority(values: list, label: str) -> Expected | None:
    if not values:
        return None
    value, n = Counter(values).most_common(1)[0]
    return Expected(value, f"what {n} of {len(values)} samples have; no {label} was given")


def fill_from_dataset(exp: Expectations, samples: list[SampleView]) -> Expectations:
    """Expectations nobody stated are taken from the dataset's majority, so outliers still stand out."""
    sound = [s for s in samples if s.layers and all(len(t.shape) == 2 for t in s.layers)]
    changes = {}
    if exp.layers is None:
        changes["layers"] = _majority([len(s.layers) for s in samples if s.layers], "--layers")
    if exp.hidden_size is None:
        changes["hidden_size"] = _majority([s.layers[0].shape[-1] for s in sound], "--hidden-size or --model")
    if exp.dtype is None:
        changes["dtype"] = _majority([s.layers[0].dtype for s in sound], "--dtype or --model")
    return replace(exp, **{k: v for k, v in changes.items() if v is not None})
