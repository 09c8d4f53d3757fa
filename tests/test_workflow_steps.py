"""The reusable workflow's and the composite action's shell steps, run here without ``act``: each ``run:`` step of
the parsed YAML, its ``${{ }}`` expressions evaluated from test values, run in a temporary checkout with a fake
``GITHUB_*`` environment (a fake OIDC endpoint on loopback, the tool's repository served as ``file://``).

The network tests install the tool from that checkout at a given commit into a fresh virtual environment (its
dependencies come from the package index) and audit a tiny consumer project standing for the calling
repository; the offline tests check what the parsed steps reference and run the step that finds the tool."""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "vllm-compat-matrix.yml"
REPORT = ROOT / ".github" / "workflows" / "vllm-compat-report.yml"
ACTION = ROOT / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
CONSUMER_CODE = """\
from vllm.v1.request import Request


def make(prompt_ids, params):
    return Request(request_id="r", prompt_token_ids=prompt_ids, sampling_params=params, eos_token_id=2)
"""


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _triggers(workflow: dict) -> dict:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as True


def _evaluate(expression: str, context: dict) -> str:
    """``a || 'b'`` and dotted context names: all the expressions these steps use (anything else fails)."""
    for operand in (part.strip() for part in expression.split("||")):
        if re.fullmatch(r"'[^']*'", operand):
            value = operand[1:-1]
        elif re.fullmatch(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*", operand):
            value = context
            for name in operand.split("."):
                assert isinstance(value, dict), f"no test value for {operand!r} in {expression!r}"
                if operand.startswith("inputs.") and name not in value:
                    value = ""  # an input not given (a scheduled run has none) reads as empty
                    break
                assert name in value, f"no test value for {operand!r} in {expression!r}"
                value = value[name]
        else:
            raise AssertionError(f"an expression these tests cannot evaluate: {expression!r}")
        if value:
            return str(value)
    return ""


def _substitute(text: str, context: dict) -> str:
    return EXPRESSION.sub(lambda m: _evaluate(m.group(1), context), text)


def _run_steps(steps: list[dict], context: dict, env: dict, cwd: Path, scratch: Path, python: str,
               timeout: int = 600) -> list[subprocess.CompletedProcess]:
    """Every ``run:`` step in order, as the runner would (bash -eo pipefail; python); ``uses:`` steps are left
    out (checkout: ``cwd`` is the checkout; setup-python: ``python`` and PATH; cache, upload: nothing to do)."""
    done = []
    context.setdefault("steps", {})
    for number, step in enumerate(steps):
        if "run" not in step:
            continue
        output = scratch / f"output-{number}"
        output.write_text("")
        step_env = {**env, **{k: _substitute(str(v), context) for k, v in step.get("env", {}).items()},
                    "GITHUB_OUTPUT": str(output)}
        script = scratch / f"step-{number}"
        script.write_text(_substitute(step["run"], context))
        shell = step.get("shell", "bash")
        command = {"bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                   "python": [python, str(script)]}[shell]
        ran = subprocess.run(command, cwd=cwd, env=step_env, capture_output=True, text=True, timeout=timeout)
        done.append(ran)
        assert ran.returncode == 0, f"step {step.get('name', number)!r} failed:\n{ran.stdout[-3000:]}\n" \
                                    f"{ran.stderr[-3000:]}"
        if "id" in step:
            pairs = (line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
            context["steps"][step["id"]] = {"outputs": dict(pairs)}
    return done


def _base_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "ACTIONS_", "RUNNER_"))
           and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    summary = tmp / "step-summary.md"
    summary.write_text("")
    return {**env, "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"}


class _Oidc:
    """A fake ACTIONS_ID_TOKEN_REQUEST_URL on loopback: answers a request with the right bearer with a token
    whose claims are ``claims`` (unsigned: the step reads the claims, it does not verify them)."""

    def __init__(self, claims: dict, bearer: str) -> None:
        part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        token = f"e30.{part}.c2ln"
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                seen.append(self.headers.get("Authorization"))
                ok = self.headers.get("Authorization") == f"bearer {bearer}"
                body = json.dumps({"value": token} if ok else {"message": "bad token"}).encode()
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.env = {"ACTIONS_ID_TOKEN_REQUEST_URL": f"http://127.0.0.1:{self.server.server_address[1]}/token"
                                                    "?api-version=2.0",
                    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": bearer}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _job(workflow: dict) -> dict:
    (job,) = workflow["jobs"].values()
    return job


def _tool_step(steps: list[dict]) -> dict:
    found = [s for s in steps if s.get("id") == "tool"]
    assert found, "no step with id 'tool' finds the workflow's own repository and commit"
    return found[0]


def _find_tool(tmp_path: Path, env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    step = _tool_step(_job(_load(WORKFLOW))["steps"])
    output = tmp_path / "output"
    output.write_text("")
    script = tmp_path / "find_tool"
    script.write_text(_substitute(step["run"], {}))
    ran = subprocess.run([sys.executable, str(script)], env={**_base_env(tmp_path), **env, "GITHUB_OUTPUT":
                                                             str(output)}, capture_output=True, text=True,
                         timeout=60)
    assert step.get("shell") == "python"
    return ran, dict(line.split("=", 1) for line in output.read_text().splitlines())


CALLER = {"GITHUB_REPOSITORY": "caller/app", "GITHUB_SHA": "f" * 40,
          "GITHUB_WORKFLOW_REF": "caller/app/.github/workflows/ci.yml@refs/heads/main"}


def test_a_called_workflow_finds_its_own_repository_and_commit_in_the_jobs_oidc_token(tmp_path):
    claims = {"job_workflow_ref": "owner/vllm-compat/.github/workflows/vllm-compat-matrix.yml@refs/tags/v1",
              "job_workflow_sha": "a" * 40, "repository": "caller/app", "sha": "f" * 40}
    oidc = _Oidc(claims, "secret-bearer")
    try:
        ran, outputs = _find_tool(tmp_path, {**CALLER, **oidc.env})
    finally:
        oidc.close()
    assert ran.returncode == 0, ran.stderr
    assert oidc.seen == ["bearer secret-bearer"]
    assert outputs == {"repository": "owner/vllm-compat", "commit": "a" * 40}


def test_run_in_its_own_repository_without_a_token_it_uses_that_repository_and_commit(tmp_path):
    own = {"GITHUB_REPOSITORY": "owner/vllm-compat", "GITHUB_SHA": "b" * 40,
           "GITHUB_WORKFLOW_REF": "owner/vllm-compat/.github/workflows/vllm-compat-matrix.yml@refs/heads/main"}
    ran, outputs = _find_tool(tmp_path, own)
    assert ran.returncode == 0, ran.stderr
    assert outputs == {"repository": "owner/vllm-compat", "commit": "b" * 40}
    ran, outputs = _find_tool(tmp_path, CALLER)  # called, and the caller withheld id-token: write
    assert ran.returncode != 0 and outputs == {}
    assert "id-token: write" in ran.stderr and "compat-package" in ran.stderr


def _defaults(inputs: dict) -> dict:
    return {name: str(spec.get("default", "")) for name, spec in inputs.items()}


def test_the_parsed_steps_install_the_tool_from_their_own_repository_and_audit_the_caller():
    workflow, action = _load(WORKFLOW), _load(ACTION)
    triggers = _triggers(workflow)
    assert "workflow_call" in triggers and "schedule" not in triggers
    assert "speculators" not in WORKFLOW.read_text()
    for trigger in ("workflow_call", "workflow_dispatch"):
        defaults = _defaults(triggers[trigger]["inputs"])
        assert {"consumer", "builds", "nightly-index", "compat-package"} <= set(defaults)
        assert defaults["consumer"] == "." and defaults["compat-package"] == ""
    assert workflow["permissions"]["id-token"] == "write"
    job = _job(workflow)
    # A scheduled run has no inputs: the consumer is still the checked-out repository.
    assert _evaluate(EXPRESSION.fullmatch(job["env"]["CONSUMER"]).group(1), {"inputs": {}}) == "."
    assert _evaluate(EXPRESSION.fullmatch(job["env"]["CONSUMER"]).group(1), {"inputs": {"consumer": "x"}}) == "x"
    steps = job["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@") and "with" not in steps[0]
    install = next(s for s in steps if s.get("name") == "Install the tool")
    assert steps.index(_tool_step(steps)) < steps.index(install)
    assert install["env"] == {"TOOL_REPOSITORY": "${{ steps.tool.outputs.repository }}",
                              "TOOL_COMMIT": "${{ steps.tool.outputs.commit }}"}
    assert "git+$GITHUB_SERVER_URL/$TOOL_REPOSITORY@$TOOL_COMMIT" in install["run"]

    inputs = _defaults(action["inputs"])
    assert inputs["consumer"] == "." and inputs["compat-package"] == ""
    assert set(_defaults(triggers["workflow_call"]["inputs"])) <= set(inputs)
    action_steps = action["runs"]["steps"]
    action_install = next(s for s in action_steps if s.get("name") == "Install the tool")
    assert action_install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert '"$ACTION_PATH"' in action_install["run"]
    build = next(s for s in steps if s.get("name") == "Build the matrix")
    action_build = next(s for s in action_steps if s.get("name") == "Build the matrix")
    assert build["run"] == action_build["run"]  # one script: the workflow's and the action's stay in step
    assert action_build["env"]["CONSUMER"] == "${{ inputs.consumer }}"


def test_this_repositorys_scheduled_matrix_is_the_documented_command_through_the_action():
    report = _load(REPORT)
    assert "schedule" in _triggers(report)
    nightly, build = report["jobs"]["nightly"], report["jobs"]["report"]
    assert nightly["uses"] == "./.github/workflows/vllm-compat-matrix.yml"
    assert nightly["permissions"]["id-token"] == "write"
    step = next(s for s in build["steps"] if s.get("uses") == "./")
    readme = (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")
    command = f"python -m compat.matrix --vllm '{step['with']['builds']}' --output-dir {step['with']['output-dir']}"
    assert command in readme and step["with"]["nightly-index"] == "none"
    assert "speculators==0.3.0" == step["with"]["consumer"]
    assert any("git push" in s.get("run", "") for s in build["steps"]) and build["permissions"]["contents"] == "write"


def test_the_docs_document_every_input_with_its_default():
    readme = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    rows = {}
    for line in readme.splitlines():
        match = re.fullmatch(r"\| `([\w-]+)` \| (.*?) \| (.+?) \|.*", line)
        if match:
            rows.setdefault(match.group(1), (match.group(2), match.group(3)))
    workflow, action = _load(WORKFLOW), _load(ACTION)
    documented = {**_defaults(_triggers(workflow)["workflow_call"]["inputs"]), **_defaults(action["inputs"])}
    for name, default in documented.items():
        assert name in rows, f"input {name} is not in docs/ci.md's table"
        shown, meaning = rows[name]
        assert shown == (f"`{default}`" if default else "empty"), (name, shown)
        assert meaning.strip()


def test_the_checked_in_matrix_is_in_the_repository_and_is_what_the_docs_say():
    tracked = subprocess.run(["git", "ls-files", "reports/matrix"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    names = {"matrix.html", "matrix.json", "matrix.md", "matrix.junit.xml", "matrix.png"}
    assert {f"reports/matrix/{n}" for n in names} <= set(tracked)
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "reports/matrix/matrix.png",
                              "reports/scratch-report.json"], cwd=ROOT, capture_output=True, text=True).stdout
    assert ignored.split() == ["reports/scratch-report.json"]
    readme = (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")
    picture = re.search(r"!\[([^\]]*)\]\(\.\./(reports/matrix/matrix\.png)\)", readme)
    assert picture and (ROOT / picture.group(2)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    matrix = json.loads((ROOT / "reports" / "matrix" / "matrix.json").read_text(encoding="utf-8"))
    labels = [b["label"] for b in matrix["builds"]]
    consumer = matrix["consumer"]
    assert f"{consumer['name']} {consumer['version']}" in picture.group(1)
    assert f"from {labels[0]} to {labels[-1]}" in picture.group(1)
    assert all(b["error"] is None for b in matrix["builds"])
    assert f"{len(matrix['rows'])} touchpoints x {len(labels)} builds ({labels[0]} .. {labels[-1]})" in readme


# --- the steps run for real: the tool installed from a checkout at a commit, the caller's project audited ---


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """This repository's working tree as a git repository under a fake server root: commit A (version
    0.1.0+a), then commit B on top (0.1.0+b), so installing at A is seen to install A and not the branch head."""
    server = tmp_path_factory.mktemp("server")
    repo = server / "owner" / "vllm-compat"
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if name.startswith("reports/") or not (ROOT / name).is_file():
            continue
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(git + ["init", "-q", "-b", "main"], cwd=repo, check=True)
    commits = {}
    for mark in ("a", "b"):
        pyproject = repo / "pyproject.toml"
        pyproject.write_text(re.sub(r'^version = ".*"$', f'version = "0.1.0+{mark}"', pyproject.read_text(), count=1,
                                    flags=re.M))
        init = repo / "compat" / "__init__.py"
        init.write_text(re.sub(r'^__version__ = ".*"$', f'__version__ = "0.1.0+{mark}"', init.read_text(),
                               count=1, flags=re.M))
        subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
        subprocess.run(git + ["commit", "-q", "-m", mark], cwd=repo, check=True)
        commits[mark] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                       check=True).stdout.strip()
    return server, repo, commits


def _caller(tmp_path: Path) -> Path:
    workspace = tmp_path / "caller-app"
    (workspace / "app").mkdir(parents=True)
    (workspace / "app" / "engine.py").write_text(CONSUMER_CODE)
    return workspace


def _venv_env(tmp_path: Path) -> tuple[dict, Path]:
    venv = tmp_path / "venv"
    # --upgrade-deps: a current pip, as setup-python gives (pip 23.2 refuses a git+file:/// requirement URL)
    subprocess.run([sys.executable, "-m", "venv", "--upgrade-deps", str(venv)], check=True, timeout=300)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    gh = fake_bin / "gh"
    gh.write_text("#!/bin/sh\necho 'gh: no previous run here' >&2\nexit 1\n")  # no baseline to fetch
    gh.chmod(0o755)
    env = _base_env(tmp_path)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), str(fake_bin), env.get("PATH", "/usr/bin:/bin")])
    return env, venv / "bin" / "python"


def _check_audit(python: Path, matrix_dir: Path, summary: Path) -> None:
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m, compat; "
                              "print(m.version('vllm-compat'), compat.__file__)"], capture_output=True, text=True,
                             check=True, cwd=matrix_dir).stdout.split()
    assert version[0] == "0.1.0+a"  # the commit asked for, not the branch's head (0.1.0+b)
    assert str(python.parent.parent) in version[1] and str(ROOT) not in version[1]
    matrix = json.loads((matrix_dir / "matrix.json").read_text())
    assert matrix["generated_by"] == "compat 0.1.0+a"
    assert matrix["consumer"]["name"] == "caller-app"
    assert [b["label"] for b in matrix["builds"]] == ["0.32.0"]
    locations = {row["location"] for row in matrix["rows"]}
    assert locations and all(loc.startswith("app/engine.py:") for loc in locations)
    assert any(row["touchpoint"] == "vllm.v1.request.Request" and row["probe"] == "call" and
               row["cells"]["0.32.0"]["status"] == "broken" for row in matrix["rows"])
    assert "caller-app" in summary.read_text()


