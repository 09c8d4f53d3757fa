"""The packages as users get them: the sdist, a wheel built from it, and that wheel installed on its own.

Offline: the build uses this environment's setuptools (no build isolation), the install takes no dependencies
(``--no-deps --no-index``) and the fresh environment reads the dependencies from this one's site-packages
through a path file. What it proves: the sdist holds everything a wheel needs, the wheel installs only
``compat`` (``probes/`` and ``fixers/`` inside it), and every command starts from the installed files alone,
finding the same probes and fixers the checkout has. What it does not: that the dependency metadata is
complete, which needs the index (``.ci/run`` installs the wheel with its dependencies and runs the default
audit from it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SCRIPTS = sorted(PYPROJECT["project"]["scripts"])
LEFT_OUT = (".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", ".pytest_cache", ".ruff_cache",
            ".hypothesis", "reports", ".gpu")


def run(*cmd: str | Path, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def clean_env() -> dict:
    """No PYTHONPATH: nothing but the installed files may provide ``compat``."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def source_modules() -> set[str]:
    """Every module file the wheel must hold, by its installed path: ``compat/`` less the checkout's stand-ins,
    and each directory ``package-dir`` maps (``probes/`` -> ``compat/probes/``)."""
    mapped = PYPROJECT["tool"]["setuptools"]["package-dir"]
    stand_ins = {f"{package.replace('.', '/')}/__init__.py" for package in mapped}
    found = {p.relative_to(ROOT).as_posix() for p in (ROOT / "compat").rglob("*.py") if "__pycache__" not in p.parts}
    found -= stand_ins
    for package, directory in mapped.items():
        found |= {f"{package.replace('.', '/')}/{p.relative_to(ROOT / directory).as_posix()}"
                  for p in (ROOT / directory).rglob("*.py") if "__pycache__" not in p.parts}
    return found


BUILD = """
import os, sys, tarfile
from pathlib import Path
from setuptools import build_meta

out, unpacked = Path(sys.argv[1]), Path(sys.argv[2])
sdist = out / build_meta.build_sdist(str(out))
with tarfile.open(sdist) as tar:
    tar.extractall(unpacked, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
[root] = unpacked.iterdir()
os.chdir(root)
build_meta.build_wheel(str(out))
"""
"""What ``python -m build --no-isolation`` does, through the same PEP 517 hooks: the sdist, then the wheel from
the unpacked sdist (so the wheel can only hold what the sdist carries)."""


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist of a copy of the checkout and the wheel built from that sdist, by this environment's
    setuptools."""
    if find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed (pip install -e '.[test]')")
    base = tmp_path_factory.mktemp("packaging")
    src, out = base / "src", base / "dist"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*LEFT_OUT))
    out.mkdir()
    run(sys.executable, "-c", BUILD, out, base / "unpacked", cwd=src)
    return out


@pytest.fixture(scope="module")
def installed(dist) -> Path:
    """A fresh environment with the wheel installed; its dependencies come from this environment's
    site-packages (a path entry: the editable install's finder there is not run)."""
    venv = dist.parent / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=dist)
    python = venv / "bin" / "python"
    purelib = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                       cwd=dist).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "zz_test_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(deps)))
    [wheel] = dist.glob("*.whl")
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel, cwd=dist)
    return venv


def test_the_wheel_installs_only_compat_with_probes_and_fixers_inside(dist):
    [wheel] = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"compat"}
    assert {n for n in names if n.endswith(".py")} == source_modules()
    # The modules the mapping takes from probes/ and fixers/, not the checkout's stand-ins.
    for package, directory in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        init = zipfile.ZipFile(wheel).read(f"{package.replace('.', '/')}/__init__.py")
        assert init == (ROOT / directory / "__init__.py").read_bytes()


def test_the_sdist_holds_the_repository_layout(dist):
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for directory in ("probes", "fixers"):
        assert {p.relative_to(ROOT).as_posix() for p in (ROOT / directory).glob("*.py")} <= names
        assert f"compat/{directory}/__init__.py" in names  # the stand-in: an unpacked sdist runs as a checkout


def test_every_command_starts_from_the_installed_wheel(installed, tmp_path):
    python = installed / "bin" / "python"
    where = run(python, "-c", "import compat, compat.probes, compat.fixers, importlib.util as u; "
                              "print(compat.__file__, compat.probes.__file__, compat.fixers.__file__, "
                              "u.find_spec('probes'), u.find_spec('fixers'))", cwd=tmp_path, env=clean_env())
    *files, probes, fixers = where.stdout.split()
    assert all(Path(f).is_relative_to(installed) for f in files), where.stdout
    assert (probes, fixers) == ("None", "None")  # no top-level probes or fixers
    commands = [[installed / "bin" / script, "--help"] for script in SCRIPTS] + [
        [python, "-m", "compat.audit", "--help"]]
    procs = [subprocess.Popen([str(c) for c in cmd], cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for cmd in commands]  # at once: each ~0.5 s
    for cmd, proc in zip(commands, procs):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.startswith("usage:"), (cmd, proc.returncode, out, err)


def test_the_installed_wheel_lists_the_probes_and_fixers_of_the_checkout(installed, tmp_path):
    from compat.fixers import all_fixers
    from compat.probes import all_probes

    probes = run(installed / "bin" / "compat-audit", "--list-probes", cwd=tmp_path, env=clean_env()).stdout
    fixers = run(installed / "bin" / "compat-fix", "--list-fixers", cwd=tmp_path, env=clean_env()).stdout
    assert [line.split()[0] for line in probes.splitlines()] == [p.name for p in all_probes()]
    assert [line.split()[0] for line in fixers.splitlines()] == [f.name for f in all_fixers()]


def test_twine_checks_the_sdist_and_the_wheel(dist):
    if find_spec("twine") is None:
        pytest.skip("twine is not installed (it is in the test extra: pip install -e '.[test]')")
    run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()), cwd=dist)
