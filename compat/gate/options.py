"""``GateOptions``: what one gate run is asked to do (``python -m compat.gate`` flags, or built in Python)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.gate.read.layouts import Layout


@dataclass(frozen=True)
class GateOptions:
    paths: tuple[Path | str, ...]
    """Local paths, or URLs of any fsspec protocol (``s3://bucket/prefix``: ``compat.gate.read.source``)."""
    layout: Layout | None = None
    model: Path | None = None
    hidden_size: int | None = None
    dtype: str | None = None
    layers: int | None = None
    layer_ids: tuple[int, ...] | None = None
    override_data_config: bool = False
    """Flags that contradict data_config.json win (without it the file wins and the contradiction fails)."""
    values: bool = False
    nonfinite: str = "fail"
    reference: Path | None = None
    reference_samples: int = 4
    reference_device: str = "cpu"
    layer_numbering: str = "auto"
    max_rel: float | None = None
    min_cos: float | None = None
    ignore: frozenset[str] = field(default_factory=frozenset)
    strict: bool = False
    storage_options: tuple[tuple[str, Any], ...] = ()
    """``--storage-option KEY=VALUE``: for the filesystem of every URL. Not in the report (it may hold secrets)."""
    jobs: int = 1
    """Processes that read files (``--jobs``; 1: this one). How the files are read changes nothing reported, so
    neither this nor ``state`` is among the report's ``options``."""
    state: Path | None = None
    """``--state``: record each checked file there, and take unchanged files' results from it."""
    follow_links: bool = False
    """``--follow-links``: read what links lead to outside the roots given (never ``/proc``, ``/sys``, ``/dev``)."""
    ray: str | None = None
    """``--ray [ADDRESS]``: read the files as tasks on this Ray cluster (``""``: Ray's default, ``RAY_ADDRESS`` or a
    local one; ``compat.gate.raytasks``), ``jobs`` aside. Not in the report either."""

    def as_dict(self) -> dict[str, Any]:
        """The report's ``options`` (schema ``compat.gate/1``)."""
        return {"layout": self.layout.value if self.layout else "auto", "values": self.values,
                "override_data_config": self.override_data_config,
                "nonfinite": self.nonfinite, "reference": str(self.reference) if self.reference else None,
                "reference_samples": self.reference_samples,
                "reference_device": self.reference_device, "layer_numbering": self.layer_numbering,
                "ignore": sorted(self.ignore), "strict": self.strict, "follow_links": self.follow_links}