@pytest.mark.network
def test_the_called_workflow_installs_itself_at_its_commit_and_audits_the_caller(served, tmp_path):
    server, _repo, commits = served
    workspace = _caller(tmp_path)
    env, python = _venv_env(tmp_path)
    claims = {"job_workflow_ref": "owner/vllm-compat/.github/workflows/vllm-compat-matrix.yml@refs/heads/v1",
              "job_workflow_sha": commits["a"]}
    oidc = _Oidc(claims, "bearer-value")
    env.update({**CALLER, **oidc.env, "GITHUB_SERVER_URL": f"file://{server}", "GITHUB_WORKSPACE": str(workspace)})
    workflow = _load(WORKFLOW)
    inputs = {**_defaults(_triggers(workflow)["workflow_call"]["inputs"]), "builds": "0.32.0",
              "nightly-index": "none"}
    context = {"inputs": inputs, "github": {"workflow": "ci", "token": "token"}}
    job = _job(workflow)
    env.update({k: _substitute(v, context) for k, v in job["env"].items()})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        _run_steps(job["steps"], context, env, workspace, scratch, str(python))
    finally:
        oidc.close()
    assert context["steps"]["tool"]["outputs"] == {"repository": "owner/vllm-compat", "commit": commits["a"]}
    _check_audit(python, workspace / env["OUTPUT_DIR"], Path(env["GITHUB_STEP_SUMMARY"]))


@pytest.mark.network
def test_the_action_installs_itself_from_its_path_and_audits_the_caller(served, tmp_path):
    _server, repo, commits = served
    workspace = _caller(tmp_path)
    env, python = _venv_env(tmp_path)
    action_path = tmp_path / "_actions" / "owner" / "vllm-compat" / "v1"  # where the runner puts OWNER/repo@v1
    subprocess.run(["git", "clone", "-q", str(repo), str(action_path)], check=True)
    subprocess.run(["git", "checkout", "-q", commits["a"]], cwd=action_path, check=True)
    env.update({**CALLER, "GITHUB_WORKSPACE": str(workspace), "GITHUB_ACTION_PATH": str(action_path)})
    action = _load(action_path / "action.yml")
    inputs = {**_defaults(action["inputs"]), "builds": "0.32.0", "nightly-index": "none"}
    context = {"inputs": inputs, "github": {"action_path": str(action_path)}}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _run_steps(action["runs"]["steps"], context, env, workspace, scratch, str(python))
    _check_audit(python, workspace / inputs["output-dir"], Path(env["GITHUB_STEP_SUMMARY"]))
