"""One status policy and one build specification in every tool (issue #22, item 3).

The policy: the same findings give the same exit decision under each ``--fail-on`` in ``compat.audit``,
``compat.matrix``, ``compat.bisect`` (bad or not), ``compat.fix`` (its verification) and the pytest plugin. The
spec: every form parses, a specifier means every matching release and ``newest:`` the newest one in every tool,
bad input is one line and exit 2, and each tool resolves the same spec to the same builds, said on stderr.

vLLM-shaped trees are written here; releases are tiny wheels on a PEP 503 index served on loopback.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compat.audit.cli import main as audit_main
from compat.audit.pipeline import AuditOptions, Auditor
from compat.findings import Status
from compat.fix.cli import main as fix_main
from compat.matrix import bisect as bisection
from compat.matrix.cli import main as matrix_main

from .loopback import serve
from .trees import write_tree

pytest_plugins = ["pytester"]

GOOD = """
    class Base:
        def old(self):
            return 1


    def gone_kw(a, flag=False):
        return a


    def made(a, b):
        return a
"""
BAD = """
    import external_thing


    class Base:
        def keep(self):
            return 1


    def gone_kw(a):
        return a


    made = external_thing.factory()
"""
# one consumer per status: its only finding that is not ok on BAD, and the row key bisection takes
CONSUMERS = {
    "broken": ("from vllm.core import gone_kw\n\n\ndef f():\n    return gone_kw(1, flag=True)\n",
               "call|vllm.core.gone_kw"),
    "changed": ("from vllm.core import Base\n\n\nclass Mine(Base):\n    def old(self):\n"
                "        return super().old()\n", "attribute|vllm.core.Base.old"),
    "unknown": ("from vllm.core import made\n\n\ndef f():\n    return made(1, 2)\n", "call|vllm.core.made"),
}
ORDER = ("broken", "changed", "unknown")
"""Most severe first: --fail-on LEVEL fails on LEVEL and everything before it."""


def _expected(status: str, level: str) -> int:
    """The policy as the README states it, from the order alone: 1 when ``status`` is at or above ``level``."""
    return 1 if ORDER.index(status) <= ORDER.index(level) else 0


def _vllm(root: Path, core: str, version: str) -> Path:
    return write_tree(root, {"vllm/__init__.py": "", "vllm/core.py": core,
                             "vllm/_version.py": f'__version__ = "{version}"\n'})


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """A git repository of vLLM (tag good: all fine; tag bad: each consumer's one finding), BAD as a directory,
    and the three consumers."""
    root = tmp_path_factory.mktemp("policy")
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    for tag, core, version in (("good", GOOD, "9.1.0"), ("bad", BAD, "9.2.0")):
        _vllm(repo, core, version)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", tag], check=True)
        subprocess.run(git + ["tag", tag], check=True)
    bad = _vllm(root / "bad", BAD, "9.2.0")
    consumers = {s: write_tree(root / f"consumer-{s}", {"mypkg/__init__.py": "", "mypkg/use.py": text})
                 for s, (text, _) in CONSUMERS.items()}
    for status, path in consumers.items():  # the precondition: one finding that is not ok, of that status
        result = Auditor(AuditOptions(consumer=str(path), vllm=str(bad), confirm="never", written_for=None)).run()
        assert {f.status.value for f in result.findings} - {"ok"} == {status}, (status, result.findings)
    return {"repo": repo, "bad": bad, "consumers": consumers, "root": root}


CASES = [(s, level) for s in ORDER for level in ORDER]


def test_the_policy_itself():
    from compat import policy

    for status in Status:
        for level in policy.FailOn:
            if status is Status.OK:
                assert not policy.fails(status, level)
            elif status is Status.ERROR:
                assert policy.fails(status, level)
            else:
                assert policy.fails(status, level) == bool(_expected(status.value, level.value))
    assert policy.choose(None) is policy.FailOn.BROKEN
    assert policy.choose(None, strict=True) is policy.choose("unknown")


def test_the_audit_decides_by_the_policy(trees, tmp_path):
    for status, level in CASES:
        code = audit_main(["--consumer", str(trees["consumers"][status]), "--vllm", str(trees["bad"]),
                           "--fail-on", level, "--no-reports", "--confirm", "never", "--written-for", "none",
                           "--format", "json", "--output", str(tmp_path / "a.json")])
        assert code == _expected(status, level), (status, level)
        summary = json.loads((tmp_path / "a.json").read_text())["summary"]
        assert summary["fail_on"] == level and summary["exit_code"] == code


def test_strict_is_fail_on_unknown(trees, capsys):
    args = ["--consumer", str(trees["consumers"]["changed"]), "--vllm", str(trees["bad"]), "--no-reports",
            "--confirm", "never", "--written-for", "none"]
    assert audit_main(args + ["--strict"]) == audit_main(args + ["--fail-on", "unknown"]) == 1
    capsys.readouterr()
    assert audit_main(args + ["--strict", "--fail-on", "broken"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--strict" in err


def test_the_matrix_decides_by_the_policy(trees, tmp_path, capsys):
    for status, level in CASES:
        code = matrix_main(["--consumer", str(trees["consumers"][status]), "--vllm", str(trees["bad"]),
                            "--fail-on", level, "--format", "json", "--output", str(tmp_path / "m.json")])
        assert code == _expected(status, level), (status, level)
        rows = json.loads((tmp_path / "m.json").read_text())["rows"]
        first_bad = {r["key"].partition("|mypkg")[0]: r["first_bad"] for r in rows}
        assert (first_bad[CONSUMERS[status][1]] is not None) == bool(code), (status, level, rows)
        if code:
            assert "FAILING" in capsys.readouterr().err


def test_bisect_counts_bad_by_the_policy(trees, capsys):
    for status, level in CASES:
        code = bisection.main(["--consumer", str(trees["consumers"][status]), "--touchpoint", CONSUMERS[status][1],
                               "--good", "good", "--bad", "bad", "--repo", str(trees["repo"]), "--fail-on", level])
        out, err = capsys.readouterr()
        # found (0) where the audit fails (1); "not bad" (1) where it passes (0)
        assert code == 1 - _expected(status, level), (status, level, out, err)
        if code == 1:
            assert "is not bad for this touchpoint" in err


def test_the_fix_verification_fails_by_the_policy(trees, capsys):
    from compat.fixers import all_fixers

    without = [a for f in all_fixers() for a in ("--without", f.name)]  # nothing fixed: the findings remain
    for status, level in CASES:
        code = fix_main(["--consumer", str(trees["consumers"][status]), "--vllm", str(trees["bad"]),
                         "--fail-on", level, *without])
        err = capsys.readouterr().err
        assert code == _expected(status, level), (status, level, err)


def test_the_plugin_fails_by_the_policy(trees, pytester):
    pytester.makepyfile(test_nothing="def test_plain():\n    assert True\n")
    for status, level in CASES:
        result = pytester.runpytest(f"--vllm-compat={trees['bad']}",
                                    f"--vllm-compat-consumer={trees['consumers'][status]}",
                                    f"--vllm-compat-fail-on={level}", "-p", "no:cacheprovider")
        assert int(result.ret) == _expected(status, level), (status, level, result.stdout.str())
    strict = pytester.runpytest(f"--vllm-compat={trees['bad']}", "--vllm-compat-strict",
                                f"--vllm-compat-consumer={trees['consumers']['unknown']}", "-p", "no:cacheprovider")
    assert int(strict.ret) == 1
    bad = pytester.runpytest(f"--vllm-compat={trees['bad']}", "--vllm-compat-fail-on=sometimes")
    assert int(bad.ret) == 4 and "--fail-on 'sometimes'" in bad.stderr.str()


# ---- the build spec ------------------------------------------------------------------------------------------
def test_every_form_parses(tmp_path):
    from compat import buildspec

    wheel = tmp_path / "vllm-9.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    Form, Pick = buildspec.Form, buildspec.Pick
    cases = {
        "installed": (Form.INSTALLED, None, False), "latest": (Form.LATEST, None, False),
        "0.12.0": (Form.VERSION, "0.12.0", False), ">=0.12,<0.17": (Form.RANGE, ">=0.12,<0.17", True),
        "every:>=0.12,<0.17": (Form.RANGE, ">=0.12,<0.17", True),
        "newest:>=0.12,<0.17": (Form.RANGE, ">=0.12,<0.17", False), "newest:latest": (Form.LATEST, None, False),
        str(tmp_path): (Form.PATH, str(tmp_path), False), str(wheel): (Form.PATH, str(wheel), False),
        "https://example.org/vllm-0.12.0-py3-none-any.whl": (Form.URL, None, False),
        "file:///tmp/vllm-0.12.0.tar.gz": (Form.URL, None, False),
        "git+https://github.com/vllm-project/vllm@v0.12.0": (Form.GIT, "https://github.com/vllm-project/vllm", False),
    }
    for text, (form, value, many) in cases.items():
        spec = buildspec.parse(text)
        assert (spec.form, spec.many) == (form, many), text
        if value is not None:
            assert spec.value == value, text
    assert buildspec.parse(">=0.12,<0.17").pick is Pick.EVERY
    assert buildspec.parse("newest:>=0.12,<0.17").pick is Pick.NEWEST
    assert buildspec.parse("git+https://github.com/vllm-project/vllm@v0.12.0").ref == "v0.12.0"


@pytest.mark.parametrize("text", ["", "bogus words", "git+https://x.org/vllm", "newest:not a spec",
                                  "./no/such/vllm", "vllm-0.1.0-py3-none-any.whl"])
def test_bad_specs_are_one_line_and_exit_2_in_every_tool(text, capsys):
    for main in (audit_main, matrix_main, fix_main):
        assert main(["--consumer", "mypkg-not-here", "--vllm", text]) == 2, (main, text)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--vllm" in err, (main, text, err)
    from compat import buildspec

    with pytest.raises(buildspec.BadBuildSpec):
        buildspec.parse(text)


RELEASES = ("9.1.0", "9.2.0", "9.3.0", "9.4.0")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A PEP 503 index on loopback with a tiny pure-Python wheel of vllm per release (GOOD in each)."""
    root = tmp_path_factory.mktemp("index")
    names = []
    for version in RELEASES:
        name = f"vllm-{version}-py3-none-any.whl"
        with zipfile.ZipFile(root / name, "w") as zf:
            zf.writestr("vllm/__init__.py", "")
            zf.writestr("vllm/core.py", textwrap.dedent(GOOD).lstrip())
            zf.writestr("vllm/_version.py", f'__version__ = "{version}"\n')
            zf.writestr(f"vllm-{version}.dist-info/METADATA",
                        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        names.append(name)
    (root / "simple" / "vllm").mkdir(parents=True)
    (root / "simple" / "vllm" / "index.html").write_text(
        "<html><body>" + "".join(f'<a href="../../{n}">{n}</a>' for n in names) + "</body></html>")
    server, url = serve(root, True)
    yield {"url": url, "root": root}
    server.shutdown()


@pytest.fixture()
def offline(index, trees, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_INDEX_URL", f"{index['url']}/simple")
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    return trees["consumers"]["broken"]


def _said(err: str) -> list[str]:
    """The builds a tool said it resolved a spec to (its ``-> a, b, c`` line)."""
    line = next(x for x in err.splitlines() if " -> " in x)
    return [b for b in re.sub(r" \(\d+ builds\)$", "", line.rpartition(" -> ")[2]).split(", ")]


def _plugin_builds(pytester, spec: str, consumer: Path) -> list[str]:
    result = pytester.runpytest(f"--vllm-compat={spec}", f"--vllm-compat-consumer={consumer}", "--collect-only",
                                "-q", "-p", "no:cacheprovider")
    return sorted({m for m in re.findall(r"^vllm-compat::build\[(.*)\]$", result.stdout.str(), re.M)}, key=Version)


def test_each_tool_resolves_a_spec_to_the_same_builds(offline, index, pytester, tmp_path, capsys):
    spec = ">=9.2,<9.4"
    every = [v for v in RELEASES if Version(v) in SpecifierSet(spec)]
    assert len(every) > 1
    for text, want in ((spec, every), (f"every:{spec}", every), (f"newest:{spec}", every[-1:])):
        assert matrix_main(["--consumer", str(offline), "--vllm", text, "--format", "json",
                            "--output", str(tmp_path / "m.json")]) in (0, 1)
        err = capsys.readouterr().err
        matrix = [b["label"] for b in json.loads((tmp_path / "m.json").read_text())["builds"]]
        assert matrix == want and _said(err) == want, (text, matrix, err)
        from compat.fix.pipeline import resolve_builds

        fix_specs, line = resolve_builds(text)
        assert fix_specs == want and _said(line) == want, (text, line)
        assert _plugin_builds(pytester, text, offline) == want, text
        code = audit_main(["--consumer", str(offline), "--vllm", text, "--no-reports", "--confirm", "never",
                           "--format", "json", "--output", str(tmp_path / "a.json")])
        err = capsys.readouterr().err
        if len(want) == 1:  # the audit reads one build: newest: names one
            assert code in (0, 1) and _said(err) == want, err
            assert json.loads((tmp_path / "a.json").read_text())["vllm"]["version"] == want[0]
        else:  # a specifier names several: refused in one line, never narrowed to one silently
            assert code == 2 and err.count("\n") == 1 and "newest:" in err and "reads one build" in err, err


def test_the_audit_takes_a_url_and_a_git_ref_as_the_matrix_does(offline, index, trees, tmp_path, capsys):
    url = f"{index['url']}/vllm-9.3.0-py3-none-any.whl"
    git = f"git+{trees['repo'].as_uri()}@bad"
    for spec, version in ((url, "9.3.0"), (git, "9.2.0")):
        code = audit_main(["--consumer", str(offline), "--vllm", spec, "--no-reports", "--confirm", "never",
                           "--written-for", "none", "--format", "json", "--output", str(tmp_path / "a.json")])
        err = capsys.readouterr().err
        report = json.loads((tmp_path / "a.json").read_text())
        assert code == (1 if version == "9.2.0" else 0), (spec, code, err, [f["message"] for f in report["findings"]])
        assert report["vllm"]["version"] == version and spec in err
        assert matrix_main(["--consumer", str(offline), "--vllm", spec, "--format", "json",
                            "--output", str(tmp_path / "m.json")]) == code
        assert [b["version"] for b in json.loads((tmp_path / "m.json").read_text())["builds"]] == [version]
        capsys.readouterr()
