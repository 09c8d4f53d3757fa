"""The probe registry and what happens when a probe crashes."""

from __future__ import annotations

import textwrap

import pytest

import compat.probes as probes
from compat.audit.pipeline import run_probes
from compat.consumer.result import Kind
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.probe import Probe, ProbeContext
from compat.sources import tree_from_path

pytestmark = [pytest.mark.network]


def test_registry_finds_a_new_probe_module_without_other_changes(tmp_path, monkeypatch):
    extra = tmp_path / "extra_probes"
    extra.mkdir()
    (extra / "always_unknown.py").write_text(textwrap.dedent("""
        from compat.findings import Status
        from compat.probe import Probe
        from compat.consumer.result import Kind

        class Unknown(Probe):
            def check(self, ctx, tp):
                return self.finding(tp, Status.UNKNOWN, "added probe ran")

        PROBE = Unknown(name="added", description="a probe added by dropping a module in", kinds=(Kind.IMPORT,))
    """))
    monkeypatch.setattr(probes, "__path__", list(probes.__path__) + [str(extra)])
    names = [p.name for p in probes.all_probes()]
    assert "added" in names and {"import", "call", "attribute", "rpc"} <= set(names)


class Crashing(Probe):
    def check(self, ctx, tp):
        raise KeyError("")  # an exception whose str() is empty, as in the seed's worst hour


def test_a_crashing_probe_is_an_error_with_traceback_and_the_audit_goes_on(tmp_path, build):
    path = tmp_path / "c.py"
    path.write_text("from vllm.config import CacheConfig\nCacheConfig(block_size=16)\n")
    scan = scan_tree(tree_from_path(path))
    ctx = ProbeContext(scan, build("0.11.0").surface)
    crashing = Crashing(name="crashing", description="raises", kinds=(Kind.IMPORT, Kind.CALL))
    findings = run_probes(ctx, [crashing] + probes.all_probes())
    errors = [f for f in findings if f.check == "crashing"]
    assert len(errors) == 2 and all(f.status is Status.ERROR for f in errors)
    for f in errors:
        assert "KeyError" in f.message and f.message.strip()
        assert "Traceback" in f.evidence.traceback and "raise KeyError" in f.evidence.traceback
    assert {f.check for f in findings if f.status is Status.OK} >= {"import", "call"}
