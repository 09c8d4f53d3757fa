"""Lazy access to the tensor data of samples already described by their header: token ids, loss mask, and row
ranges of every layer. Files are memory-mapped (safetensors slices, ``torch.load(mmap=True)``; a deflated
``torch.save`` archive is inflated on demand, ``torch_load.open_values``), so a large sample never sits in memory
whole."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from compat.gate.read.files import read_file
from compat.gate.read.layouts import Layout
from compat.gate.read.paths import openable
from compat.gate.read.torch_load import open_values
from compat.gate.read.views import FileView, SampleView


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
        import torch

        v = self.view
        if v.stacked is not None:
            return self._get(v.stacked.key)[start:stop]
        if v.layout is Layout.SPECULATORS_PT:
            layers = self._get(v.layout.layers_key)
            return torch.stack([layers[i][start:stop] for i in range(len(v.layers))], dim=1)
        out = []
        for t in v.layers:  # eagle: hidden_state (or column ranges of it), then target
            if t.columns is None:
                out.append(self._get(t.key)[start:stop])
            else:
                lo, hi = t.columns
                out.append(self._get(t.key)[start:stop, lo:hi])
        return torch.stack(out, dim=1)

    def part(self, start: int, stop: int, lo: int, hi: int, c0: int, c1: int):
        """Rows ``start:stop`` of layers ``lo:hi``, columns ``c0:c1``, as ``[rows, layers, columns]``: only those
        bytes are read (a wide row need not be read whole)."""
        import torch

        v = self.view
        whole = lo == 0 and hi == len(v.layers) and c0 == 0 and c1 == v.layers[0].shape[-1]
        if whole:
            return self.block(start, stop)
        if v.stacked is not None:
            return self._get(v.stacked.key)[start:stop, lo:hi, c0:c1]
        if v.layout is Layout.SPECULATORS_PT:
            layers = self._get(v.layout.layers_key)
            return torch.stack([layers[i][start:stop, c0:c1] for i in range(lo, hi)], dim=1)
        out = []
        for t in v.layers[lo:hi]:
            first = t.columns[0] if isinstance(t.columns, tuple) else 0
            out.append(self._get(t.key)[start:stop, first + c0:first + c1])
        return torch.stack(out, dim=1)

    def layer(self, i: int):
        """Layer ``i`` whole, ``[T, hidden]``: only its bytes are read."""
        rows, hidden = self.view.layers[i].shape
        return self.part(0, rows, i, i + 1, 0, hidden)[:, 0]


@contextmanager
def open_file(file: FileView) -> Iterator[list[SampleTensors]]:
    """The samples of ``file`` with lazy tensor access (header already read into ``file.samples``)."""
    if file.path.endswith(".safetensors"):
        from safetensors import safe_open

        with openable(file.path) as path, safe_open(path, framework="pt") as handle:
            yield [SampleTensors(s, handle.get_slice) for s in file.samples]
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
