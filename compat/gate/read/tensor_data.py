"""Lazy access to the tensor data of samples already described by their header: token ids, loss mask, and row
ranges of every layer. Only the bytes asked for are read (``FileTensor`` for a safetensors file, and for a
``torch.save`` archive ``torch_load.open_values``: read or inflated on demand), so reading a sample takes no more
memory, nor address space, than its largest part: a sample larger than the memory the gate may use is read."""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from math import prod
from typing import TYPE_CHECKING, Any

from compat.gate.read.files import read_file
from compat.gate.read.layouts import Layout
from compat.gate.read.safetensors_header import read_header, read_header_at
from compat.gate.read.samples import VLLM_TENSORS
from compat.gate.read.source import RemoteFile, is_url, open_remote
from compat.gate.read.tensors import ITEMSIZE, TensorInfo
from compat.gate.read.torch_load import InflatedTensor, open_values
from compat.gate.read.views import FileView, SampleView

if TYPE_CHECKING:  # numpy is imported where values are read as arrays: header mode runs without it
    import numpy as np


class SampleTensors:
    """One sample's tensors, read on demand."""

    def __init__(self, view: SampleView, get: Any) -> None:
        self.view = view
        self._get = get  # name -> tensor (memory-mapped) or safetensors slice

    def token_ids(self):
        return self._get(self.view.layout.ids_key)[:]

    def loss_mask(self):
        return self._get("loss_mask")[:] if self.view.loss_mask is not None else None

    def block(self, start: int, stop: int):
        """Rows ``start:stop`` of every layer as one ``[rows, n_layers, hidden]`` tensor, stored dtype."""
        return self.part(start, stop, 0, len(self.view.layers), 0, self.view.layers[0].shape[-1])

    def part(self, start: int, stop: int, lo: int, hi: int, c0: int, c1: int):
        """Rows ``start:stop`` of layers ``lo:hi``, columns ``c0:c1``, as ``[rows, layers, columns]``: only those
        bytes are read (a wide row need not be read whole)."""
        import torch

        return self._part(start, stop, lo, hi, c0, c1, lambda t, index: t[index], lambda xs: torch.stack(xs, dim=1))

    def layer(self, i: int):
        """Layer ``i`` whole, ``[T, hidden]``: only its bytes are read."""
        rows, hidden = self.view.layers[i].shape
        return self.part(0, rows, i, i + 1, 0, hidden)[:, 0]

    # The same as numpy arrays of the stored dtype's storage (``arrays.STORAGE``), for ``--values``: no torch is
    # imported where the file is read by the gate's own readers.

    def token_ids_array(self) -> np.ndarray:
        """The token ids' values (``arrays.values``: a numpy dtype that holds them)."""
        return self._values(self.view.layout.ids_key, self.view.token_ids)

    def loss_mask_array(self) -> np.ndarray | None:
        return self._values("loss_mask", self.view.loss_mask) if self.view.loss_mask is not None else None

    def _values(self, key: str, info: TensorInfo | None) -> np.ndarray:
        from compat.gate.read.arrays import values

        stored = _array(self._get(key), (slice(None),))
        return values(stored, info.dtype) if info is not None else stored

    def part_array(self, start: int, stop: int, lo: int, hi: int, c0: int, c1: int) -> np.ndarray:
        import numpy as np

        return self._part(start, stop, lo, hi, c0, c1, _array, lambda xs: np.stack(xs, axis=1))

    def _part(self, start: int, stop: int, lo: int, hi: int, c0: int, c1: int, take: Any, stack: Any):
        v = self.view
        rows = slice(start, stop)
        whole = lo == 0 and hi == len(v.layers) and c0 == 0 and c1 == v.layers[0].shape[-1]
        if v.stacked is not None:
            return take(self._get(v.stacked.key), (rows,) if whole else (rows, slice(lo, hi), slice(c0, c1)))
        if v.layout is Layout.SPECULATORS_PT:
            layers = self._get(v.layout.layers_key)
            return stack([take(layers[i], (rows, slice(c0, c1))) for i in range(lo, hi)])
        out = []
        for t in v.layers[lo:hi]:  # eagle: hidden_state (or column ranges of it), then target
            if isinstance(t.columns, int):  # a column of vLLM's stacked tensor, never an EAGLE layer
                raise TypeError(f"{t.key}: a single column in an EAGLE layout")
            first = t.columns[0] if t.columns is not None else 0
            out.append(take(self._get(t.key), (rows, slice(first + c0, first + c1))))
        return stack(out)


def _array(tensor: Any, index: tuple) -> np.ndarray:
    """``tensor[index]`` as a storage array: read so by the gate's readers, converted from torch's tensors."""
    if isinstance(tensor, (FileTensor, InflatedTensor)):
        return tensor.array(index)
    from compat.gate.read.arrays import from_torch

    return from_torch(tensor[index])


