"""Rules on one sample's header: layer count and shapes, rows per token, hidden size, dtype, token ids and loss
mask (the last two also look at values under ``--values``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from compat.findings import Status
from compat.gate.datasets import UnusedMasks
from compat.gate.read.layouts import Layout
from compat.gate.read.tensors import FLOATS, INTEGERS, shape_text
from compat.gate.read.views import EntryFault, SampleView
from compat.gate.rules.reading import layout_fault
from compat.gate.rules.rule import Context, Phase, ReadSubject, Rule, RuleFinding, ValueSubject, some
from compat.gate.value_stats import SampleValues


def _layer_count(s: SampleView, ctx: Context) -> Sequence[RuleFinding]:
    want = ctx.expected.layers
    if want is None or not s.layers or s.numbered == want.value:
        return ()
    n = s.numbered
    layer_ids = ctx.expected.layer_ids
    ids = f" [{some([str(i) for i in layer_ids.value])}]" if layer_ids else ""
    hint = ""
    if n > 2 * want.value and all(len(t.shape) == 1 for t in s.layers):
        hint = " (one entry per token, not per layer: see layer_shape)"
    elif abs(n - want.value) == 1:
        hint = " (one layer too many or too few: check the layer ids passed to the extraction)"
    if n != len(s.layers):
        hint += " (EAGLE-3's target, the final-norm state, is not counted)"
    plural = "s" if n != 1 else ""
    return [RuleFinding(f"{n} layer{plural} where {want.value}{ids} were expected ({want.source}){hint}",
                        "capture exactly the configured layer ids, one tensor per layer",
                        expected=str(want.value), found=str(n))]


LAYER_COUNT = Rule(
    "layer_count", "as many layers as expected (--layers, --layer-ids, data_config.json, else most samples)",
    Phase.HEADER, _layer_count)


def _layer_shape(s: SampleView, _ctx: Context) -> Sequence[RuleFinding]:
    hs = s.stacked
    if hs is not None and len(hs.shape) != 3:
        return [RuleFinding(f"hidden_states has shape {list(hs.shape)}: vLLM's extraction writes "
                            f"[T, n_layers, hidden] (rank 3), this is rank {len(hs.shape)}",
                            "save hidden_states as one [tokens, layers, hidden] tensor per request")]
    if not s.layers:
        if any(layout_fault(f) for f in s.faults):
            return ()  # the layout finding says why no layer could be read
        where = f"hidden_states is {shape_text(hs.shape)}" if hs is not None else f"{s.layout.layers_key} is empty"
        return [RuleFinding(f"no layers at all: {where}", "capture at least one layer per sample",
                            expected="one or more layers", found="0")]
    bad = [t for t in s.layers if len(t.shape) != 2]
    if bad:
        shapes = Counter(shape_text(t.shape) for t in bad)
        what = ", ".join(f"{n} of {shape}" for shape, n in shapes.most_common(3))
        msg = f"{len(bad)} of {len(s.layers)} layers are not [T, hidden] (rank 2): {what}"
        tokens = s.tokens
        if all(len(t.shape) == 3 and t.shape[0] == 1 for t in bad):
            msg += ": a batch dimension of 1 kept (each layer saved as the model returned it, [1, T, hidden])"
            return [RuleFinding(msg, "drop the batch dimension: save h[0] (or h.squeeze(0)) for each layer",
                                expected="[T, hidden] per layer", found=what)]
        if all(len(t.shape) == 1 for t in bad) and len(s.layers) > 8:
            msg += (f". A list of {len(s.layers)} one-dimensional tensors is one [{len(s.layers)}, hidden] tensor "
                    "iterated as if it were the list of layers (e.g. a collective_rpc reply indexed with [0] picked "
                    "the first layer instead of the first rank), then sliced per sample")
            if tokens is not None and all(t.shape[0] == tokens for t in bad):
                msg += f" to its {tokens} tokens"
        return [RuleFinding(msg, "keep one [tokens, hidden] tensor per captured layer",
                            expected="[T, hidden] per layer", found=what)]
    empty = [t for t in s.layers if t.shape[1] == 0]
    if empty:
        return [RuleFinding(f"{empty[0].name} is {shape_text(empty[0].shape)}: a layer with no hidden dimension holds "
                            "no state", "capture the layers' full hidden states", found=shape_text(empty[0].shape))]
    distinct = {t.shape for t in s.layers}
    if len(distinct) > 1:
        listed = some([f"{t.name} {shape_text(t.shape)}" for t in s.layers])
        return [RuleFinding(f"layers disagree in shape: {listed}", "slice every layer the same way", found=listed)]
    return ()


LAYER_SHAPE = Rule(
    "layer_shape", "each layer is [T, hidden] (vllm-safetensors: one [T, n_layers, hidden] tensor); layers agree",
    Phase.HEADER, _layer_shape, structural=True)


def _seq_len(s: SampleView, _ctx: Context) -> Sequence[RuleFinding]:
    tokens = s.tokens
    # Rows of the [T, hidden] layers only: a layer of another rank is layer_shape's finding ([1, T, hidden] has
    # one "row"), and one layout mistake is one finding.
    rows = {t.shape[0] for t in s.layers if len(t.shape) == 2}
    if tokens is None or not rows or rows == {tokens}:
        return ()
    wrong = sorted(r for r in rows if r != tokens)
    r = wrong[0]
    msg = f"layers have {', '.join(map(str, wrong))} rows but {s.layout.ids_key} has {tokens} tokens"
    if r > tokens:
        fix = "slice each layer per sample: h[offset:offset + len(ids)], offsets accumulated over the batch"
        msg += f": {r - tokens} rows too many, the batch looks concatenated without per-sample slicing"
    else:
        fix = "disable prefix caching for extraction (cached tokens are never recomputed, so never captured)"
        msg += (f": {tokens - r} rows missing (prefix-cache hits or chunked prefill losing rows, "
                "or a truncated capture)")
    return [RuleFinding(msg, fix, expected=f"{tokens} rows", found=f"{r} rows")]


SEQ_LEN = Rule(
    "seq_len", "one row per token: every layer has T == len(token ids) rows", Phase.HEADER, _seq_len,
    structural=True)


def _hidden_size(s: SampleView, ctx: Context) -> Sequence[RuleFinding]:
    want = ctx.expected.hidden_size
    if want is None:
        return ()
    dims = sorted({t.shape[-1] for t in s.layers if len(t.shape) >= 2 and t.shape[-1] != want.value})
    if not dims:
        return ()
    msg = f"layers have hidden size {', '.join(map(str, dims))}, expected {want.value} ({want.source})"
    if s.layout is Layout.EAGLE and dims[0] % want.value:
        msg += f"; {s.layout.layers_key} width {dims[0]} is not a multiple of {want.value} either"
    return [RuleFinding(msg, "extract from the model whose config you pass, without tensor-parallel sharding of "
                        "the hidden dimension", expected=str(want.value), found=str(dims[0]))]


HIDDEN_SIZE = Rule(
    "hidden_size", "the last dimension is the model's hidden size (--hidden-size, --model, data_config.json, "
                   "else most samples)",
    Phase.HEADER, _hidden_size)


def _dtype(s: SampleView, ctx: Context) -> Sequence[RuleFinding]:
    dtypes = sorted({t.dtype for t in s.layers})
    if not dtypes:
        return ()
    if len(dtypes) > 1:
        return [RuleFinding(f"layers disagree in dtype: {', '.join(dtypes)}", "store every layer in one dtype",
                            found=", ".join(dtypes))]
    if dtypes[0] not in FLOATS:
        return [RuleFinding(f"layers are {dtypes[0]}, not a floating-point dtype", found=dtypes[0])]
    want = ctx.expected.dtype
    if want is not None and dtypes[0] != want.value:
        return [RuleFinding(f"layers are {dtypes[0]}, expected {want.value} ({want.source})",
                            "extract with the model's dtype, or pass --dtype if another one was intended",
                            expected=want.value, found=dtypes[0])]
    return ()


DTYPE = Rule(
    "dtype", "the layers' dtype is the expected one (--dtype, else the model config's dtype, else most samples)",
    Phase.HEADER, _dtype)


def _token_ids(s: SampleView, _ctx: Context) -> Sequence[RuleFinding]:
    t = s.token_ids
    name = s.layout.ids_key
    if t is None:
        if any(layout_fault(f) for f in s.faults):
            return ()  # the layout finding already names the missing key
        return [RuleFinding(f"{name} is not a tensor")]
    if len(t.shape) != 1 or t.shape[0] == 0 or t.dtype not in INTEGERS:
        return [RuleFinding(f"{name} is {shape_text(t.shape)} {t.dtype}; expected a non-empty 1-D integer tensor",
                            "store the prompt's token ids as a 1-D int64 tensor",
                            expected="[T] int64", found=f"{shape_text(t.shape)} {t.dtype}")]
    return ()


def _token_ids_in_vocabulary(v: ValueSubject, ctx: Context) -> Sequence[RuleFinding]:
    vocab = ctx.expected.vocab_size
    if not isinstance(v, SampleValues) or vocab is None or v.token_range is None:
        return ()
    lo, hi = v.token_range
    if lo >= 0 and hi < vocab.value:
        return ()
    return [RuleFinding(f"token ids range over [{lo}, {hi}], outside the vocabulary of {vocab.value} "
                        f"({vocab.source})", "extract with the tokenizer of the model you pass", status=Status.BROKEN)]


TOKEN_IDS = Rule(
    "token_ids", "token ids are a non-empty 1-D integer tensor (--values: within the model's vocabulary)",
    Phase.HEADER, _token_ids, structural=True, also={Phase.VALUES: _token_ids_in_vocabulary})


def _mask_entry(fault: ReadSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(fault, EntryFault) or layout_fault(fault):
        return ()
    return [RuleFinding(fault.message, fault.fix)]


def _loss_mask(s: SampleView, _ctx: Context) -> Sequence[RuleFinding]:
    m = s.loss_mask
    if m is None:
        if s.layout is Layout.VLLM_SAFETENSORS:
            return ()  # vLLM's files carry no mask; speculators keeps it in its arrow dataset
        return [RuleFinding("loss_mask is missing", "save the loss mask with each sample")]
    tokens = s.tokens
    if len(m.shape) != 1 or (m.dtype not in INTEGERS and m.dtype not in FLOATS and m.dtype != "bool"):
        return [RuleFinding(f"loss_mask is {shape_text(m.shape)} {m.dtype}; expected 1-D integer or bool",
                            expected="[T] int64", found=f"{shape_text(m.shape)} {m.dtype}")]
    if tokens is not None and m.shape[0] != tokens:
        return [RuleFinding(f"loss_mask has {m.shape[0]} entries for {tokens} tokens",
                            "truncate the mask with the ids (speculators: loss_mask[:len(input_ids)])",
                            expected=str(tokens), found=str(m.shape[0]))]
    if m.dtype in FLOATS:
        # Trainers cast the mask (speculators' own: loss_mask.to(torch.bool)), so 0.0/1.0 trains as 0/1;
        # --values checks that those are its only values.
        return [RuleFinding(f"loss_mask is {m.dtype}, not integer or bool", "store the mask as int64 or bool",
                            found=m.dtype, allowed="a float mask of 0.0 and 1.0 is cast by trainers "
                            "(speculators: loss_mask.to(torch.bool)); --values checks its values")]
    return ()


def _mask_values(v: ValueSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if isinstance(v, UnusedMasks):
        return [_unused(v)]
    if not isinstance(v, SampleValues) or not v.mask_values:
        return ()
    return [RuleFinding(f"loss_mask holds values other than 0 and 1: {list(v.mask_values[:5])}", "store a 0/1 mask")]


def _unused(u: UnusedMasks) -> RuleFinding:
    fix = "build the mask from the assistant turns (1 where the model should learn), not from the prompt alone"
    if u.view is None:
        return RuleFinding(f"every loss_mask is all zero ({u.zero} of {u.measured} samples): nothing in this "
                           "dataset would be trained", fix, expected="some 1s in the masks", found="all zero")
    return RuleFinding(f"loss_mask is all zero: none of its {u.view.tokens} tokens would be trained ({u.zero} of "
                       f"{u.measured} masks in its directory are)", fix, expected="some 1s", found="all zero")


LOSS_MASK = Rule(
    "loss_mask", "loss_mask is 1-D, integer or bool, one entry per token (--values: only 0 and 1, not all 0; "
                 "all 0 in every sample of a directory: one finding for the dataset)",
    Phase.HEADER, _loss_mask, also={Phase.READ: _mask_entry, Phase.VALUES: _mask_values})
