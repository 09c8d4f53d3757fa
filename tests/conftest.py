"""Shared fixtures. Releases come from the package index (cached under COMPAT_CACHE_DIR or ~/.cache/compat)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compat import sources
from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer.scan import scan_tree
from compat.vllm.builds import open_build

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def speculators_scan():
    """The real speculators 0.3.0 release, scanned."""
    return scan_tree(sources.tree_from_release("speculators", "0.3.0"))


@pytest.fixture(scope="session")
def build():
    """Open (and cache) a vLLM release by version: build("0.11.0")."""
    opened = {}

    def get(spec: str):
        if spec not in opened:
            opened[spec] = open_build(spec)
        return opened[spec]

    return get


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory) -> Path:
    """A tiny Qwen3 (hidden 64, random weights), built once for every gate test that recomputes with HF."""
    from compat.models import build as build_model

    return build_model("qwen3", tmp_path_factory.mktemp("qwen3") / "qwen3", hidden_size=64).path


@pytest.fixture(scope="session")
def audit(speculators_scan, build):
    """Audit speculators 0.3.0 against a release (without written-for evidence unless asked)."""

    def run(version: str, written_for=None):
        auditor = Auditor(AuditOptions())
        return auditor.run(speculators_scan, build(version), written_for=written_for)

    return run


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, python: str | None = None):
    import os
    import subprocess

    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run([python or sys.executable, "-m", "compat.audit", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=600)


def pytest_collection_modifyitems(items):
    """A test on an S3 server started on loopback (moto's, the ``s3`` fixture of the object-store tests) is
    ``slow``: seconds a test, beyond the offline layer's two minutes."""
    for item in items:
        if "s3" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
