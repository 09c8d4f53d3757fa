"""What the files should contain: hidden size, dtype, layer count and ids, each with where it came from.

Sources, strongest first: command-line flags; the model's ``config.json`` (``--model``, else
``--reference``); speculators' ``data_config.json`` beside the files. What none of them states is taken
from the dataset itself (what most samples of a layout have: ``fill_from_dataset``) before the rules run.

A flag that contradicts ``data_config.json`` is a ``Conflict``: the file wrote the data, so the file wins and
the conflict fails the run, unless ``--override-data-config`` says the flags are right (a file copied from
another run); then the flag wins and the conflict is reported as allowed.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from compat.errors import CompatError
from compat.gate.read import metadata
from compat.gate.read.source import MAX_TEXT, is_url, read_text
from compat.gate.read.tensors import canonical_dtype
from compat.gate.read.views import SampleView

T = TypeVar("T")


@dataclass(frozen=True)
class Expected(Generic[T]):
    value: T
    source: str

    def as_dict(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"value": value, "source": self.source}


@dataclass(frozen=True)
class ModelInfo:
    """The few config.json facts the gate uses."""

    path: Path
    hidden_size: int | None
    num_layers: int | None
    dtype: str | None
    vocab_size: int | None
    model_type: str | None = None
    """``model_type`` (its kernels set how far two right extractions may differ: MoE models' vary by batch)."""


@dataclass(frozen=True)
class Expectations:
    hidden_size: Expected[int] | None = None
    dtype: Expected[str] | None = None
    layers: Expected[int] | None = None
    layer_ids: Expected[tuple[int, ...]] | None = None
    vocab_size: Expected[int] | None = None
    model_type: Expected[str] | None = None
    dtype_unstated: str | None = None
    """Why the model's config does not state the dataset's dtype, where it was given but does not."""

    def stored_layer_ids(self, view: SampleView) -> tuple[int, ...] | None:
        """The expected layer ids in the order ``view`` stores its numbered layers (vLLM: ascending, whatever
        order was asked; EAGLE-3's ``target``, stored last, has none); None when no ids are known or their count
        is not the sample's."""
        if self.layer_ids is None or len(self.layer_ids.value) != view.numbered:
            return None
        ids = self.layer_ids.value
        return tuple(sorted(ids)) if view.layout.sorts_layers else ids

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for name in ("hidden_size", "dtype", "layers", "layer_ids", "vocab_size", "model_type"):
            value = getattr(self, name)
            out[name] = value.as_dict() if value is not None else None
        return out


def _text_config(data: dict) -> dict:
    # Multimodal wrappers (Kimi-K2.5, Llama-4, Qwen-VL...) keep the language model's sizes in text_config.
    inner = data.get("text_config") or data.get("language_config")
    return inner if isinstance(inner, dict) else {}


def read_model_config(path: Path) -> ModelInfo:
    """A model directory or its config.json; bad input raises CompatError (one line, exit 2)."""
    config = path / "config.json" if path.is_dir() else path
    if not config.exists():
        raise CompatError(f"--model {path}: no config.json there")
    try:
        data = metadata.loads(metadata.read_local(config, MAX_TEXT))
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CompatError(f"--model {config}: unreadable config ({type(exc).__name__}: {reason})") from None
    if not isinstance(data, dict):
        raise CompatError(f"--model {config}: not a JSON object")
    text = _text_config(data)

    def pick(*keys: str) -> Any:
        for source in (data, text):
            for key in keys:
                if source.get(key) is not None:
                    return source[key]
        return None

    dtype = pick("dtype", "torch_dtype")
    try:
        dtype = canonical_dtype(dtype) if dtype not in (None, "auto") else None
    except CompatError as exc:
        raise CompatError(f"--model {config}: {exc}") from exc
    model_type = data.get("model_type") if isinstance(data.get("model_type"), str) else None
    return ModelInfo(config, pick("hidden_size"), pick("num_hidden_layers", "n_layers"), dtype,
                     pick("vocab_size"), model_type)


@dataclass(frozen=True)
class DataConfig:
    """speculators 0.3.0's ``data_config.json`` (written by ``DataGenerationConfig``)."""

    path: Path | str
    layer_ids: tuple[int, ...] | None
    hidden_size: int | None


@dataclass(frozen=True)
class DataConfigFault:
    """A ``data_config.json`` that cannot be taken at its word: what it states is not used, the samples are
    judged without it, and this is a finding keyed to the file."""

    path: Path | str
    message: str
    """One line: the key and the value where one is at fault, else what is wrong with the file."""


MAX_LAYER_ID = 1 << 16
MAX_HIDDEN_SIZE = 1 << 20


def read_data_config(path: Path | str) -> DataConfig | DataConfigFault:
    """A speculators ``data_config.json``, local or named by URL, read within bounds (``read.metadata``) and
    held to the types speculators writes: no value is coerced (``"012"`` is no list of ids, ``1.9`` no id)."""
    try:
        data = metadata.loads(read_text(path) if is_url(path) else metadata.read_local(path))
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return DataConfigFault(path, f"unreadable ({type(exc).__name__}: {reason})")
    try:
        return DataConfig(path, _layer_ids(data), _hidden_size(data))
    except ValueError as exc:
        return DataConfigFault(path, str(exc))


def _shown_json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
               float: "a number with a fraction or exponent", type(None): "null"}


