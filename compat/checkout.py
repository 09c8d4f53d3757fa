"""``compat.probes`` and ``compat.fixers`` in a source checkout: the repository's ``probes/`` and ``fixers/``
packages loaded under those names.

Both live in top-level directories of the repository and install as ``compat.probes`` and ``compat.fixers``: the
wheel maps each package onto its directory (``[tool.setuptools.package-dir]`` in pyproject.toml), so an installed
``compat/probes/`` holds ``probes/``'s own files and the stand-ins that call this are not in the wheel.

A checkout has no such mapping where the code runs: ``python -m pytest`` from the repository root puts
``./compat`` first on ``sys.path``, the child processes and the older engines' environments import the tool
through ``PYTHONPATH=<checkout>`` with nothing installed, and setuptools' editable finder (``pip install -e .``)
is consulted only after that path search has found ``compat/probes/``. So a stand-in is unavoidable there;
``load`` imports the real package's ``__init__.py`` under the stand-in's name with importlib's documented way of
importing a source file (``spec_from_file_location`` with ``submodule_search_locations``: the package's modules
are then found in its directory) and leaves that module in ``sys.modules`` in the stand-in's place, which the
import system returns (the import reference, "Loading"). The stand-ins' presence also makes ``packages.find``
list ``compat.probes`` and ``compat.fixers``, whose files the mapping then takes from ``probes/`` and ``fixers/``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load(name: str) -> None:
    """Import the checkout's top-level package for ``name`` (``compat.probes`` -> ``probes/``) as ``name``."""
    real = Path(__file__).resolve().parents[1] / name.rpartition(".")[2]
    if not (real / "__init__.py").is_file():
        raise ImportError(f"{name}: {real / '__init__.py'} is missing (a checkout without {real.name}/?)")
    spec = importlib.util.spec_from_file_location(name, real / "__init__.py", submodule_search_locations=[str(real)])
    if spec is None or spec.loader is None:  # a .py file always has a spec with a loader
        raise ImportError(f"{name}: no importer for {real / '__init__.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
