"""The unit layer: every probe, fixer and gate rule judged on small trees and files the test writes itself. No
network, no vLLM release, no engine: each test here runs in well under a second (``./scripts/test -m unit``).

``trees`` is the shared fixture: it writes a vLLM-shaped build and a consumer from ``{path: source}`` tables and
runs one probe (or every probe) over them, with the build the consumer was written for when one is given."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compat.audit.pipeline import run_probes
from compat.consumer.result import Scan
from compat.consumer.scan import scan_tree
from compat.findings import Finding
from compat.probe import Probe, ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build
from compat.vllm.surface import Surface

from ..trees import write_tree

UNIT = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    """Everything under tests/unit/ is the unit layer."""
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(UNIT):
            item.add_marker(pytest.mark.unit)


@dataclass
class Trees:
    root: Path
    _count: itertools.count = field(default_factory=itertools.count)

    def _dir(self, name: str) -> Path:
        return self.root / f"{name}-{next(self._count)}"

    def vllm(self, files: dict[str, str], version: str = "0.0.0") -> Surface:
        """A vLLM build read statically from ``files`` (paths under ``vllm/``); ``version`` goes into a
        ``vllm/_version.py`` (where a source tree's version is read from) unless the table has one."""
        files = {"vllm/__init__.py": "", **files}
        if "vllm/version.py" not in files:
            files.setdefault("vllm/_version.py", f'__version__ = "{version}"\n')
        return open_build(str(write_tree(self._dir("vllm"), files))).surface

    def consumer(self, files: dict[str, str] | str) -> Scan:
        """The scan of a consumer: one module's source, or ``{path: source}`` of a package."""
        if isinstance(files, str):
            return scan_tree(tree_from_path(write_tree(self._dir("consumer"), {"consumer.py": files}) / "consumer.py"))
        return scan_tree(tree_from_path(write_tree(self._dir("consumer"), files)))

    def context(self, consumer: dict[str, str] | str, vllm: dict[str, str],
                written_for: dict[str, str] | None = None, **options) -> ProbeContext:
        then = self.vllm(written_for) if written_for is not None else None
        return ProbeContext(self.consumer(consumer), self.vllm(vllm), then, **options)

    def findings(self, probe: Probe | None, consumer: dict[str, str] | str, vllm: dict[str, str],
                 written_for: dict[str, str] | None = None, **options) -> list[Finding]:
        """What ``probe`` (every probe when None) finds, in the order the audit gives."""
        ctx = self.context(consumer, vllm, written_for, **options)
        return run_probes(ctx, None if probe is None else [probe])


@pytest.fixture
def trees(tmp_path, monkeypatch) -> Trees:
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    return Trees(tmp_path)