def _wrong(key: str, value: Any, wanted: str) -> ValueError:
    return ValueError(f"{key} is {_shown_json(value)} ({_JSON_TYPES.get(type(value), type(value).__name__)}), "
                      f"not {wanted}")


def _section(data: Any, key: str) -> dict | None:
    if not isinstance(data, dict):
        raise _wrong("the file", data, "a JSON object")
    section = data.get(key)
    if section is not None and not isinstance(section, dict):
        raise _wrong(key, section, "an object")
    return section


def _integer(key: str, value: Any, low: int, high: int, wanted: str) -> int:
    if type(value) is not int or not low <= value <= high:
        raise _wrong(key, value, wanted)
    return value


def _layer_ids(data: Any) -> tuple[int, ...] | None:
    section = _section(data, "hidden_states")
    if section is None or section.get("layer_ids") is None:
        return None
    ids = section["layer_ids"]
    if not isinstance(ids, list) or not ids:
        raise _wrong("hidden_states.layer_ids", ids, "a non-empty list of layer ids")
    out = tuple(_integer(f"hidden_states.layer_ids[{i}]", v, 0, MAX_LAYER_ID,
                         f"a layer id (an integer from 0 to {MAX_LAYER_ID})") for i, v in enumerate(ids))
    return out  # an id may repeat: speculators' default for a six-layer model is [2, 3, 3, 5]


def _hidden_size(data: Any) -> int | None:
    section = _section(data, "model")
    if section is None or section.get("hidden_size") is None:
        return None
    return _integer("model.hidden_size", section["hidden_size"], 1, MAX_HIDDEN_SIZE,
                    f"a hidden size (an integer from 1 to {MAX_HIDDEN_SIZE})")


@dataclass(frozen=True)
class Conflict:
    """A flag that says otherwise than ``data_config.json``: both sides, and which one the run went by."""

    flag: Expected
    """The flag's value; its source is the flag (``--layer-ids``)."""
    config: Expected
    """What ``data_config.json`` states; its source names the key and the file."""
    path: Path | str
    """The ``data_config.json``: a finding about the dataset is keyed to it."""
    overridden: bool
    """``--override-data-config``: the flag won."""


def _against_config(flag: str, value: Any, config_value: Any, key: str, data_config: DataConfig | None,
                    override: bool, conflicts: list[Conflict]) -> Expected | None:
    """What a flag states, unless ``data_config.json`` states otherwise and is not overridden: then the file's
    value; either way the disagreement is added to ``conflicts``."""
    if value is None:
        return None
    if data_config is None or config_value is None or value == config_value:
        return Expected(value, flag)
    shown = list(config_value) if isinstance(config_value, tuple) else config_value
    config = Expected(config_value, f"{key} {shown} in {data_config.path}")
    conflicts.append(Conflict(Expected(value, flag), config, data_config.path, override))
    if not override:
        return Expected(config_value, f"{key} in {data_config.path}")
    return Expected(value, f"{flag}, overriding {config.source} (--override-data-config)")


