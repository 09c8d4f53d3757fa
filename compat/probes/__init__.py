"""``compat.probes`` in a source checkout: loads the repository's ``probes/`` package under this name.

The probes live in the top-level ``probes/`` directory of the repository and install as ``compat.probes``:
the wheel maps the package onto that directory (``[tool.setuptools.package-dir]`` in pyproject.toml), so an
installed ``compat/probes/`` holds ``probes/``'s own files and this module is not in the wheel.

A checkout has no such mapping where the code runs: ``python -m pytest`` from the repository root puts
``./compat`` first on ``sys.path``, the child processes and the older engines' environments import the tool
through ``PYTHONPATH=<checkout>`` with nothing installed, and setuptools' editable finder (``pip install
-e .``) is consulted only after that path search has found this directory. So this stand-in is unavoidable
there; it loads ``probes/__init__.py`` as ``compat.probes`` with importlib's documented way of importing a
source file (``spec_from_file_location`` with ``submodule_search_locations``: the package's modules are
then found in ``probes/``) and leaves that module in ``sys.modules`` in its own place, which the import
system returns (the import reference, "Loading"). Its presence also makes ``packages.find`` list
``compat.probes``, whose files the mapping then takes from ``probes/``.
"""

import importlib.util
import sys
from pathlib import Path

_real = Path(__file__).resolve().parents[2] / "probes"
if not (_real / "__init__.py").is_file():
    raise ImportError(f"compat.probes: {_real / '__init__.py'} is missing (a checkout without probes/?)")
_spec = importlib.util.spec_from_file_location(__name__, _real / "__init__.py",
                                               submodule_search_locations=[str(_real)])
_module = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _module
_spec.loader.exec_module(_module)
