"""Safe, exact reports: what a file holds (its name, a tensor's name, a pickle global's name) never reaches a
report as a control sequence; file names keep every character; a run that cannot go on still writes JSON;
findings say what happened, once, in bounded words."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import torch
from safetensors.torch import save_file

from compat.gate.cli import main
from compat.gate.collect import MESSAGE_LIMIT
from compat.gate.options import GateOptions
from compat.gate.runner import run_gate
from tests.gate_files import layered, markdown_text, markdown_tokens, write_speculators, write_vllm

H = 16
HOSTILE = "\x1b]0;pwned\x07\x1b[2J"
SHOWN_AS = "\\x1b]0;pwned\\x07\\x1b[2J"
FORMATS = ("terminal", "json", "markdown", "junit", "github")


def _gate(tmp_path: Path, *args: str) -> tuple[int, str]:
    """The command line's report (written to a file, as a CI job would) and its exit code."""
    out = tmp_path / "report.out"
    code = main([*args, "--no-progress", "--output", str(out)])
    return code, out.read_text(encoding="utf-8") if out.exists() else ""


def _pickle_naming(path: Path, pickle: bytes) -> Path:
    """A torch.save archive whose data.pkl is ``pickle``, the rest as torch wrote it."""
    buffer = io.BytesIO()
    torch.save({"a": torch.zeros(1)}, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, zipfile.ZipFile(path, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, pickle if name.endswith("data.pkl") else src.read(name))
    return path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("hostile")
    save_file({f"layer{HOSTILE}": torch.zeros(2)}, str(directory / "names.safetensors"))
    _pickle_naming(directory / "global.pt", b"\x80\x02cos\nsystem" + HOSTILE.encode() + b"\n)R.")
    return directory


@pytest.mark.parametrize("fmt", FORMATS)
def test_control_sequences_in_files_never_reach_a_report(hostile, tmp_path, fmt):
    code, text = _gate(tmp_path, str(hostile), "--format", fmt)
    assert code == 1 and text
    assert "\x1b" not in text and "\x07" not in text, fmt
    if fmt == "json":
        report = json.loads(text)
        assert "\\u001b" not in text and "\\u0007" not in text
        messages = {f["symbol"]: f["message"] for f in report["findings"]}
        assert f"layer{SHOWN_AS}" in messages["names.safetensors"]
        assert f"os.system{SHOWN_AS}" in messages["global.pt"]
        return
    if fmt == "junit":
        ET.fromstring(text)  # valid XML: raw control characters are not
    if fmt == "markdown":
        text = markdown_text(text)  # markup characters are escaped in the source: what a reader sees counts
    assert f"layer{SHOWN_AS}" in text and f"os.system{SHOWN_AS}" in text, text


COLON = "req-2024-01-01T12:00:07.safetensors"


def test_file_names_keep_their_colons_and_a_sample_is_not_a_line(tmp_path):
    data = tmp_path / "data"
    write_vllm(data / COLON, torch.arange(8), torch.zeros(8, 4, H)[:, :, :8])  # hidden 8 where the list has 16
    good = {"input_ids": torch.arange(8), "hidden_states": layered(8, H, 4), "loss_mask": torch.ones(8).long()}
    bad = dict(good, hidden_states=layered(6, H, 4))  # rows missing
    torch.save([good, bad], data / "batch:1.pt")
    _, github = _gate(tmp_path, str(data), "--format", "github", "--hidden-size", str(H))
    annotations = [line for line in github.splitlines() if line.startswith("::error ")]
    named = [a for a in annotations if "req-2024" in a]
    assert named and all("file=data/req-2024-01-01T12%3A00%3A07.safetensors," in a or
                         "file=req-2024-01-01T12%3A00%3A07.safetensors," in a for a in named), named
    sample = [a for a in annotations if "batch" in a]
    assert sample and all("batch%3A1.pt#1" in a.split("title=")[1] for a in sample), sample
    assert not any("line=" in a for a in annotations), annotations
    _, junit = _gate(tmp_path, str(data), "--format", "junit", "--hidden-size", str(H))
    cases = ET.fromstring(junit).findall("testcase")
    files = {c.get("file") for c in cases}
    assert COLON in files and "batch:1.pt" in files and not any(c.get("line") for c in cases), files


def test_a_good_file_whose_name_is_not_utf8_passes_values_and_reads_xff(tmp_path):
    good = write_vllm(tmp_path / "x.safetensors", torch.arange(8), layered(8, H, 4))
    os.rename(bytes(good), os.fsencode(tmp_path) + b"/req-\xff.safetensors")
    pt = write_speculators(tmp_path / "y.pt", torch.arange(8), layered(8, H, 4))
    os.rename(bytes(pt), os.fsencode(tmp_path) + b"/data_\xfe.pt")
    result = run_gate(GateOptions(paths=(tmp_path,), values=True))
    assert not result.failing(), [f.message for f in result.failing()]
    assert result.summary.value_bytes > 0
    code, text = _gate(tmp_path, str(tmp_path), "--format", "json", "--values", "--show-ok")
    assert code == 0 and "\\\\xff" in text and "\\\\xfe" in text and "\\udc" not in text
    symbols = {f["symbol"] for f in json.loads(text)["findings"]}
    assert symbols == {"req-\\xff.safetensors", "data_\\xfe.pt"}


def test_a_run_that_cannot_go_on_still_writes_json_naming_the_error(tmp_path, capsys):
    write_speculators(tmp_path / "data_0.pt", torch.arange(8), layered(8, H, 4))
    (tmp_path / "model").mkdir()
    no_model = ["--model", str(tmp_path / "model")]  # a model directory without its config.json
    assert main([str(tmp_path), "--format", "json", "--no-progress", *no_model]) == 2
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["schema"] == "compat.gate/1" and document["exit_code"] == 2
    assert document["error"]["type"] == "CompatError" and "config.json" in document["error"]["message"]
    assert captured.err.count("\n") == 1 and "config.json" in captured.err
    out = tmp_path / "report.json"
    assert main([str(tmp_path), "--format=json", "--output", str(out), "--bogus-flag"]) == 2
    assert "--bogus-flag" in json.loads(out.read_text())["error"]["message"] and not capsys.readouterr().out
    assert main([str(tmp_path), "--no-progress", *no_model]) == 2 and not capsys.readouterr().out  # no JSON asked


def _finding(tmp_path: Path, name: str, *flags: str) -> dict:
    _, text = _gate(tmp_path, str(tmp_path / "data"), "--format", "json", *flags)
    (found,) = [f for f in json.loads(text)["findings"] if f["symbol"] == name and f["status"] != "ok"]
    return found


def test_a_truncated_archive_is_reported_truncated(tmp_path):
    # Large enough that torch's reader, looking for the directory in the last 64 KiB, fails with EINVAL.
    good = write_speculators(tmp_path / "data" / "good.pt", torch.arange(512), layered(512, 256, 4)).read_bytes()
    for cut in (30000, len(good) // 2, len(good) - 1):
        (tmp_path / "data" / f"cut_{cut}.pt").write_bytes(good[:cut])
    for cut in (30000, len(good) // 2, len(good) - 1):
        f = _finding(tmp_path, f"cut_{cut}.pt")
        assert f["probe"] == "readable" and f["message"].startswith(f"truncated: {cut} bytes"), f["message"]
        assert "Invalid argument" not in f["message"]


def test_a_pickle_that_would_run_code_names_its_global_and_never_advises_running_it(tmp_path):
    class System:
        def __reduce__(self):
            return os.system, ("true",)

    class Eval:
        def __reduce__(self):
            return eval, ("1",)

    (tmp_path / "data").mkdir()
    torch.save({"input_ids": torch.arange(4), "x": System()}, tmp_path / "data" / "system.pt")
    torch.save({"input_ids": torch.arange(4), "x": Eval()}, tmp_path / "data" / "eval.pt")
    for name, global_ in (("system.pt", f"{os.system.__module__}.system"), ("eval.pt", "eval")):
        f = _finding(tmp_path, name)
        assert f["probe"] == "readable" and f"GLOBAL {global_}," in f["message"], f["message"]
        for fmt in FORMATS:
            _, text = _gate(tmp_path, str(tmp_path / "data"), "--format", fmt)
            assert "False" not in text and "weights_only=False" not in text and "trust" not in text, (fmt, text)


def test_a_kept_batch_dimension_is_one_finding(tmp_path):
    write_speculators(tmp_path / "data" / "b.pt", torch.arange(8), [h.unsqueeze(0) for h in layered(8, H, 4)])
    _, text = _gate(tmp_path, str(tmp_path / "data"), "--format", "json")
    (f,) = [f for f in json.loads(text)["findings"] if f["status"] != "ok"]
    assert f["probe"] == "layer_shape" and "batch dimension" in f["message"] and "squeeze(0)" in f["fix"]


def test_long_lists_are_cut_with_a_count_of_what_was_left_out(tmp_path):
    layers = [h if i % 2 else h[:, :8] for i, h in enumerate(layered(8, H, 200))]
    write_speculators(tmp_path / "data" / "many.pt", torch.arange(8), layers)
    save_file({f"tensor_{i:05}_{'x' * 40}": torch.zeros(1) for i in range(3000)},
              str(tmp_path / "data" / "names.safetensors"))
    save_file({"y" * 5000: torch.zeros(1)}, str(tmp_path / "data" / "long.safetensors"))
    _, text = _gate(tmp_path, str(tmp_path / "data"), "--format", "json", "--hidden-size", str(H))
    findings = json.loads(text)["findings"]
    shape = next(f for f in findings if f["symbol"] == "many.pt" and f["probe"] == "layer_shape")
    assert shape["message"].endswith("and 195 more") and len(shape["message"]) < 300, shape["message"]
    (names,) = [f for f in findings if f["symbol"] == "names.safetensors" and f["status"] != "ok"]
    assert "and 2992 more" in names["message"] and len(names["message"]) < 1000, names["message"]
    (long,) = [f for f in findings if f["symbol"] == "long.safetensors" and f["status"] != "ok"]
    left = len(long["message"]) - MESSAGE_LIMIT  # what no rule foresees (one name of 5,000 characters): the cap
    assert 0 < left < 100 and long["message"].endswith(" more characters)"), long["message"][-80:]
    assert all(len(f["message"]) < MESSAGE_LIMIT + 100 for f in findings)



MARKUP = "x`y [a](https:e.example) <img src=z> *b* |c| &amp; ``"


def test_markdown_shows_names_as_written_never_as_markup(tmp_path):
    """A name may hold what Markdown reads as a link, an image, HTML, emphasis, code or a table pipe: the
    pull-request comment shows it as written wherever file-derived text appears (table cells and lists)."""
    directory = tmp_path / "data"
    directory.mkdir()
    save_file({f"layer{MARKUP}": torch.zeros(2)}, str(directory / f"{MARKUP}.safetensors"))
    code, text = _gate(tmp_path, str(directory), "--format", "markdown", "--show-ok")
    assert code == 1
    tokens = markdown_tokens(text)
    inline = {child.type for t in tokens if t.type == "inline" for child in t.children or ()}
    assert not inline & {"link_open", "image", "html_inline", "em_open", "strong_open"}, inline
    html = [t.content.strip() for t in tokens if t.type == "html_block"]
    assert all(block.startswith(("<details><summary>", "</details>")) for block in html), html  # the report's own
    shown = markdown_text(text)
    assert f"{MARKUP}.safetensors" in shown and f"layer{MARKUP}" in shown, shown
    widths = []  # cells per table row: a pipe in a name adds none
    for i, t in enumerate(tokens):
        if t.type == "tr_open":
            row = tokens[i + 1:tokens.index(next(u for u in tokens[i:] if u.type == "tr_close"), i)]
            widths.append(sum(u.type in ("td_open", "th_open") for u in row))
    assert widths and set(widths) == {6}, widths  # the counts table (5 statuses, allowed), the findings table


PINGS = "@someone-see-https://evil.example/x-www.evil.com-#12-a@b.co"


def test_markdown_makes_no_mention_issue_reference_or_bare_link_of_a_name(tmp_path):
    """GitHub turns ``@someone`` into a notification, ``#12`` into an issue link and ``https://…``/``www.…`` into
    links even in plain text: a tensor's or file's name holding them must do none of it, and read the same."""
    directory = tmp_path / "data"
    directory.mkdir()
    save_file({f"layer{PINGS}": torch.zeros(2)}, str(directory / "pings.safetensors"))
    code, text = _gate(tmp_path, str(directory), "--format", "markdown", "--show-ok")
    assert code == 1
    shown = markdown_text(text)
    assert f"layer{PINGS}" in shown.replace("\u200b", ""), shown
    assert not re.search(r"@[A-Za-z0-9]", shown), shown  # a mention, or an email link
    assert not re.search(r"https?://|www\.|#[0-9]", shown), shown


@pytest.mark.parametrize("fmt", FORMATS)
def test_noncharacters_in_names_keep_every_report_readable(tmp_path, fmt):
    """U+FFFE and U+FFFF are not characters XML 1.0 allows: one in a tensor or file name made the JUnit report
    unparseable; no format shows them raw."""
    directory = tmp_path / "data"
    directory.mkdir()
    save_file({"layer\uffff\ufffe\ufdd0": torch.zeros(2)}, str(directory / "x\uffff.safetensors"))
    code, text = _gate(tmp_path, str(directory), "--format", fmt)
    assert code == 1 and text
    assert not re.search("[\ufdd0-\ufdef\ufffe\uffff]", text), fmt
    if fmt == "junit":
        ET.fromstring(text)
    shown = json.dumps(text) if fmt == "json" else text
    assert "\\\\uffff" in shown or "\\uffff" in shown, shown[:2000]


@pytest.mark.parametrize("target", ["/proc/self/environ", "/proc/self/cmdline"])
def test_links_to_system_files_are_never_read_and_links_outside_only_when_asked(tmp_path, target, monkeypatch):
    """A dataset's links to /proc/self/environ or /proc/self/cmdline were read and 8 bytes of each reached the
    report; a link out of the dataset reads files nobody named. Right data beside them still passes."""
    monkeypatch.setenv("COMPAT_SECRET_PROBE", "hunter2-secret")
    data = tmp_path / "data"
    write_vllm(data / "hs_0.safetensors", torch.arange(6), layered(6, H, 3))
    outside = tmp_path / "elsewhere"
    write_vllm(outside / "hs_9.safetensors", torch.arange(6), layered(6, H, 3, seed=9))
    os.symlink(target, data / "hs_1.safetensors")
    os.symlink(target, data / "hs_2.pt")
    os.symlink(outside / "hs_9.safetensors", data / "hs_3.safetensors")
    os.symlink(outside, data / "more")
    for fmt in FORMATS:
        code, text = _gate(tmp_path, str(data), "--format", fmt)
        assert code == 1 and "hunter2" not in text and "COMPAT_SECRET" not in text, fmt
    report = json.loads(_gate(tmp_path, str(data), "--format", "json")[1])
    broken = {f["symbol"]: f["message"] for f in report["findings"] if f["status"] == "broken"}
    assert set(broken) == {"hs_1.safetensors", "hs_2.pt", "hs_3.safetensors", "more"}, broken
    assert all("a system file: never read" in broken[name] for name in ("hs_1.safetensors", "hs_2.pt")), broken
    assert all("outside the dataset's root" in broken[name] for name in ("hs_3.safetensors", "more")), broken
    followed = json.loads(_gate(tmp_path, str(data), "--format", "json", "--follow-links")[1])
    broken = {f["symbol"] for f in followed["findings"] if f["status"] == "broken"}
    assert broken == {"hs_1.safetensors", "hs_2.pt"}, broken  # /proc stays unread whatever the flag
    assert followed["summary"]["files"] == 5 and followed["options"]["follow_links"] is True


@pytest.mark.parametrize("fmt", FORMATS)
def test_many_files_alike_are_summarised_where_people_read_and_listed_where_programs_do(tmp_path, fmt):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(40):  # cut short by a crashed writer: each file's finding says the same
        (data / f"hs_{i}.safetensors").write_bytes(b"")
    write_vllm(data / "hs_40.safetensors", torch.arange(5), layered(5, H, 3))  # one right file among them
    code, text = _gate(tmp_path, str(data), "--format", fmt)
    assert code == 1
    named = set(re.findall(r"hs_\d+\.safetensors", text))
    if fmt in ("json", "junit"):  # each file's verdict, for a program
        assert {f"hs_{i}.safetensors" for i in range(40)} <= named
        if fmt == "json":
            findings = json.loads(text)["findings"]
            assert sum(f["status"] == "broken" for f in findings) == 40
        return
    assert "37 more findings alike" in text
    # the first three in full, then a few of the rest by name and the last one
    assert {"hs_0.safetensors", "hs_1.safetensors", "hs_39.safetensors"} <= named
    assert len(named) <= 3 + 4 + 1
