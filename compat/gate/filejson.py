"""A per-file result (``compat.gate.filestep.FileResult``) as JSON and back, for the state file
(``compat.gate.state``): explicit, never pickle, since a state file may come from elsewhere.

Every value comes back equal to the one encoded: floats as JSON numbers (Python writes the shortest text that
reads back to the same float, and ``NaN``/``Infinity`` as such), tuples as lists, enums by value, the first rows
``--values`` keeps per sample (``value_stats.Prefix``, float32) as base64 of their little-endian bytes. Fields at
their default are left out. Data that is not what the encoder writes raises ``ValueError`` (or ``KeyError``,
``TypeError``): the state file then reads that file again.
"""

from __future__ import annotations

import base64
from typing import Any

from compat.gate.filestep import FileResult
from compat.gate.read.layouts import Layout
from compat.gate.read.tensors import TensorInfo
from compat.gate.read.views import EntryFault, FailureKind, FileView, ReadFailure, SampleView
from compat.gate.value_stats import FileValues, LayerStats, Prefix, SampleValues

# -- encoding ------------------------------------------------------------------------------------------------------


def encode_result(result: FileResult) -> dict[str, Any]:
    """``result`` as JSON-able data (its path is the state record's own, not repeated here)."""
    view = result.view
    out: dict[str, Any] = {"size": view.size}
    if view.samples:
        out["samples"] = [_sample(s, view.path) for s in view.samples]
    if view.failure is not None:
        out["failure"] = _failure(view.failure)
    if result.values is not None:
        position = {id(s): i for i, s in enumerate(view.samples)}
        out["values"] = _file_values(result.values, position)
    return out


def _tensor(t: TensorInfo | None) -> list | None:
    """``[key, dtype, shape, item, columns]``: the most numerous record, kept short."""
    if t is None:
        return None
    return [t.key, t.dtype, list(t.shape), t.item, list(t.columns) if isinstance(t.columns, tuple) else t.columns]


def _sample(s: SampleView, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"layout": s.layout.value, "layers": [_tensor(t) for t in s.layers]}
    if s.file != path:
        out["file"] = s.file
    if s.index is not None:
        out["index"] = s.index
    if s.token_ids is not None:
        out["token_ids"] = _tensor(s.token_ids)
    if s.stacked is not None:
        out["stacked"] = _tensor(s.stacked)
    if s.loss_mask is not None:
        out["loss_mask"] = _tensor(s.loss_mask)
    if s.faults:
        out["faults"] = [[f.entry, f.message, f.fix] for f in s.faults]
    return out


def _failure(f: ReadFailure) -> dict[str, Any]:
    out = {"kind": f.kind.value, "message": f.message, "error_type": f.error_type}
    if f.traceback is not None:
        out["traceback"] = f.traceback
    if f.fix is not None:
        out["fix"] = f.fix
    return out


_LAYER_FIELDS = ("nan", "inf", "first_bad", "rows", "zero_rows", "first_zero", "tiny_rows", "first_tiny",
                 "median_rms", "spread", "repeated_rows", "first_repeated")
_LAYER_DEFAULTS = {name: getattr(LayerStats(), name) for name in _LAYER_FIELDS}


def _layer(s: LayerStats) -> dict[str, Any]:
    out = {name: getattr(s, name) for name in _LAYER_FIELDS if getattr(s, name) != _LAYER_DEFAULTS[name]}
    if s.by_position:
        out["by_position"] = [list(b) for b in s.by_position]
    return out


def _prefix(p: Prefix) -> dict[str, Any]:
    rows = p.rows.astype("<f4")
    return {"ids": list(p.ids), "shape": list(rows.shape), "f32": base64.b64encode(rows.tobytes()).decode("ascii")}


