"""With no ``--vllm`` and vLLM installed, the installed files are read statically, never imported; ``installed``,
written out, imports them. Both are the installed build, on which the runtime confirmation runs (no vLLM here: a
package shaped like one, installed into a directory put on ``sys.path``)."""

from __future__ import annotations

import sys

import pytest

from compat.audit.pipeline import AuditOptions, Auditor
from compat.facts import Fact
from compat.vllm.builds import OpenedBuild, open_build
from compat.vllm.cached import CachedSurface
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo
from tests.test_scan import scan_source
from tests.trees import write_tree

PACKAGE = "fakevllm"


def metadata(name: str, version: str) -> str:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA description: not a header.\n"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site directory holding ``fakevllm`` (whose import raises) installed by the distribution fakevllm-cpu 1.2.0,
    put on ``sys.path``."""
    root = write_tree(tmp_path / "site", {
        f"{PACKAGE}/__init__.py": "raise RuntimeError('fakevllm was imported')\n",
        f"{PACKAGE}/_version.py": "__version__ = version = '9.9.9'\n",
        f"{PACKAGE}/engine.py": "class Engine:\n    def step(self, n: int) -> None: ...\n",
        "fakevllm_cpu-1.2.0.dist-info/METADATA": metadata("fakevllm-cpu", "1.2.0"),
        "fakevllm_cpu-1.2.0.dist-info/top_level.txt": f"{PACKAGE}\n",
        "other-3.0.dist-info/METADATA": metadata("other", "3.0"),
        "other-3.0.dist-info/RECORD": "other/__init__.py,,\n",
    })
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    return root


def test_the_distribution_that_installed_a_package_is_read_from_its_metadata(site):
    from compat.sources import installed_distribution

    assert installed_distribution(site, PACKAGE) == ("fakevllm-cpu", "1.2.0")  # top_level.txt
    assert installed_distribution(site, "other") == ("other", "3.0")  # RECORD, no top_level.txt
    assert installed_distribution(site, "absent") is None
    # Two distributions saying they installed it: neither is believed.
    write_tree(site, {"second-1.0.dist-info/METADATA": metadata("second", "1.0"),
                      "second-1.0.dist-info/RECORD": f"{PACKAGE}/__init__.py,,\n"})
    assert installed_distribution(site, PACKAGE) is None


def test_no_spec_reads_the_installed_files_statically_without_importing_them(site):
    opened = open_build(None, PACKAGE)
    assert PACKAGE not in sys.modules
    assert opened.installed and opened.import_error is None
    build = opened.surface.build
    assert build.reading == "static" and build.version == "1.2.0"  # the metadata's, not _version.py's
    assert build.root == str(site)
    assert "read statically (not imported)" in build.origin and "fakevllm-cpu" in build.origin
    assert "read statically" in opened.note and "--vllm installed imports it" in opened.note
    assert opened.surface.lookup(f"{PACKAGE}.engine.Engine.step").kind == "method"
    assert PACKAGE not in sys.modules


def test_without_metadata_the_version_is_the_packages_own(site):
    for path in sorted(site.glob("fakevllm_cpu-*.dist-info/*")):
        path.unlink()
    assert open_build(None, PACKAGE).surface.build.version == "9.9.9"


def test_installed_written_out_imports_the_package(site):
    opened = open_build("installed", PACKAGE)
    assert opened.import_error is not None and "fakevllm was imported" in str(opened.import_error)
    assert not opened.installed  # a build that does not import is none the engines can run
    assert opened.surface.build.reading == "static" and "import failed" in opened.surface.build.origin


def test_a_fact_the_machine_decides_is_not_kept_between_audits(site):
    runs = []

    def observe(surface: StaticSurface) -> bool:
        runs.append(1)
        return True

    def surface() -> CachedSurface:
        return CachedSurface(StaticSurface(site, BuildInfo(PACKAGE, "1.2.0", "test", "static", str(site)), PACKAGE))

    machine, code = Fact("machine", observe, kept=False), Fact("code", observe)
    first = surface()
    assert first.fact(machine) and first.fact(machine) and first.fact(code)
    first.save()
    assert len(runs) == 2  # once each in a process
    second = surface()
    assert second.fact(code) and len(runs) == 2  # from the memo
    assert second.fact(machine) and len(runs) == 3  # observed again


@pytest.mark.parametrize("installed", [True, False])
def test_the_confirmation_runs_on_any_reading_of_the_installed_build(site, tmp_path, monkeypatch, installed):
    asked = []
    monkeypatch.setattr(Auditor, "_confirm", lambda self, ctx, found, notes: asked.append(ctx.surface) or [])
    scan = scan_source(tmp_path, f"from {PACKAGE}.engine import Engine\nEngine().step(1)\n")
    static = StaticSurface(site, BuildInfo(PACKAGE, "1.2.0", "test", "static", str(site)), PACKAGE)
    result = Auditor(AuditOptions(confirm="always", target=PACKAGE)).run(scan, OpenedBuild(static, installed=installed),
                                                                         written_for=None)
    assert asked == ([static] if installed else [])
    skipped = [n for n in result.notes if "runtime confirmation needs the installed vLLM" in n]
    assert bool(skipped) is not installed
