"""A command that needs an optional dependency the base install leaves out (torch for tiny models and for the
gate's --values) stops with one line naming the extra to install and the CPU build of torch, exit 2: not an
internal error, and not a finding against every file of a dataset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .gate_files import write_vllm

torch = pytest.importorskip("torch")

# Imports of torch fail in the child as they do where it is not installed.
WITHOUT_TORCH = "import sys; sys.modules['torch'] = None; from {module} import main; sys.exit(main(sys.argv[1:]))"


def _without_torch(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH.format(module=module), *args], capture_output=True,
                          text=True, timeout=120)


def _one_line(run: subprocess.CompletedProcess, prog: str, extra: str) -> str:
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"{prog}: error: {prog} needs torch") and f"'{extra}' extra" in line, line
    assert "download.pytorch.org/whl/cpu" in line and "internal error" not in line
    return line


def test_building_a_tiny_model_without_torch_names_the_models_extra(tmp_path):
    _one_line(_without_torch("compat.models.__main__", "build", "llama", str(tmp_path / "m")), "compat.models",
              "models")
    assert not (tmp_path / "m").exists()


def test_the_gate_reading_values_without_torch_names_the_gate_extra(tmp_path: Path):
    write_vllm(tmp_path / "a.safetensors", torch.arange(4), torch.zeros(4, 2, 8))
    _one_line(_without_torch("compat.gate.cli", str(tmp_path), "--values", "--no-progress"), "compat.gate", "gate")
    header_only = _without_torch("compat.gate.cli", str(tmp_path), "--no-progress")  # needs no torch
    assert header_only.returncode == 0, header_only.stderr
