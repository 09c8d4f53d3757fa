"""The terminal report reads from the top: the verdict first (and last), findings in the order of their files and
lines as numbers, findings with one cause and one fix at one place shown once with what differs."""

from __future__ import annotations

from dataclasses import dataclass

from compat.findings import Finding, Place, Status, by_place
from compat.report import terminal


@dataclass
class Result:
    """What the renderer reads of a result (``compat.report.reportable.Reportable``)."""

    findings: tuple[Finding, ...]
    tool: str = "vllm-compat"
    source_root: str = "."

    def counts(self) -> dict[str, int]:
        out = {s.value: sum(f.status is s for f in self.findings) for s in Status}
        return out | {"allowed": sum(bool(f.allowed) for f in self.findings)}

    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.status is Status.BROKEN]

    @property
    def exit_code(self) -> int:
        return 1 if self.failing() else 0

    def title(self) -> str:
        return "t"

    def facts(self) -> list[tuple[str, str]]:
        return [("consumer", "c 1.0")]

    def as_json(self) -> dict:
        return {}


def _finding(line: int, symbol: str, fix: str = "use self.embed_input_ids", status=Status.BROKEN, place=True):
    location = f"pkg/worker.py:{line}"
    return Finding("model", status, symbol, location, None, f"{symbol} lacks get_input_embeddings", fix=fix,
                   place=Place("pkg/worker.py", line) if place else None)


def test_the_verdict_comes_first_and_last():
    lines = terminal.render(Result((_finding(30, "A"),))).splitlines()
    assert lines[0].startswith("FAIL: 0 ok, 1 broken") and lines[-1] == lines[0]
    assert lines[2].startswith("consumer : c 1.0")


def test_places_sort_by_line_as_a_number_with_or_without_a_place():
    findings = [_finding(109, "A"), _finding(30, "B", place=False), _finding(9, "C")]
    assert [f.symbol for f in sorted(findings, key=by_place)] == ["C", "B", "A"]
    colon = Finding("x", Status.OK, "s", "req-12:00:07.safetensors", None, "m")  # a name holding ':', no line
    assert by_place(colon) == ("req-12:00:07.safetensors", 0)


def test_one_fix_at_one_place_is_shown_once_with_the_symbols_it_covers():
    findings = (_finding(30, "LlamaForCausalLM"), _finding(30, "Qwen3ForCausalLM"), _finding(30, "DeepseekV2"),
                _finding(30, "Other", fix="another fix"), _finding(45, "Llama2"))
    text = terminal.render(Result(findings))
    assert text.count("fix    : use self.embed_input_ids") == 2  # line 30's three, and line 45's own
    assert "pkg/worker.py:30 (3 findings, one fix)" in text
    assert "also  : Qwen3ForCausalLM" in text and "also  : DeepseekV2" in text
    assert "fix    : another fix" in text and "symbol: Other" in text