class FileTensor:
    """A row-major tensor at a byte offset of an open file, read by ``os.pread`` of exactly the bytes an index of
    slices asks (``t[a:b]``, ``t[a:b, lo:hi, c0:c1]``): one read when they lie together, else one per run of
    adjacent bytes. Nothing is mapped, so a part costs its own size in memory and address space."""

    def __init__(self, fd: int, offset: int, dtype: str, shape: tuple[int, ...]) -> None:
        self.shape, self.stored = shape, dtype
        self._fd, self._offset, self._itemsize = fd, offset, ITEMSIZE[dtype]
        strides, step = [], 1
        for size in reversed(shape):
            strides.append(step)
            step *= size
        self._strides = tuple(reversed(strides))

    def __getitem__(self, index):
        """The slices ``index`` as a torch tensor."""
        import torch

        data, sizes = self._bytes(index)
        dtype = getattr(torch, self.stored)
        return torch.frombuffer(data, dtype=dtype).view(sizes) if data else torch.empty(sizes, dtype=dtype)

    def array(self, index) -> np.ndarray:
        """The slices ``index`` as a numpy array of the stored dtype's storage (``arrays.STORAGE``)."""
        from compat.gate.read.arrays import frombuffer

        data, sizes = self._bytes(index)
        return frombuffer(data, self.stored, tuple(sizes))

    def _bytes(self, index) -> tuple[bytearray, list[int]]:
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > len(self.shape) or any(not isinstance(i, slice) or i.step not in (None, 1) for i in index):
            raise IndexError(f"{index!r}: only slices of step 1 are read from the file")
        starts, sizes = [], []
        for size, part in zip(self.shape, index + (slice(None),) * (len(self.shape) - len(index))):
            start, stop, _ = part.indices(size)
            starts.append(start)
            sizes.append(max(0, stop - start))
        if 0 in sizes:
            return bytearray(), sizes
        # The bytes asked lie in runs: dims from the last inward that are asked whole, and part of the next one.
        inner = len(sizes) - 1
        while inner > 0 and sizes[inner] == self.shape[inner]:
            inner -= 1
        run = prod(sizes[inner:]) * self._itemsize
        data = bytearray(run * prod(sizes[:inner]))
        if inner == 0:  # one run (rows of a tensor, or all of it): what --values asks of a sample that fits a part
            self._read(memoryview(data), starts[0] * self._strides[0] * self._itemsize)
            return data, sizes
        at = 0
        with memoryview(data) as view:
            for outer in itertools.product(*(range(a, a + n) for a, n in zip(starts[:inner], sizes[:inner]))):
                first = sum(a * s for a, s in zip((*outer, *starts[inner:]), self._strides))
                self._read(view[at:at + run], first * self._itemsize)
                at += run
        return data, sizes

    def _read(self, into: memoryview, begin: int) -> None:
        got = 0
        while got < len(into):
            more = os.preadv(self._fd, [into[got:]], self._offset + begin + got)
            if not more:
                raise EOFError(f"the file ends at byte {self._offset + begin + got}, inside a tensor its header "
                               "places there: it changed since it was read")
            got += more


class RemoteTensor(FileTensor):
    """A ``FileTensor`` of a file named by URL: each run of adjacent bytes is one range request, its size bounded
    by what the value reader asks at once (``value_stats.CHUNK_BYTES``)."""

    def __init__(self, source: RemoteFile, offset: int, dtype: str, shape: tuple[int, ...]) -> None:
        super().__init__(-1, offset, dtype, shape)
        self._source = source

    def _read(self, into: memoryview, begin: int) -> None:
        self._source.readinto(into, self._offset + begin)


def _tensors(header, make) -> Any:
    cache: dict[str, FileTensor] = {}

    def get(name: str) -> FileTensor:
        if name not in cache:
            info = header.tensors[name]
            cache[name] = make(header.data_start + header.spans[name][0], info.dtype, info.shape)
        return cache[name]

    return get


@contextmanager
def _safetensors(path: str) -> Iterator[Any]:
    """Name -> ``FileTensor`` of the safetensors file at ``path``, its header read again (views keep no offsets)."""
    if "://" in path and is_url(path):
        source = open_remote(path)
        yield _tensors(read_header_at(source, VLLM_TENSORS), lambda *where: RemoteTensor(source, *where))
        return
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is no longer a regular file")
        yield _tensors(read_header(path, VLLM_TENSORS), lambda *where: FileTensor(fd, *where))
    finally:
        os.close(fd)


@contextmanager
def open_file(file: FileView) -> Iterator[list[SampleTensors]]:
    """The samples of ``file`` with lazy tensor access (header already read into ``file.samples``)."""
    if file.path.endswith(".safetensors"):
        with _safetensors(file.path) as get:
            yield [SampleTensors(s, get) for s in file.samples]
        return
    with open_values(file.path) as obj:
        items = obj if isinstance(obj, (list, tuple)) else [obj]
        yield [SampleTensors(s, items[s.index or 0].__getitem__) for s in file.samples]


@contextmanager
def open_sample(view: SampleView) -> Iterator[SampleTensors]:
    """The tensors of one sample, its file read again (views keep no file handles)."""
    file = read_file(view.file, view.layout, view.layers[0].shape[-1] if view.layers else None, view.numbered)
    with open_file(file) as samples:
        yield next(s for s in samples if s.view.index == view.index)
