"""A use the consumer checks first is not a break: ``getattr(x, "a", None)`` (as is, ``is not None``, under
``callable``) covers ``x.a`` as ``hasattr`` does; an RPC whose method vLLM's worker wrapper defines (it receives
the RPC before the worker) exists. Without the check, or for a name nothing defines, the same code is broken."""

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
        class CacheConfig:
            def __init__(self, block_size: int = 16):
                self.block_size = block_size
    """,
    "vllm/llm.py": """
        class LLM:
            def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
                return []
    """,
    "vllm/v1/__init__.py": "",
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/worker/worker_base.py": """
        class WorkerBase:
            def load_model(self):
                raise NotImplementedError


        class WorkerWrapperBase:
            def init_worker(self, all_kwargs):
                return None
    """,
    "vllm/v1/worker/gpu_worker.py": """
        from vllm.v1.worker.worker_base import WorkerBase


        class Worker(WorkerBase):
            def load_model(self):
                return None
    """,
}

CONSUMER = """
    from vllm.config import CacheConfig
    from vllm.llm import LLM


    def use(engine):
        cache = CacheConfig(block_size=16)
        {use}
"""


@pytest.mark.parametrize(("use", "status"), [
    ("return cache.mamba_block_size", Status.BROKEN),
    ("return cache.mamba_block_size if getattr(cache, 'mamba_block_size', None) is not None else 0", Status.OK),
    ("if callable(getattr(cache, 'mamba_block_size', None)):\n            return cache.mamba_block_size()",
     Status.OK),
    ("if getattr(cache, 'mamba_block_size', 0):\n            return cache.mamba_block_size", Status.OK),
])
def test_getattr_with_a_default_checks_like_hasattr(tmp_path, monkeypatch, use, status):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = open_build(str(write_tree(tmp_path / "vllm", VLLM))).surface
    consumer = write_tree(tmp_path / "c", {"c.py": CONSUMER.format(use=use)})
    findings = [f for f in run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "c.py")), surface, None))
                if "mamba_block_size" in f.symbol]
    assert findings and {f.status for f in findings} == {status}, [f.message for f in findings]


@pytest.mark.parametrize(("method", "status"), [("init_worker", Status.OK), ("load_model", Status.OK),
                                                ("no_such_method", Status.BROKEN)])
def test_an_rpc_the_worker_wrapper_runs_exists(tmp_path, monkeypatch, method, status):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = open_build(str(write_tree(tmp_path / "vllm", VLLM))).surface
    consumer = write_tree(tmp_path / "c", {"c.py": CONSUMER.format(
        use=f"return LLM().collective_rpc({method!r})")})
    findings = [f for f in run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "c.py")), surface, None))
                if f.check == "rpc"]
    assert [f.status for f in findings] == [status], [f.message for f in findings]


REAL_CONSUMER = """
    from vllm import LLM
    from vllm.config import SchedulerConfig


    def chunked(config: SchedulerConfig):
        {use}


    def send(llm: LLM):
        return llm.collective_rpc({method!r}, args=({{}},))
"""


@pytest.mark.network
@pytest.mark.parametrize(("use", "method", "at_0_13"), [
    ("return config.chunked_prefill_enabled", "update_environment_variables", Status.BROKEN),
    ("if getattr(config, 'chunked_prefill_enabled', None) is not None:\n            "
     "return config.chunked_prefill_enabled", "update_environment_variables", Status.OK),
])
def test_checks_first_on_real_releases(tmp_path, use, method, at_0_13):
    """vLLM 0.11.0's SchedulerConfig has ``chunked_prefill_enabled`` (config/scheduler.py:114); 0.13.0's does not.
    ``update_environment_variables`` is defined by WorkerWrapperBase (v1/worker/worker_base.py), which receives
    every RPC before the worker, and by no worker class: an RPC of it exists in both."""
    consumer = write_tree(tmp_path / "c", {"c.py": REAL_CONSUMER.format(use=use, method=method)})
    scan = scan_tree(tree_from_path(consumer / "c.py"))
    for version, expected in (("0.11.0", Status.OK), ("0.13.0", at_0_13)):
        found = run_probes(ProbeContext(scan, open_build(version).surface, None))
        attribute = {f.status for f in found if f.symbol.endswith("chunked_prefill_enabled")}
        assert attribute == {expected}, (version, [f.message for f in found])
        assert [f.status for f in found if f.check == "rpc"] == [Status.OK], (version, [f.message for f in found])


@pytest.mark.network
def test_an_rpc_no_worker_or_wrapper_defines_is_broken_on_a_real_release(tmp_path):
    consumer = write_tree(tmp_path / "c", {"c.py": REAL_CONSUMER.format(use="return None", method="no_such_rpc")})
    found = run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "c.py")), open_build("0.13.0").surface, None))
    assert [f.status for f in found if f.check == "rpc"] == [Status.BROKEN], [f.message for f in found]
