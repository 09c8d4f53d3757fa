"""Read a ``torch.save`` file's structure without loading tensors: the zip directory and ``data.pkl`` only.

``torch.save`` writes a zip archive: ``<name>/data.pkl`` (a pickle whose tensors refer to storages by key)
and one ``<name>/data/<key>`` entry per storage. This reader unpickles ``data.pkl`` with an allow-list of
exactly the globals ``torch.save`` emits for plain tensors (``torch._utils._rebuild_tensor_v2``, typed
storage classes, ``collections.OrderedDict``), turning each tensor into a ``TensorStub`` (dtype, shape), and
checks each storage entry is present and large enough. Anything else (another global, a legacy file, a
damaged archive) raises ``NotPlain``, and the caller falls back to ``torch.load(weights_only=True)``, the
authority on what loads. Costs about a tenth of ``torch.load(mmap=True)`` per small file.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from math import prod

from compat.gate.read.tensors import ITEMSIZE

# torch's typed-storage class names (what torch.save pickles) -> dtype names.
_STORAGES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool",
}


class NotPlain(Exception):
    """Not a plain tensor archive this reader vouches for; use torch.load."""


@dataclass(frozen=True, slots=True)
class TensorStub:
    """Stands for a tensor: what ``samples`` reads of one (``shape``, ``dtype``)."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Storage:
    dtype: str
    key: str
    numel: int


class _StorageType:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def _rebuild_tensor_v2(storage, offset, size, stride, *_rest) -> TensorStub:
    if not isinstance(storage, _Storage):
        raise NotPlain("tensor without a storage reference")
    shape = tuple(int(d) for d in size)
    # The furthest element the view reaches must lie inside its storage.
    last = offset + sum((d - 1) * s for d, s in zip(shape, stride)) if prod(shape) else offset - 1
    if last >= storage.numel:
        raise NotPlain(f"tensor view reaches element {last} of a {storage.numel}-element storage")
    return TensorStub(f"torch.{storage.dtype}", shape)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch" and name in _STORAGES:
            return _StorageType(_STORAGES[name])
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise NotPlain(f"global {module}.{name} is not a plain tensor's")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise NotPlain(f"unexpected persistent id {pid!r:.80}")
        storage = _Storage(pid[1].dtype, str(pid[2]), int(pid[4]))
        self.storages[storage.key] = storage
        return storage


def read_structure(path: str):
    """The object ``torch.save`` stored, with ``TensorStub`` for each tensor; raises NotPlain otherwise."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            pkl = next((name for name in infos if name.endswith("/data.pkl") and name.count("/") == 1), None)
            if pkl is None:
                raise NotPlain("no data.pkl in the archive")
            unpickler = _Unpickler(archive.read(pkl))
            obj = unpickler.load()
    except (zipfile.BadZipFile, OSError, EOFError, pickle.UnpicklingError, ValueError, KeyError) as exc:
        raise NotPlain(f"{type(exc).__name__}: {exc}") from exc
    prefix = pkl[: -len("data.pkl")]
    for storage in unpickler.storages.values():
        info = infos.get(f"{prefix}data/{storage.key}")
        need = storage.numel * ITEMSIZE[storage.dtype]
        if info is None or info.file_size < need:
            raise NotPlain(f"storage {storage.key} missing or short")
    return obj
