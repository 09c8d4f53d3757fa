"""Stored tensors as numpy arrays, for ``--values``: its statistics are a few dozen operations on small arrays per
sample, and numpy's cost per call is a fifth of torch's, whose import a worker also saves (2-3 s).

An array holds the stored bytes as the numpy dtype of the same width (``STORAGE``: bfloat16 and the float8 kinds,
which numpy lacks, as unsigned integers); ``floats`` gives their values as float32, exactly as torch's
``.float()`` does (every stored float but float64 is exact in float32; float64 rounds, as there)."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

STORAGE = {"bool": np.dtype("?"), "uint8": np.dtype("u1"), "int8": np.dtype("i1"), "int16": np.dtype("<i2"),
           "uint16": np.dtype("<u2"), "int32": np.dtype("<i4"), "uint32": np.dtype("<u4"), "int64": np.dtype("<i8"),
           "uint64": np.dtype("<u8"), "float16": np.dtype("<f2"), "bfloat16": np.dtype("<u2"),
           "float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "float8_e4m3fn": np.dtype("u1"),
           "float8_e5m2": np.dtype("u1"), "float8_e8m0fnu": np.dtype("u1"), "complex64": np.dtype("<c8")}
"""Each stored dtype (torch's names, as ``tensors.ITEMSIZE``) as the numpy dtype holding its bytes (little-endian:
safetensors' order, and a torch archive's once ``torch_load`` checked it is this machine's)."""


def frombuffer(data: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """The stored bytes ``data`` as an array of ``dtype``'s storage, ``shape``."""
    return np.frombuffer(data, dtype=STORAGE[dtype]).reshape(shape)


def floats(x: np.ndarray, dtype: str) -> np.ndarray:
    """The values of ``x`` (stored ``dtype``, as ``STORAGE`` holds it) as float32."""
    if dtype == "bfloat16":
        wide = x.astype(np.uint32)
        wide <<= 16  # bfloat16 is float32's upper half
        return wide.view(np.float32)
    if dtype.startswith("float8"):
        return _float8(dtype)[x]
    return x.astype(np.float32)


def values(x: np.ndarray, dtype: str) -> np.ndarray:
    """The values of ``x`` (stored ``dtype``) in a numpy dtype that holds them: bfloat16 and float8 as float32, the
    rest as stored."""
    return floats(x, dtype) if dtype == "bfloat16" or dtype.startswith("float8") else x


def from_torch(t: Any) -> np.ndarray:
    """A torch tensor (what ``torch.load`` gave, for files its fallback reads) as its storage array."""
    import torch

    t = t.detach().cpu().contiguous()
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype == "bfloat16":
        return t.view(torch.int16).numpy().view(np.uint16)
    if dtype.startswith("float8"):
        return t.view(torch.uint8).numpy()
    return t.numpy()


@cache
def _float8(dtype: str) -> np.ndarray:
    """Every byte's float32 value in ``dtype`` (a table of 256), by the formats' definitions: e4m3fn (bias 7, no
    infinities, S.1111.111 NaN), e5m2 (bias 15, IEEE-like), e8m0fnu (a power of two, bias 127, 0xFF NaN)."""
    byte = np.arange(256, dtype=np.int64)
    if dtype == "float8_e8m0fnu":
        out = np.ldexp(1.0, byte - 127)
        out[255] = np.nan
        return out.astype(np.float32)
    exponent_bits, bias = (4, 7) if dtype == "float8_e4m3fn" else (5, 15)
    mantissa_bits = 7 - exponent_bits
    sign = np.where(byte & 0x80, -1.0, 1.0)
    exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = byte & ((1 << mantissa_bits) - 1)
    normal = np.ldexp(1.0 + mantissa / (1 << mantissa_bits), exponent - bias)
    subnormal = np.ldexp(mantissa / (1 << mantissa_bits), 1 - bias)
    out = sign * np.where(exponent == 0, subnormal, normal)
    top = exponent == (1 << exponent_bits) - 1
    if dtype == "float8_e4m3fn":
        out[top & (mantissa == (1 << mantissa_bits) - 1)] = np.nan
    else:
        out[top] = np.where(mantissa[top] == 0, sign[top] * np.inf, np.nan)
    return out.astype(np.float32)
