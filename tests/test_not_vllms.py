"""What is not vLLM's API is not judged as vLLM's: Python's own names on any object (``cls.__new__``,
``obj.__dict__``), and the ``@overload`` stubs of a vLLM function (a call binds to the implementation)."""

from __future__ import annotations

import pytest

from compat.audit.pipeline import run_probes
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

VLLM = {
    "vllm/__init__.py": "",
    "vllm/_version.py": '__version__ = "9.0.0"\n',
    "vllm/config.py": """
        from typing import overload


        class CacheConfig:
            def __init__(self, block_size: int = 16):
                self.block_size = block_size


        @overload
        def pick(x: int) -> int: ...
        @overload
        def pick(x: str, y: int) -> str: ...
        def pick(x, y=0, *, strict=False):
            return x
    """,
}


def _findings(tmp_path, monkeypatch, use: str):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = open_build(str(write_tree(tmp_path / "vllm", VLLM))).surface
    consumer = write_tree(tmp_path / "c", {"c.py": f"""
        from vllm.config import CacheConfig, pick


        def use():
            cache = CacheConfig(block_size=16)
            {use}
    """})
    return run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "c.py")), surface, None))


@pytest.mark.parametrize("use", ["return cache.__dict__", "return CacheConfig.__new__(CacheConfig)",
                                 "return cache.__class__.__name__"])
def test_pythons_own_names_are_not_vllm_api(tmp_path, monkeypatch, use):
    found = [f for f in _findings(tmp_path, monkeypatch, use) if f.check == "attribute" and "__" in f.symbol]
    assert found and {f.status for f in found} == {Status.OK}, [f.message for f in found]
    assert all("Python's" in f.message for f in found)


@pytest.mark.parametrize(("use", "status"), [
    ("return pick(1, 2, strict=True)", Status.OK),  # only the implementation takes strict=
    ("return pick('a', 2)", Status.OK),
    ("return pick(1, 2, 3)", Status.BROKEN),
    ("return pick(1, mode=2)", Status.BROKEN),
])
def test_a_call_binds_to_the_implementation_not_its_overload_stubs(tmp_path, monkeypatch, use, status):
    found = [f for f in _findings(tmp_path, monkeypatch, use) if f.check == "call" and f.symbol.endswith("pick")]
    assert [f.status for f in found] == [status], [f.message for f in found]
