"""``python -m compat.bisect --touchpoint``: the matrix JSON carries each row's key, bisection takes it exactly,
and a key that names no row or several is refused with the candidates listed (never one picked silently).

A small vLLM-shaped git repository (three commits, read with ``git archive``) and a consumer written here."""

from __future__ import annotations

import json
import subprocess

import pytest

from compat.matrix import bisect as bisection
from compat.matrix.cli import main as matrix_main

from .trees import write_tree

REQUEST = """
    import enum


    class RequestStatus(enum.Enum):
        FINISHED_STOPPED = 1


    class Request:
        def __init__(self, request_id, prompt_token_ids, sampling_params, pooling_params{eos}):
            self.request_id = request_id
"""
UTILS = """
    def get_x(a{flag}):
        return a
"""
# commit 1: all there; commit 2: get_x loses `flag`; commit 3: Request loses `eos_token_id` too
COMMITS = [(", eos_token_id=None", ", flag=False"), (", eos_token_id=None", ""), ("", "")]


def _consumer() -> str:
    """Request called fine at line 5 and six more lines, with `eos_token_id` at line 5x (its key has line 5's key
    as a prefix), and get_x with `flag`."""
    lines = ["from vllm.v1.request import Request", "from vllm.v1.utils import get_x", "", "def fine(sp):",
             '    return Request("id", [1], sp, None)']
    for i in range(6):
        lines += ["", f"def fine{i}(sp):", '    return Request("id", [1], sp, None)']
    while len(lines) < 53:
        lines.append("# -")
    lines += ["def broken(sp):", '    return Request("id", [1], sp, None, eos_token_id=2)', "",
              "def flagged():", "    return get_x(1, flag=True)", ""]
    return "\n".join(lines)


def _line(text: str, code: str) -> int:
    return text.splitlines().index(code) + 1


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect_keys")
    consumer_text = _consumer()
    write_tree(root / "consumer", {"mypkg/__init__.py": "", "mypkg/engine.py": consumer_text})
    repo = root / "vllm"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    for n, (eos, flag) in enumerate(COMMITS, 1):
        write_tree(repo, {"vllm/__init__.py": "", "vllm/v1/__init__.py": "",
                          "vllm/v1/request.py": REQUEST.format(eos=eos), "vllm/v1/utils.py": UTILS.format(flag=flag),
                          "vllm/_version.py": f'__version__ = "9.{n}.0"\n'})
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", f"vllm 9.{n}.0"], check=True)
        subprocess.run(git + ["tag", f"v{n}"], check=True)
    # the matrix of the two ends, as a user would have it before bisecting
    ends = [bisection.checkout_of(repo, tag) for tag in ("v1", "v3")]
    out = root / "matrix.json"
    args = ["--consumer", str(root / "consumer"), "--format", "json", "--output", str(out), "--all-rows"]
    assert matrix_main(args + [a for end in ends for a in ("--vllm", end)]) in (0, 1)
    return root, repo, consumer_text, json.loads(out.read_text())


def _bisect(setup, touchpoint: str, capsys) -> tuple[int, str, str]:
    root, repo, _, _ = setup
    code = bisection.main(["--consumer", str(root / "consumer"), "--touchpoint", touchpoint, "--good", "v1",
                           "--bad", "v3", "--repo", str(repo)])
    out, err = capsys.readouterr()
    return code, out, err


def _key(row: dict) -> str:
    """A row's key made here from its fields (the JSON's own ``key`` is checked against it)."""
    return f"{row['probe']}|{row['touchpoint']}|{row['location']}"


def _keys(setup) -> list[str]:
    return [_key(row) for row in setup[3]["rows"]]


def test_the_matrix_json_carries_the_key_bisect_takes(setup, capsys):
    _, _, text, data = setup
    rows = data["rows"]
    assert rows and all(row["key"] == _key(row) for row in rows)
    assert len({row["key"] for row in rows}) == len(rows)
    line = _line(text, '    return get_x(1, flag=True)')
    row = next(r for r in rows if r["probe"] == "call" and r["location"] == f"mypkg/engine.py:{line}")
    code, out, err = _bisect(setup, row["key"], capsys)
    assert code == 0, err
    assert out.splitlines()[1].endswith("vllm 9.2.0")  # the commit that dropped `flag`
    assert f"at mypkg/engine.py:{line}" in out and err == ""


def test_an_exact_key_is_that_row_even_when_it_is_part_of_another_key(setup, capsys):
    """Line 5's call is fine in every commit; line 5x's (whose key starts with line 5's key) breaks: bisecting
    line 5's key must not take line 5x's breakage."""
    _, _, text, data = setup
    fine, broken = _line(text, '    return Request("id", [1], sp, None)'), \
        _line(text, '    return Request("id", [1], sp, None, eos_token_id=2)')
    assert str(broken).startswith(str(fine))
    key = next(_key(r) for r in data["rows"] if r["probe"] == "call" and r["location"] == f"mypkg/engine.py:{fine}")
    assert any(k != key and k.startswith(key) for k in _keys(setup))
    code, out, err = _bisect(setup, key, capsys)
    assert code == 1 and "is not bad for this touchpoint (ok)" in err, (out, err)


def test_a_part_of_several_keys_is_refused_with_the_candidates(setup, capsys):
    code, out, err = _bisect(setup, "vllm.v1.utils.get_x", capsys)
    lines = err.splitlines()
    matching = sorted(k for k in _keys(setup) if "vllm.v1.utils.get_x" in k)
    assert len(matching) > 1
    assert code == 2 and out == ""
    assert "vllm.v1.utils.get_x" in lines[0] and str(len(matching)) in lines[0]
    assert sorted(line.strip() for line in lines[1:]) == matching


def test_many_candidates_are_cut_then_counted(setup, capsys):
    code, out, err = _bisect(setup, "vllm.v1.request.Request", capsys)
    lines = err.splitlines()
    matching = [k for k in _keys(setup) if "vllm.v1.request.Request" in k]
    assert code == 2 and out == ""
    assert len(matching) > bisection.SHOWN
    shown = [line.strip() for line in lines[1:-1]]
    assert len(shown) == bisection.SHOWN and set(shown) <= set(matching)
    assert str(len(matching) - bisection.SHOWN) in lines[-1] and "more" in lines[-1]


def test_an_unknown_key_is_refused_with_the_nearest_keys(setup, capsys):
    wanted = "call|vllm.v1.utils.get_y|mypkg/engine.py:1"
    code, out, err = _bisect(setup, wanted, capsys)
    lines = err.splitlines()
    assert code == 2 and out == ""
    assert wanted in lines[0] and "no row" in lines[0]
    assert 1 < len(lines) <= bisection.SHOWN + 2
    assert all(line.strip() in _keys(setup) for line in lines[1:1 + bisection.SHOWN])
    assert lines[1].strip().startswith("call|vllm.v1.utils.get_x|")  # the nearest first


def test_a_part_of_one_key_is_taken_and_said(setup, capsys):
    code, out, err = _bisect(setup, "call|vllm.v1.utils.get_x", capsys)
    key = next(k for k in _keys(setup) if k.startswith("call|vllm.v1.utils.get_x"))
    assert code == 0, err
    assert err.count("\n") == 1 and key in err
    assert out.splitlines()[1].endswith("vllm 9.2.0")
