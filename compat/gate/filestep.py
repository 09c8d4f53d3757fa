"""The gate's per-file step (the map of map and reduce): read one file's header into its views and, with
``--values``, measure its sound samples' values. Nothing here judges: every rule needs what the whole dataset
says (expectations filled from its majority, its layout, its other samples), so judging is the dataset step's
(``compat.gate.runner``).

Its inputs are small and picklable (a path, whether the listing showed a regular file, ``ReadHints``) and so is
its result (``FileResult``), so the step runs the same in the gate's own process (``--jobs 1``) or in a worker
process (``compat.gate.workers``), and its result can be kept in a state file (``compat.gate.state``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compat.gate.read.files import read_file
from compat.gate.read.layouts import Layout
from compat.gate.read.source import is_url, one_check
from compat.gate.read.views import FileView
from compat.gate.value_stats import FileValues, scan_file


@dataclass(frozen=True)
class ReadHints:
    """What the per-file step needs to know of the run: all it is given, so a file's result depends on nothing
    else (a state file records these and refuses to serve a run with others)."""

    layout: Layout | None = None
    """``--layout``: read every file as this layout."""
    hidden_size: int | None = None
    layers: int | None = None
    """Expected hidden size and layer count (flags, model config, data_config.json): they only tell EAGLE-3's
    concatenated layers apart."""
    values: bool = False
    """Measure values too (``--values`` or ``--reference``)."""
    token_range: bool = False
    """Measure each sample's smallest and largest token id (a vocabulary is known to check them against)."""

    def as_dict(self) -> dict[str, Any]:
        return {"layout": self.layout.value if self.layout else None, "hidden_size": self.hidden_size,
                "layers": self.layers, "values": self.values, "token_range": self.token_range}


@dataclass(frozen=True)
class FileResult:
    """One file's per-file result: its view and, when values were measured and it could be read, its values."""

    view: FileView
    values: FileValues | None = None


def check_file(path: str, listed_regular: bool, hints: ReadHints) -> FileResult:
    """Read ``path`` (and with ``hints.values`` measure it); never raises for a bad file."""
    if "://" in path and is_url(path):
        with one_check():  # a file named by URL is looked up once, however many times its readers open it
            return _check(path, listed_regular, hints)
    return _check(path, listed_regular, hints)


def _check(path: str, listed_regular: bool, hints: ReadHints) -> FileResult:
    view = read_file(path, hints.layout, hints.hidden_size, hints.layers, listed_regular)
    if hints.values and view.failure is None:
        return FileResult(view, scan_file(view, hints.token_range))
    return FileResult(view)
