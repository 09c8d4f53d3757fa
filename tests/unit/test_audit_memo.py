"""compat/audit/memo.py: the findings of an audit of immutable inputs are kept, and read back only for the same
inputs (the scan itself, each build, the options a probe reads, the tool's code)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compat.audit import memo, pipeline
from compat.audit.pipeline import AuditOptions, Auditor
from compat.vllm.builds import OpenedBuild
from compat.vllm.surface import BuildInfo

BUILD = {"vllm/engine.py": "class Engine:\n    def step(self, n):\n        return n\n"}
CONSUMER = "from vllm.engine import Engine\n\nEngine().step(1, 2)\nfrom vllm.engine import Gone\n"


def released(surface_or_scan, what: str):
    """The same reading, said to come from a release of the package index (as a cached download does)."""
    if hasattr(surface_or_scan, "build"):
        build = surface_or_scan.build
        surface_or_scan.build = BuildInfo(build.name, build.version, f"release {what}, read statically",
                                          build.reading, build.root)
        return surface_or_scan
    return replace(surface_or_scan, origin=f"release {what}")


@pytest.fixture
def inputs(trees):
    return released(trees.consumer(CONSUMER), "consumer==1.0"), released(trees.vllm(BUILD), "vllm==0.0.0")


def audit(scan, surface, options=None):
    auditor = Auditor(options or AuditOptions(written_for=None))
    return auditor.run(scan=scan, opened=OpenedBuild(surface), written_for=None)


def test_a_second_audit_of_the_same_releases_reads_the_findings_kept(inputs, monkeypatch):
    scan, surface = inputs
    first = audit(scan, surface)
    assert {f.status.value for f in first.findings} >= {"broken"}, [f.message for f in first.findings]

    def no_probes(*_args, **_kwargs):
        raise AssertionError("the probes ran again")

    monkeypatch.setattr(pipeline, "run_probes", no_probes)
    assert audit(scan, surface).findings == first.findings


@pytest.mark.parametrize("change", ["scan", "options", "build", "tool"])
def test_any_input_changed_audits_again(inputs, monkeypatch, change):
    scan, surface = inputs
    audit(scan, surface)
    options = AuditOptions(written_for=None)
    if change == "scan":  # a caller's change to the scan (the fix's re-audit sets the consumer's settings)
        scan = replace(scan, settings=(("CacheConfig", "enable_prefix_caching", "False"),))
    elif change == "options":
        options = replace(options, architectures=("LlamaForCausalLM",))
    elif change == "build":
        surface.build = replace(surface.build, version="0.0.1")
    else:
        monkeypatch.setattr(memo, "tool_fingerprint", lambda: "the tool's code edited")
    ran = []
    real = pipeline.run_probes
    monkeypatch.setattr(pipeline, "run_probes", lambda *a, **k: ran.append(1) or real(*a, **k))
    audit(scan, surface, options)
    assert ran, f"a changed {change} read the findings kept for the old one"


def test_inputs_that_may_change_are_never_kept(trees, inputs):
    scan, surface = inputs
    directory = trees.consumer(CONSUMER)  # a directory the user edits
    tree = trees.vllm(BUILD)  # a source tree
    options = AuditOptions(written_for=None)
    assert memo.key(scan, surface, None, options, installed=False) is not None
    assert memo.key(directory, surface, None, options, installed=False) is None
    assert memo.key(scan, tree, None, options, installed=False) is None
    assert memo.key(scan, surface, tree, options, installed=False) is None
    assert memo.key(scan, surface, None, options, installed=True) is None  # the runtime confirmation may run


def test_a_scan_read_back_from_the_cache_has_the_key_of_the_scan_just_made(inputs):
    """A plain pickle records which equal objects are one object, which differs between a fresh scan and the same
    scan unpickled: the key must depend on values alone, or the first warm audit never finds what the cold one kept."""
    import pickle

    scan, surface = inputs
    options = AuditOptions(written_for=None)
    again = pickle.loads(pickle.dumps(scan))
    assert memo.key(again, surface, None, options, False) == memo.key(scan, surface, None, options, False)
    path = "tests/" + "left_out.py"  # one object twice, against two equal objects: the same scan by value
    shared = replace(scan, left_out=(path, path))
    apart = replace(scan, left_out=(path, "".join(path)))
    assert shared == apart and pickle.dumps(shared) != pickle.dumps(apart)
    assert memo.key(shared, surface, None, options, False) == memo.key(apart, surface, None, options, False)
