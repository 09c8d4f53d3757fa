"""What reading a file yields: ``FileView`` (its samples, or why it could not be read) and ``SampleView``.

Views hold shapes and dtypes only, no tensor data, and judge nothing: what the reader could not make sense of
is recorded as ``EntryFault`` or ``ReadFailure`` for the rules (``compat.gate.rules``) to judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from compat.gate.read.layouts import Layout
from compat.gate.read.pickling import by_fields
from compat.gate.read.tensors import TensorInfo


@by_fields
@dataclass(frozen=True, slots=True)
class EntryFault:
    """An entry of a sample that is missing or not what its layout needs (say, a list where a tensor belongs)."""

    entry: str
    """The entry as the file names it: ``loss_mask``, ``hidden_states[3]``..."""
    message: str
    fix: str | None = None


@by_fields
@dataclass(frozen=True, slots=True)
class SampleView:
    """One stored sample, as its file's header (or pickle skeleton) describes it."""

    file: str
    index: int | None
    """Position in a file holding a list of samples; None for one-sample files."""
    layout: Layout
    token_ids: TensorInfo | None
    layers: tuple[TensorInfo, ...]
    """One per captured layer, in stored order. Stacked files give ``hidden_states[:, i]`` parts."""
    stacked: TensorInfo | None = None
    """vllm-safetensors: the ``[T, n_layers, H]`` tensor itself (its layers are empty when it is not rank 3)."""
    loss_mask: TensorInfo | None = None
    faults: tuple[EntryFault, ...] = ()

    @property
    def tokens(self) -> int | None:
        return self.token_ids.shape[0] if self.token_ids is not None and self.token_ids.shape else None

    @property
    def numbered(self) -> int:
        """Layers that carry a layer id: all but EAGLE-3's ``target`` (the final-norm state, not a captured layer)."""
        if self.layout is not Layout.EAGLE:  # read for every sample by several rules: no loop where none is needed
            return len(self.layers)
        return sum(1 for t in self.layers if t.key != "target")

    @property
    def sound(self) -> bool:
        """Values can be scanned: layers exist, all [T, hidden] with one shape, and T is known."""
        return bool(self.layers) and len({t.shape for t in self.layers}) == 1 and len(self.layers[0].shape) == 2 \
            and self.layers[0].shape[0] > 0 and self.layers[0].shape[1] > 0


class FailureKind(str, Enum):
    UNREADABLE = "unreadable"
    """Damaged, truncated, not a tensor file, or refused (a pickle needing arbitrary objects)."""
    LAYOUT_MISMATCH = "layout mismatch"
    """Read, but no known layout (or not the one ``--layout`` names)."""


@by_fields
@dataclass(frozen=True, slots=True)
class ReadFailure:
    """Why a file (or its tensor values) could not be read: message, exception type, and where (traceback when
    Python raised)."""

    kind: FailureKind
    message: str
    error_type: str
    traceback: str | None = None
    fix: str | None = None
    """What to do about it, when it is not the usual (re-extract the sample)."""


@by_fields
@dataclass(frozen=True, slots=True)
class FileView:
    path: str
    """File paths are strings inside the gate: pathlib costs more than a header read, over 100k files."""
    size: int
    samples: tuple[SampleView, ...] = ()
    failure: ReadFailure | None = None
