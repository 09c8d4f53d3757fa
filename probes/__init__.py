"""Probes: each module here checks one concern and is found through this registry.

A probe module defines ``PROBE``, an instance of ``compat.probe.Probe``. Adding a probe means
adding one module to this package; nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil

from compat.probe import Probe


def all_probes() -> list[Probe]:
    """Every probe in this package, in registry order (``Probe.order``, then name)."""
    found: list[Probe] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        probe = getattr(module, "PROBE", None)
        if isinstance(probe, Probe):
            found.append(probe)
    return sorted(found, key=lambda p: (p.order, p.name))