def _file_values(v: FileValues, position: dict[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"bytes_read": v.bytes_read, "samples": [_sample_values(s, position) for s in v.samples]}
    if v.failure is not None:
        out["failure"] = _failure(v.failure)
    return out


def _sample_values(s: SampleValues, position: dict[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"sample": position[id(s.view)], "layers": [_layer(x) for x in s.layers],
                           "bytes_read": s.bytes_read}
    if s.identical:
        out["identical"] = [list(g) for g in s.identical]
    if s.token_range is not None:
        out["token_range"] = list(s.token_range)
    if s.mask_values:
        out["mask_values"] = list(s.mask_values)
    if s.mask_all_zero is not None:
        out["mask_all_zero"] = s.mask_all_zero
    if s.prefix is not None:
        out["prefix"] = _prefix(s.prefix)
    return out


# -- decoding ------------------------------------------------------------------------------------------------------


def decode_result(path: str, data: dict[str, Any]) -> FileResult:
    """The ``FileResult`` of ``path`` that ``encode_result`` wrote as ``data``."""
    samples = tuple(_decode_sample(s, path) for s in data.get("samples", ()))
    failure = _decode_failure(data["failure"]) if "failure" in data else None
    view = FileView(path, _int(data["size"]), samples, failure)
    values = _decode_file_values(data["values"], samples) if "values" in data else None
    return FileResult(view, values)


def _int(x: Any) -> int:
    if type(x) is not int:
        raise ValueError(f"not an integer: {x!r}")
    return x


def _opt_int(x: Any) -> int | None:
    return None if x is None else _int(x)


def _str(x: Any) -> str:
    if type(x) is not str:
        raise ValueError(f"not a string: {x!r}")
    return x


def _opt_str(x: Any) -> str | None:
    return None if x is None else _str(x)


def _decode_tensor(t: list | None) -> TensorInfo | None:
    if t is None:
        return None
    key, dtype, shape, item, columns = t
    if isinstance(columns, list):
        start, stop = columns
        columns = (_int(start), _int(stop))
    else:
        columns = _opt_int(columns)
    return TensorInfo(_str(key), _str(dtype), tuple(map(_int, shape)), _opt_int(item), columns)


def _decode_sample(s: dict[str, Any], path: str) -> SampleView:
    decoded = [_decode_tensor(t) for t in s["layers"]]
    layers = tuple(t for t in decoded if t is not None)
    if len(layers) < len(decoded):
        raise ValueError("a layer that is no tensor")
    faults = tuple(EntryFault(_str(e), _str(m), _opt_str(f)) for e, m, f in s.get("faults", ()))
    return SampleView(_str(s.get("file", path)), _opt_int(s.get("index")), Layout(s["layout"]),
                      _decode_tensor(s.get("token_ids")), layers,
                      _decode_tensor(s.get("stacked")), _decode_tensor(s.get("loss_mask")), faults)


def _decode_failure(f: dict[str, Any]) -> ReadFailure:
    return ReadFailure(FailureKind(f["kind"]), _str(f["message"]), _str(f["error_type"]),
                       _opt_str(f.get("traceback")), _opt_str(f.get("fix")))


def _number(x: Any) -> float:
    if type(x) not in (int, float):
        raise ValueError(f"not a number: {x!r}")
    return x


def _decode_layer(d: dict[str, Any]) -> LayerStats:
    s = LayerStats()
    for name, value in d.items():
        if name == "by_position":
            s.by_position = tuple((_int(b), _int(n), _number(m)) for b, n, m in value)
        elif name in ("median_rms", "spread"):
            setattr(s, name, _number(value))
        elif name in _LAYER_DEFAULTS:
            setattr(s, name, _opt_int(value))
        else:
            raise ValueError(f"no layer statistic {name!r}")
    return s


def _decode_prefix(d: dict[str, Any]) -> Prefix:
    import numpy as np

    shape = tuple(map(_int, d["shape"]))
    rows = np.frombuffer(base64.b64decode(_str(d["f32"]), validate=True), dtype="<f4")
    return Prefix(tuple(map(_int, d["ids"])), rows.astype(np.float32).reshape(shape))


def _decode_sample_values(d: dict[str, Any], samples: tuple[SampleView, ...]) -> SampleValues:
    token_range = d.get("token_range")
    mask_values = d.get("mask_values", ())
    if any(type(m) not in (bool, int, float) for m in mask_values):
        raise ValueError("a mask value that is no number")
    mask_all_zero = d.get("mask_all_zero")
    if mask_all_zero is not None and type(mask_all_zero) is not bool:
        raise ValueError(f"mask_all_zero: {mask_all_zero!r}")
    return SampleValues(
        samples[_int(d["sample"])], tuple(_decode_layer(x) for x in d["layers"]),
        tuple(tuple(map(_int, g)) for g in d.get("identical", ())),
        (_int(token_range[0]), _int(token_range[1])) if token_range is not None else None,
        tuple(mask_values), mask_all_zero, _int(d["bytes_read"]),
        _decode_prefix(d["prefix"]) if "prefix" in d else None)


def _decode_file_values(d: dict[str, Any], samples: tuple[SampleView, ...]) -> FileValues:
    return FileValues(tuple(_decode_sample_values(s, samples) for s in d["samples"]),
                      _decode_failure(d["failure"]) if "failure" in d else None, _int(d["bytes_read"]))
