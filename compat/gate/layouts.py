"""The hidden-state file layouts in use, how to tell them apart, and how to read their headers.

Each reader turns a file into ``SampleView``s: per sample, the token ids, one ``TensorInfo`` per captured
layer, the loss mask; shapes and dtypes only. Layouts (``--layout`` names):

- ``speculators-pt``: speculators 0.3.0's ``scripts/data_generation_offline.py`` saves each result of
  ``VllmHiddenStatesGenerator.generate`` with ``torch.save`` as ``data_{idx}.pt``:
  ``{"input_ids": LongTensor[T], "hidden_states": [Tensor[T, H]] * n_layers, "loss_mask": LongTensor[T]}``,
  next to a ``data_config.json`` naming ``hidden_states.layer_ids`` and ``model.hidden_size``.
- ``vllm-safetensors``: vLLM's ``ExampleHiddenStatesConnector`` (speculative method ``extract_hidden_states``)
  writes ``{req_id}.safetensors``, and speculators >= 0.5 caches them as ``hs_{idx}.safetensors``:
  ``{"hidden_states": [T, n_layers, H], "token_ids": [T]}`` (no loss mask; layers in ascending layer id).
- ``eagle``: EAGLE's ``ge_data`` scripts ``torch.save`` ``data_{idx}.ckpt``:
  ``{"input_ids": [T], "hidden_state": [T, H], "loss_mask": [T]}``; the EAGLE-3 variant that speculators
  reads as "v0" stores ``hidden_state`` as ``[T, 3 * H]`` (three layers side by side) plus ``target [T, H]``.

A ``.pt``/``.ckpt`` file may also hold a list of such dicts (a whole ``generate`` batch): each is a sample.
"""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Any

from compat.gate.read.safetensors_header import HeaderError, read_header
from compat.gate.read.tensors import TensorInfo


class Layout(str, Enum):
    SPECULATORS_PT = "speculators-pt"
    VLLM_SAFETENSORS = "vllm-safetensors"
    EAGLE = "eagle"


TORCH_SUFFIXES = frozenset({".pt", ".pth", ".ckpt"})
DATA_SUFFIXES = TORCH_SUFFIXES | {".safetensors"}


@dataclass(frozen=True, slots=True)
class Problem:
    """A structural fault found while reading, reported under ``rule``."""

    rule: str
    message: str
    fix: str | None = None


@dataclass(frozen=True, slots=True)
class SampleView:
    """One stored sample, as its file's header (or pickle skeleton) describes it."""

    file: str
    index: int | None
    """Position in a file holding a list of samples; None for one-sample files."""
    layout: Layout
    token_ids: TensorInfo | None
    layers: tuple[TensorInfo, ...]
    """One per captured layer, in stored order. Stacked files give ``hidden_states[:, i]`` views."""
    stacked: TensorInfo | None = None
    """vllm-safetensors: the ``[T, n_layers, H]`` tensor itself."""
    loss_mask: TensorInfo | None = None
    problems: tuple[Problem, ...] = ()
    key: str = "hidden_states"
    """The dict key (or tensor name) holding the layers."""

    @property
    def tokens(self) -> int | None:
        return self.token_ids.shape[0] if self.token_ids is not None and self.token_ids.shape else None


@dataclass(frozen=True, slots=True)
class ReadFailure:
    """Why a file could not be read at all: message, exception type, and where (traceback when Python raised)."""

    message: str
    error_type: str
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class FileView:
    path: str
    """File paths are strings inside the gate: pathlib costs more than a header read, over 100k files."""
    size: int
    samples: tuple[SampleView, ...] = ()
    failure: ReadFailure | None = None


class ReadError(Exception):
    """Raised inside readers for a file that is not any known layout."""


_DIGITS = re.compile(r"(\d+)")


def natural_key(path: str) -> tuple:
    """``data_2.pt`` before ``data_10.pt`` (directories compare as text, names by their numbers)."""
    head, _, name = path.rpartition(os.sep)
    return head, tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


# ---------------------------------------------------------------- safetensors

def _stacked_views(file: str, hs: TensorInfo, ids: TensorInfo | None, layout: Layout) -> SampleView:
    problems: list[Problem] = []
    layers: tuple[TensorInfo, ...] = ()
    if len(hs.shape) == 3:
        layers = tuple(TensorInfo(f"hidden_states[:, {i}]", hs.dtype, (hs.shape[0], hs.shape[2]))
                       for i in range(hs.shape[1]))
    else:
        problems.append(Problem("layer_shape", f"hidden_states has shape {list(hs.shape)}: vLLM's extraction "
                                f"writes [T, n_layers, hidden] (rank 3), this is rank {len(hs.shape)}",
                                "save hidden_states as one [tokens, layers, hidden] tensor per request"))
    return SampleView(file, None, layout, ids, layers, stacked=hs, problems=tuple(problems))


