"""A stored sample (a dict of tensors, or a safetensors header's tensors) as a ``SampleView`` of its layout.

What does not fit the layout is recorded as an ``EntryFault`` on the view when the rest can still be read,
and raised as ``LayoutMismatch`` when nothing can (not a dict, keys of no known layout).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from compat.gate.read.layouts import Layout, classify
from compat.gate.read.safetensors_header import SafetensorsHeader
from compat.gate.read.tensors import TensorInfo
from compat.gate.read.views import EntryFault, SampleView


class LayoutMismatch(Exception):
    """The object follows no known layout (or not the one ``--layout`` names)."""


def tensor_info(value: Any, key: str, item: int | None = None) -> TensorInfo | None:
    """``value``'s dtype and shape (a tensor, or the reader's stub of one); None when it is not a tensor."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    return TensorInfo(key, str(dtype).removeprefix("torch."), tuple(map(int, shape)), item)


def stacked_sample(file: str, hs: TensorInfo, ids: TensorInfo | None) -> SampleView:
    """vllm-safetensors: one ``[T, n_layers, H]`` tensor, each layer a column of it (none when not rank 3).

    The index is None even for an entry of a list file (kept as the gate always had it).
    """
    layers = _columns(hs.key, hs.dtype, hs.shape) if len(hs.shape) == 3 else ()
    return SampleView(file, None, Layout.VLLM_SAFETENSORS, ids, layers, stacked=hs)


@lru_cache(maxsize=4096)
def _columns(key: str, dtype: str, shape: tuple[int, int, int]) -> tuple[TensorInfo, ...]:
    """The layers of a stacked ``[T, n_layers, H]`` tensor, made once per shape (files of one token count share
    them; they are immutable)."""
    return tuple([TensorInfo(key, dtype, (shape[0], shape[2]), None, i) for i in range(shape[1])])


VLLM_TENSORS = frozenset({"hidden_states", "token_ids"})
"""The tensors of vLLM's extraction layout: all a safetensors header keeps of its tensors (``read_header``)."""


def names(first: Iterable[str], count: int) -> str:
    """``first``, the first tensor names in order, and how many more of ``count``: a header may name millions."""
    shown = list(first)
    more = f" and {count - len(shown)} more" if count > len(shown) else ""
    return ", ".join(shown) + more


def missing_tensors_sample(file: str, header: SafetensorsHeader) -> SampleView:
    """A vllm-safetensors file without ``hidden_states`` or ``token_ids``."""
    hs, ids = header.tensors.get("hidden_states"), header.tensors.get("token_ids")
    missing = [name for name, t in (("hidden_states", hs), ("token_ids", ids)) if t is None]
    fault = EntryFault(", ".join(missing), f"missing tensor(s) {', '.join(missing)}; found "
                       f"{names(header.first, header.count) or 'none'} (vLLM's extraction writes hidden_states "
                       "[T, n_layers, H] and token_ids [T])")
    return SampleView(file, None, Layout.VLLM_SAFETENSORS, ids, (), faults=(fault,))


def _speculators_sample(path: str, index: int | None, obj: dict) -> SampleView:
    faults: list[EntryFault] = []
    hs = obj["hidden_states"]
    layers: list[TensorInfo] = []
    if isinstance(hs, (list, tuple)):
        for i, layer in enumerate(hs):
            info = tensor_info(layer, "hidden_states", i)
            if info is None:
                faults.append(EntryFault(f"hidden_states[{i}]",
                                         f"hidden_states[{i}] is a {type(layer).__name__}, not a tensor"))
                break
            layers.append(info)
    else:
        info = tensor_info(hs, "hidden_states")
        what = f"a tensor of shape {list(info.shape)}" if info else f"a {type(hs).__name__}"
        faults.append(EntryFault("hidden_states", f"hidden_states is {what}; speculators 0.3.0 writes a list of "
                                 "per-layer [T, hidden] tensors", "save [h.contiguous() for h in layers] as the list"))
    ids = tensor_info(obj["input_ids"], "input_ids")
    mask = obj.get("loss_mask")
    mask_info = tensor_info(mask, "loss_mask") if mask is not None else None
    if mask is not None and mask_info is None:
        faults.append(EntryFault("loss_mask", f"loss_mask is a {type(mask).__name__}, not a tensor"))
    return SampleView(path, index, Layout.SPECULATORS_PT, ids, tuple(layers), loss_mask=mask_info,
                      faults=tuple(faults))


