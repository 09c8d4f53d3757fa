"""An attribute the consumer assigns different things (a vLLM class in one branch, its own class or something
the walk cannot type in another) holds no class the audit knows: what is read from it is not judged against
the vLLM class (a false ``broken`` on vllm-rbln 0.12.0's ``self.drafter``). One vLLM class, assigned once or
after ``None``, still is."""

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
    "vllm/v1/__init__.py": "",
    "vllm/v1/spec_decode/__init__.py": "",
    "vllm/v1/spec_decode/ngram_proposer.py": """
        class NgramProposer:
            def __init__(self, vllm_config):
                self.k = 3

            def propose(self, token_ids):
                return token_ids[-self.k:]
    """,
}

RUNNER = """
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer


    class MyProposer:
        def __init__(self, config):
            self.kv_cache_gid = 0


    class Runner:
        def __init__(self, config, method):
            self.drafter = None
            {branches}

        def step(self, ids):
            return self.drafter.kv_cache_gid, self.drafter.propose(ids)
"""

MIXED = """if method == "mine":
                self.drafter = MyProposer(config)
            else:
                self.drafter = NgramProposer(config)"""
UNKNOWN = """if method == "other":
                self.drafter = config.make_drafter()
            else:
                self.drafter = NgramProposer(config)"""
ONLY = """if method == "ngram":
                self.drafter = NgramProposer(config)"""


@pytest.mark.parametrize(("branches", "judged"), [(MIXED, False), (UNKNOWN, False), (ONLY, True)])
def test_what_is_read_from_an_attribute_of_several_classes_is_not_judged(tmp_path, monkeypatch, branches, judged):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = open_build(str(write_tree(tmp_path / "vllm", VLLM))).surface
    consumer = write_tree(tmp_path / "c", {"runner.py": RUNNER.format(branches=branches)})
    findings = run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "runner.py")), surface, None))
    missing = [f for f in findings if "kv_cache_gid" in f.message and f.status is Status.BROKEN]
    propose = [f for f in findings if f.symbol.endswith("NgramProposer.propose")]
    assert bool(missing) is judged and bool(propose) is judged, [f.message for f in findings]