def read_safetensors(path: str, forced: Layout | None) -> FileView:
    try:
        header = read_header(path)
    except HeaderError as exc:
        return FileView(path, _size(path), failure=ReadFailure(str(exc), "HeaderError"))
    except OSError as exc:
        return FileView(path, _size(path), failure=ReadFailure(f"cannot open: {exc.strerror or exc}",
                                                               type(exc).__name__))
    tensors = header.tensors
    layout = forced or Layout.VLLM_SAFETENSORS
    if layout is not Layout.VLLM_SAFETENSORS:
        return FileView(path, header.file_size, failure=ReadFailure(
            f"--layout {layout.value} reads torch.save files; this is a safetensors file with tensors "
            f"{', '.join(sorted(tensors)) or '(none)'}", "LayoutMismatch"))
    hs, ids = tensors.get("hidden_states"), tensors.get("token_ids")
    missing = [name for name, t in (("hidden_states", hs), ("token_ids", ids)) if t is None]
    if missing or hs is None:
        sample = SampleView(path, None, layout, ids, (), problems=(Problem(
            "layout", f"missing tensor(s) {', '.join(missing)}; found {', '.join(sorted(tensors)) or 'none'} "
            "(vLLM's extraction writes hidden_states [T, n_layers, H] and token_ids [T])"),))
        return FileView(path, header.file_size, (sample,))
    return FileView(path, header.file_size, (_stacked_views(path, hs, ids, layout),))


# ---------------------------------------------------------------- torch.save files

def _info(name: str, value: Any) -> TensorInfo | None:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    return TensorInfo(name, str(dtype).removeprefix("torch."), tuple(int(d) for d in shape))


def classify(obj: dict) -> Layout | None:
    """The layout a loaded sample dict follows, by its keys; None if it follows none."""
    if "hidden_state" in obj and "input_ids" in obj:
        return Layout.EAGLE
    if "hidden_states" in obj and "token_ids" in obj:
        return Layout.VLLM_SAFETENSORS
    if "hidden_states" in obj and "input_ids" in obj:
        return Layout.SPECULATORS_PT
    return None


def _speculators_sample(path: str, index: int | None, obj: dict) -> SampleView:
    problems: list[Problem] = []
    hs = obj["hidden_states"]
    layers: list[TensorInfo] = []
    if isinstance(hs, (list, tuple)):
        for i, layer in enumerate(hs):
            info = _info(f"hidden_states[{i}]", layer)
            if info is None:
                problems.append(Problem("layout", f"hidden_states[{i}] is a {type(layer).__name__}, not a tensor"))
                break
            layers.append(info)
    else:
        info = _info("hidden_states", hs)
        what = f"a tensor of shape {list(info.shape)}" if info else f"a {type(hs).__name__}"
        problems.append(Problem("layout", f"hidden_states is {what}; speculators 0.3.0 writes a list of per-layer "
                                "[T, hidden] tensors", "save [h.contiguous() for h in layers] as the list"))
    ids = _info("input_ids", obj["input_ids"])
    mask = obj.get("loss_mask")
    mask_info = _info("loss_mask", mask) if mask is not None else None
    if mask is not None and mask_info is None:
        problems.append(Problem("loss_mask", f"loss_mask is a {type(mask).__name__}, not a tensor"))
    return SampleView(path, index, Layout.SPECULATORS_PT, ids, tuple(layers), loss_mask=mask_info,
                      problems=tuple(problems))


def _eagle_sample(path: str, index: int | None, obj: dict, hidden_size: int | None,
                  layers_expected: int | None) -> SampleView:
    problems: list[Problem] = []
    hs = _info("hidden_state", obj["hidden_state"])
    layers: list[TensorInfo] = []
    n = hs.shape[1] // hidden_size if hs is not None and len(hs.shape) == 2 and hidden_size else 0
    # EAGLE-3 / speculators "v0" put several layers side by side: [T, n * H]. A width that is a multiple of
    # the hidden size is read so, unless the expected layer count says otherwise.
    concatenated = n > 1 and hs is not None and hs.shape[1] == n * (hidden_size or 0) and (
        layers_expected is None or layers_expected == n + ("target" in obj))
    if hs is None:
        problems.append(Problem("layout", f"hidden_state is a {type(obj['hidden_state']).__name__}, not a tensor"))
    elif concatenated and hidden_size:
        layers += [TensorInfo(f"hidden_state[:, {i * hidden_size}:{(i + 1) * hidden_size}]", hs.dtype,
                              (hs.shape[0], hidden_size)) for i in range(n)]
    else:
        layers.append(hs)
    target = obj.get("target")
    if target is not None:
        info = _info("target", target)
        if info is None:
            problems.append(Problem("layout", f"target is a {type(target).__name__}, not a tensor"))
        else:
            layers.append(info)
    mask = obj.get("loss_mask")
    return SampleView(path, index, Layout.EAGLE, _info("input_ids", obj["input_ids"]), tuple(layers),
                      loss_mask=_info("loss_mask", mask) if mask is not None else None, problems=tuple(problems),
                      key="hidden_state")