def _eagle_sample(path: str, index: int | None, obj: dict, hidden_size: int | None,
                  layers_expected: int | None) -> SampleView:
    faults: list[EntryFault] = []
    hs = tensor_info(obj["hidden_state"], "hidden_state")
    layers: list[TensorInfo] = []
    n = hs.shape[1] // hidden_size if hs is not None and len(hs.shape) == 2 and hidden_size else 0
    # EAGLE-3 / speculators "v0" put several layers side by side: [T, n * H]. A width that is a multiple of
    # the hidden size is read so, unless the expected layer count says otherwise.
    # ``layers_expected`` counts captured layers (``target`` is not one), but a count that includes it is read too.
    concatenated = n > 1 and hs is not None and hs.shape[1] == n * (hidden_size or 0) and (
        layers_expected is None or layers_expected in (n, n + ("target" in obj)))
    if hs is None:
        faults.append(EntryFault("hidden_state",
                                 f"hidden_state is a {type(obj['hidden_state']).__name__}, not a tensor"))
    elif concatenated and hidden_size:
        layers += [TensorInfo(hs.key, hs.dtype, (hs.shape[0], hidden_size),
                              columns=(i * hidden_size, (i + 1) * hidden_size)) for i in range(n)]
    else:
        layers.append(hs)
    target = obj.get("target")
    if target is not None:
        info = tensor_info(target, "target")
        if info is None:
            faults.append(EntryFault("target", f"target is a {type(target).__name__}, not a tensor"))
        else:
            layers.append(info)
    mask = obj.get("loss_mask")
    return SampleView(path, index, Layout.EAGLE, tensor_info(obj["input_ids"], "input_ids"), tuple(layers),
                      loss_mask=tensor_info(mask, "loss_mask") if mask is not None else None, faults=tuple(faults))


def sample_from_object(path: str, index: int | None, obj: Any, forced: Layout | None,
                       hidden_size: int | None, layers: int | None = None) -> SampleView:
    """The view of one stored dict; ``hidden_size`` and ``layers`` (expected, if known) only split EAGLE-3's
    side-by-side layers. Raises LayoutMismatch for an object of no known layout (or not ``forced``)."""
    if not isinstance(obj, dict):
        raise LayoutMismatch(f"holds a {type(obj).__name__}, not a dict of tensors (nor a list of such dicts)")
    layout = classify(obj)
    if layout is None or (forced is not None and layout is not forced):
        keys = ", ".join(sorted(map(str, obj))) or "none"
        want = f"--layout {forced.value}" if forced else "any known layout"
        raise LayoutMismatch(f"keys {keys} do not match {want} (speculators-pt: input_ids, hidden_states, "
                             "loss_mask; vllm-safetensors: hidden_states, token_ids; eagle: input_ids, hidden_state, "
                             "loss_mask)")
    if layout is Layout.SPECULATORS_PT:
        return _speculators_sample(path, index, obj)
    if layout is Layout.EAGLE:
        return _eagle_sample(path, index, obj, hidden_size, layers)
    hs = tensor_info(obj["hidden_states"], "hidden_states")
    if hs is None:
        raise LayoutMismatch(f"hidden_states is a {type(obj['hidden_states']).__name__}, not a tensor")
    return stacked_sample(path, hs, tensor_info(obj["token_ids"], "token_ids"))
