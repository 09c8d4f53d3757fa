"""compat/report/repeats.py: findings alike in all but their place summarised after the first three; anything
that says something else (another message, fix, status or symbol) kept."""

from __future__ import annotations

import pytest

from compat.findings import Finding, Place, Status
from compat.report.repeats import SHOWN, SUMMARISED_OVER, Repeats, summarised

pytestmark = pytest.mark.unit


def _file(i: int, message: str = "file has 0 bytes", **kw) -> Finding:
    name = f"hs_{i}.safetensors"
    return Finding("readable", kw.pop("status", Status.BROKEN), name, name, None, message, place=Place(name), **kw)


def _line(i: int, symbol: str) -> Finding:
    return Finding("signature", Status.BROKEN, symbol, f"pkg/a.py:{i}", None, "gone", place=Place("pkg/a.py", i))


def test_a_kind_repeated_past_the_limit_keeps_its_first_findings_and_one_summary_where_the_last_was():
    findings = [_file(i) for i in range(20)]
    findings.insert(7, _file(99, "another message"))
    out = summarised(findings)
    assert [f.symbol for f in out[:SHOWN]] == ["hs_0.safetensors", "hs_1.safetensors", "hs_2.safetensors"]
    summary = out[SHOWN]
    assert isinstance(summary, Repeats) and len(summary.more) == 20 - SHOWN
    assert summary.names() == ["hs_3.safetensors", "hs_4.safetensors", "hs_5.safetensors", "…",
                               "hs_19.safetensors"]
    assert out[SHOWN + 1].message == "another message" and len(out) == SHOWN + 2
    assert f"{20 - SHOWN:,} more findings alike" in summary.text()


def test_up_to_the_limit_everything_is_shown():
    findings = [_file(i) for i in range(SUMMARISED_OVER)]
    assert summarised(findings) == findings


@pytest.mark.parametrize("differ", [
    lambda i: _file(i, f"file has {i} bytes"),
    lambda i: _file(i, fix=f"fix {i}"),
    lambda i: _file(i, status=[Status.BROKEN, Status.CHANGED, Status.UNKNOWN, Status.ERROR][i % 4],
                    message=f"m{i // 4}"),
    lambda i: _line(i, f"vllm.Thing{i}"),  # one message about different names: what differs is what it says
])
def test_findings_that_say_different_things_are_all_shown(differ):
    findings = [differ(i) for i in range(4 * SUMMARISED_OVER)]
    assert summarised(findings) == findings
