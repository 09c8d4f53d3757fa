"""What the gate knows of a stored tensor without its data: entry, part, dtype, shape; dtype spellings."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from compat.errors import CompatError
from compat.gate.read.pickling import by_fields

# safetensors' dtype codes -> torch's names; the gate speaks torch's names everywhere.
SAFETENSORS_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32", "U32": "uint32",
    "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64",
}
ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
            "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1,
            "float8_e5m2": 1, "float8_e8m0fnu": 1, "complex64": 8}
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"})
INTEGERS = frozenset({"uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64"})

_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "f16": "float16", "fp32": "float32",
            "float": "float32", "f32": "float32", "single": "float32", "fp64": "float64", "double": "float64",
            "long": "int64", "int": "int32"}


def canonical_dtype(name: str) -> str:
    """``torch.bfloat16``, ``bf16``, ``BF16``, ``bfloat16`` -> ``bfloat16``; unknown names raise CompatError."""
    text = str(name).strip().removeprefix("torch.")
    if text in SAFETENSORS_DTYPES:
        return SAFETENSORS_DTYPES[text]
    text = text.lower()
    text = _ALIASES.get(text, text)
    if text not in ITEMSIZE:
        raise CompatError(f"unknown dtype {name!r} (use e.g. bfloat16, float16, float32)")
    return text


@by_fields
@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A stored tensor, or the part of one that holds a layer, as its file describes it.

    ``key`` is the entry in the file; ``item`` or ``columns`` say which part of it this is, as data (the
    value reader slices by them; ``name`` only shows them). ``nbytes`` is what the data occupies on disk.
    """

    key: str
    dtype: str
    shape: tuple[int, ...]
    item: int | None = None
    """``key[item]``: an element of a stored list of tensors (speculators' per-layer list)."""
    columns: int | tuple[int, int] | None = None
    """``key[:, i]`` (one layer of vLLM's stacked ``[T, n_layers, H]``) or ``key[:, start:stop]`` (one of
    EAGLE-3's layers stored side by side in ``[T, n * H]``)."""

    @property
    def name(self) -> str:
        """How messages name it: ``hidden_states[2]``, ``hidden_states[:, 1]``, ``hidden_state[:, 0:64]``."""
        if self.item is not None:
            return f"{self.key}[{self.item}]"
        if isinstance(self.columns, int):
            return f"{self.key}[:, {self.columns}]"
        if self.columns is not None:
            return f"{self.key}[:, {self.columns[0]}:{self.columns[1]}]"
        return self.key

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * ITEMSIZE.get(self.dtype, 0)


def shape_text(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