def build(*, hidden_size: int | None = None, dtype: str | None = None, layers: int | None = None,
          layer_ids: tuple[int, ...] | None = None, model: ModelInfo | None = None,
          data_config: DataConfig | None = None, override_data_config: bool = False,
          model_flag: str = "--model") -> tuple[Expectations, tuple[Conflict, ...]]:
    """Combine flags, model config and data_config.json, and say where a flag contradicts data_config.json;
    flags that contradict each other raise CompatError. The model's config (``model_flag`` names the flag that
    gave it) is held to data_config.json as a flag is: a model whose hidden size is not the one the data was
    written with is the wrong model, or the file is wrong."""
    if layers is not None and layer_ids is not None and len(layer_ids) != layers:
        raise CompatError(f"--layers {layers} contradicts --layer-ids (which names {len(layer_ids)})")
    conflicts: list[Conflict] = []
    dc = data_config
    stated_hidden = _against_config("--hidden-size", hidden_size, dc.hidden_size if dc else None,
                                    "model.hidden_size", dc, override_data_config, conflicts)
    stated_ids = _against_config("--layer-ids", tuple(layer_ids) if layer_ids is not None else None,
                                 dc.layer_ids if dc else None, "hidden_states.layer_ids", dc, override_data_config,
                                 conflicts)
    if layer_ids is None:
        stated_layers = _against_config("--layers", layers, len(dc.layer_ids) if dc and dc.layer_ids else None,
                                        "the count of hidden_states.layer_ids", dc, override_data_config, conflicts)
    else:  # --layers, if given, agrees with --layer-ids: the count follows the ids that won
        stated_layers = None
    out: dict[str, Any] = {}
    if stated_hidden is not None:
        out["hidden_size"] = stated_hidden
    elif model is not None and model.hidden_size:
        size, stated = int(model.hidden_size), dc.hidden_size if dc else None
        out["hidden_size"] = Expected(size, f"hidden_size in {model.path}") if stated in (None, size) else \
            _against_config(f"{model_flag} (hidden_size in {model.path})", size, stated, "model.hidden_size", dc,
                            override_data_config, conflicts)
    elif data_config is not None and data_config.hidden_size:
        out["hidden_size"] = Expected(int(data_config.hidden_size), f"model.hidden_size in {data_config.path}")
    if dtype is not None:
        out["dtype"] = Expected(canonical_dtype(dtype), "--dtype")
    elif model is not None and model.dtype and not (data_config is not None and model.dtype == "float32"):
        out["dtype"] = Expected(model.dtype, f"dtype in {model.path}")
    elif model is not None and model.dtype:
        out["dtype_unstated"] = (f"the model's {model.dtype} ({model.path}) is run by vLLM's dtype='auto' "
                                 "(speculators' generator) in the platform's preferred dtype, which no file records")
    # A speculators dataset (its data_config.json) was written by a generator that builds its engine with
    # ModelConfig(dtype="auto") (speculators 0.3.0, vllm_hidden_states_generator.py), and vLLM's auto runs a float32
    # checkpoint in the platform's preferred dtype (vllm/config/model.py, _resolve_auto_dtype: bfloat16 where the
    # platform supports it), which neither the checkpoint nor data_config.json records: the dataset's own dtype is
    # expected then (fill_from_dataset), and samples that differ from it still stand out.
    if stated_ids is not None:
        out["layer_ids"] = stated_ids
    elif data_config is not None and data_config.layer_ids:
        out["layer_ids"] = Expected(data_config.layer_ids, f"hidden_states.layer_ids in {data_config.path}")
    if stated_layers is not None:
        out["layers"] = stated_layers
    elif "layer_ids" in out:
        ids = out["layer_ids"]
        out["layers"] = Expected(len(ids.value), ids.source)
    if model is not None and model.vocab_size:
        out["vocab_size"] = Expected(int(model.vocab_size), f"vocab_size in {model.path}")
    if model is not None and model.model_type:
        out["model_type"] = Expected(model.model_type, f"model_type in {model.path}")
    if model is not None and model.num_layers and "layer_ids" in out:
        # vLLM numbers the states entering each layer, 0 (embeddings) to n - 1, and n for the last layer's output
        # (before the final norm, what its hidden-state connector and speculators >= 0.5 capture as the verifier's
        # last layer): n is an id there. speculators 0.3.0's output numbering has no id n; a sample of its layout
        # with one is judged by the reference (no such state).
        bad = [i for i in out["layer_ids"].value if not 0 <= i <= model.num_layers]
        if bad:
            raise CompatError(f"layer ids {bad} ({out['layer_ids'].source}) are outside the model's "
                              f"{model.num_layers} decoder layers (0 to {model.num_layers}: the states entering each "
                              "layer, and the last one's output)")
    return Expectations(**out), tuple(conflicts)


def _majority(values: list, label: str, why: str | None = None) -> Expected | None:
    if not values:
        return None
    value, n = Counter(values).most_common(1)[0]
    return Expected(value, f"what {n} of {len(values)} samples have; " + (why or f"no {label} was given"))


def fill_from_dataset(exp: Expectations, samples: list[SampleView]) -> Expectations:
    """Expectations nobody stated are taken from the dataset's majority, so outliers still stand out."""
    sound = [s for s in samples if s.layers and all(len(t.shape) == 2 for t in s.layers)]
    changes: dict[str, Any] = {}
    if exp.layers is None:
        changes["layers"] = _majority([s.numbered for s in samples if s.layers], "--layers")
    if exp.hidden_size is None:
        changes["hidden_size"] = _majority([s.layers[0].shape[-1] for s in sound], "--hidden-size or --model")
    if exp.dtype is None:
        changes["dtype"] = _majority([s.layers[0].dtype for s in sound], "--dtype or --model", exp.dtype_unstated)
    return replace(exp, **{k: v for k, v in changes.items() if v is not None})
