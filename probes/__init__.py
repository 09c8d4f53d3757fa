"""Probes: each module here checks one concern and is found through this registry.

A probe module defines ``PROBE``, an instance of ``compat.probe.Probe``. Adding a probe means
adding one module to this package; nothing else changes.
"""

from __future__ import annotations

from compat.probe import Probe
from compat.registry import collect


def all_probes() -> list[Probe]:
    """Every probe in this package, in registry order (``Probe.order``, then name)."""
    return collect(__name__, __path__, "PROBE", Probe)