def sample_from_object(path: str, index: int | None, obj: Any, forced: Layout | None,
                       hidden_size: int | None, layers: int | None = None) -> SampleView:
    if not isinstance(obj, dict):
        raise ReadError(f"holds a {type(obj).__name__}, not a dict of tensors (nor a list of such dicts)")
    layout = classify(obj)
    if layout is None or (forced is not None and layout is not forced):
        keys = ", ".join(sorted(map(str, obj))) or "none"
        want = f"--layout {forced.value}" if forced else "any known layout"
        raise ReadError(f"keys {keys} do not match {want} (speculators-pt: input_ids, hidden_states, loss_mask; "
                        "vllm-safetensors: hidden_states, token_ids; eagle: input_ids, hidden_state, loss_mask)")
    if layout is Layout.SPECULATORS_PT:
        return _speculators_sample(path, index, obj)
    if layout is Layout.EAGLE:
        return _eagle_sample(path, index, obj, hidden_size, layers)
    hs = _info("hidden_states", obj["hidden_states"])
    if hs is None:
        raise ReadError(f"hidden_states is a {type(obj['hidden_states']).__name__}, not a tensor")
    return _stacked_views(path, hs, _info("token_ids", obj["token_ids"]), layout)


def load_torch(path: str | os.PathLike) -> Any:
    """``torch.load`` that never unpickles arbitrary objects, and maps (does not read) tensor data."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc):
            raise
        # Legacy (pre-zip) torch.save files cannot be memory-mapped; they are small enough to read.
        return torch.load(path, map_location="cpu", weights_only=True)


def _torch_error(exc: Exception) -> str:
    """The informative sentence of torch.load's long error texts."""
    text = str(exc)
    if "WeightsUnpickler error:" in text:
        reason = text.split("WeightsUnpickler error:", 1)[1].strip().split("\n")[0].split(". Please")[0]
        return f"torch.load(weights_only=True) refused to unpickle it: {reason}"
    first = " ".join(text.split()).split(". ")[0][:240] or "(no message)"
    return f"torch.load(weights_only=True) failed: {first}"


def _load(path: str) -> Any:
    """The stored object: tensor stubs from the archive's pickle (fast), else torch.load's answer.

    Raises ``FormatError`` for a file that is neither a zip archive nor a pickle stream.
    """
    from compat.gate.read.torch_header import NotPlain, read_structure

    try:
        return read_structure(path)
    except NotPlain:
        pass  # not a plain tensor archive: torch.load (weights only) decides, and says why not
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic[:2] != b"PK" and magic[:1] != b"\x80":
        # torch.save writes a zip archive (or, before 1.6, a pickle stream): anything else is another format.
        raise FormatError(f"not a torch.save file (a zip archive or pickle stream): it starts with {magic!r}")
    return load_torch(path)


class FormatError(Exception):
    """Not a torch.save file at all."""


def read_torch(path: str, forced: Layout | None, hidden_size: int | None, layers: int | None) -> FileView:
    size = _size(path)
    try:
        obj = _load(path)
        items = list(enumerate(obj)) if isinstance(obj, (list, tuple)) else [(None, obj)]
        if not items:
            raise ReadError("holds an empty list")
        samples = tuple(sample_from_object(path, i, item, forced, hidden_size, layers) for i, item in items)
    except ReadError as exc:
        return FileView(path, size, failure=ReadFailure(str(exc), "LayoutMismatch"))
    except FormatError as exc:
        return FileView(path, size, failure=ReadFailure(str(exc), "FormatError"))
    except OSError as exc:
        return FileView(path, size, failure=ReadFailure(f"cannot open: {exc.strerror or exc}", type(exc).__name__))
    except Exception as exc:  # noqa: BLE001 - any failure to load is a finding about this file, not a crash
        return FileView(path, size, failure=ReadFailure(_torch_error(exc), type(exc).__name__,
                                                        traceback.format_exc()))
    return FileView(path, size, samples)


def read_file(path: str, forced: Layout | None = None, hidden_size: int | None = None,
              layers: int | None = None) -> FileView:
    """Read ``path``'s header (or pickle skeleton) into a FileView; never raises for a bad file.

    ``hidden_size`` and ``layers`` (expected values, if known) only disambiguate EAGLE-3's concatenated layers.
    """
    if path.endswith(".safetensors"):
        return read_safetensors(path, forced)
    return read_torch(path, forced, hidden_size, layers)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
