"""The consumer scan never stops the audit: a statement it cannot read is one ``error`` finding with its
traceback, and the rest of the file and of the consumer is still audited."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer import visitor
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.sources import tree_from_path

from .trees import write_tree

NESTED = '''
import types

from vllm.model_executor.models.llama import LlamaModel


def install(model: LlamaModel, layer_ids):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        hidden_states = self.get_input_embeddings(input_ids)
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, None)
        return hidden_states

    model.forward = types.MethodType(forward, model)
'''

TWO_FILES = {
    "pkg/__init__.py": "",
    "pkg/first.py": '''
        from vllm import SamplingParams


        def boom():
            return SamplingParams(max_tokens=1)


        def fine():
            return SamplingParams(temperature=0.0)
    ''',
    "pkg/second.py": '''
        from vllm.v1.core.sched.scheduler import Scheduler


        def build(config):
            return Scheduler(vllm_config=config)
    ''',
}


def test_a_forward_defined_inside_a_function_is_read(tmp_path):
    """speculators-like code installs a function defined inside another one as a model's forward (a real
    plugin did; the scan then raised ``KeyError: 'pkg.mod.install.forward'``)."""
    root = write_tree(tmp_path / "c", {"pkg/__init__.py": "", "pkg/patch.py": NESTED})
    scan = scan_tree(tree_from_path(root / "pkg"))
    assert not scan.problems
    (patch,) = scan.model_patches
    assert patch.function.endswith("install.forward") and "get_input_embeddings" in {u.name for u in patch.self_uses}


def _planted(tmp_path: Path, monkeypatch):
    """A consumer of two files scanned clean, and again with the walk raising on ``first.py``'s ``boom``."""
    root = write_tree(tmp_path / "c", TWO_FILES)
    clean = scan_tree(tree_from_path(root / "pkg"))
    original = visitor.ModuleVisitor.visit_FunctionDef

    def planted(self, node):
        if node.name == "boom":
            raise KeyError("planted")
        return original(self, node)

    monkeypatch.setattr(visitor.ModuleVisitor, "visit_FunctionDef", planted)
    return clean, scan_tree(tree_from_path(root / "pkg"))


def test_a_statement_the_scan_cannot_read_is_one_error_and_the_rest_is_audited(tmp_path, monkeypatch):
    clean, scan = _planted(tmp_path, monkeypatch)
    (problem,) = scan.problems
    assert str(problem.location) == "pkg/first.py:4" and "KeyError: 'planted'" in problem.message
    assert "planted" in problem.traceback and "Traceback" in problem.traceback
    lost = {str(t.location) for t in clean.touchpoints} - {str(t.location) for t in scan.touchpoints}
    assert lost and all(loc.startswith("pkg/first.py:5") for loc in lost)  # only what is inside `boom`
    assert any(str(t.location).startswith("pkg/second.py") for t in scan.touchpoints)


@pytest.mark.runtime
def test_the_audit_reports_it_as_one_error_finding_with_its_traceback(tmp_path, monkeypatch):
    _, scan = _planted(tmp_path, monkeypatch)
    result = Auditor(AuditOptions(consumer=str(tmp_path / "c" / "pkg"), vllm="installed", written_for=None,
                                  confirm="never")).run(scan=scan, written_for=None)
    (error,) = [f for f in result.findings if f.check == "scan"]
    assert error.status is Status.ERROR and "KeyError" in error.message and "planted" in error.evidence.traceback
    assert any(f.check != "scan" and "second.py" in (f.consumer_location or "") for f in result.findings)


def test_a_released_consumer_s_scan_is_kept_and_a_changed_scan_code_scans_again(tmp_path, monkeypatch):
    from compat.consumer import scan as scanning
    from compat.sources import SourceTree

    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    root = write_tree(tmp_path / "c", TWO_FILES) / "pkg"
    release = SourceTree(root, "pkg", "1.0", "release pkg==1.0 from the package index (sdist), read statically")
    first = scanning.cached_scan(release)
    assert len(list((tmp_path / "cache" / "scans").iterdir())) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("scanned again")

    monkeypatch.setattr(scanning, "scan_tree", refuse)
    assert scanning.cached_scan(release) == first  # read back, not scanned
    with pytest.raises(AssertionError, match="scanned again"):  # a directory may change: always scanned
        scanning.cached_scan(SourceTree(root, "pkg", None, f"directory {root}"))
    monkeypatch.setattr(scanning, "_scan_code_hash", lambda: "another version of the scan")
    with pytest.raises(AssertionError, match="scanned again"):
        scanning.cached_scan(release)


def test_a_scan_reports_its_progress_module_by_module(tmp_path):
    root = write_tree(tmp_path / "c", TWO_FILES)
    seen: list[tuple[int, int]] = []
    scan_tree(tree_from_path(root / "pkg"), progress=lambda done, total: seen.append((done, total)))
    # Two modules name vLLM, each walked three times (attributes learnt in one are read in the other).
    assert seen == [(n, 6) for n in range(1, 7)]


def test_the_bar_names_what_it_counts():
    import io

    from compat.progress import ProgressBar

    stream = io.StringIO()
    ProgressBar(stream, unit="module walks")(3, 6)
    assert "3/6 module walks" in stream.getvalue()
