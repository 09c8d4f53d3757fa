"""compat/gate/rules/reading.py: ``readable`` (the file opens; under --values, its tensor values read) and ``layout``
(a known layout, the one --layout names, every entry of the right type, the layout of most of its directory)."""

from __future__ import annotations

import pytest

from compat.findings import Status
from compat.gate.read.layouts import Layout
from compat.gate.read.views import FailureKind, ReadFailure
from compat.gate.rules.reading import LAYOUT, READABLE
from compat.gate.rules.rule import Phase

from .conftest import H, ids, layered, one, spec, write_eagle, write_vllm

BROKEN = Status.BROKEN


def _garbage(gate):
    (gate.root / "data_0.pt").write_bytes(b"not a tensor file at all")


def _truncated(gate):
    path = write_vllm(gate.root / "hs_0.safetensors", ids(6), layered(6, H, 3))
    path.write_bytes(path.read_bytes()[:-40])


def _vllm_file(gate):
    write_vllm(gate.root / "hs_0.safetensors", ids(6), layered(6, H, 3))


def _bad_entry(gate):
    entries = spec()
    entries["hidden_states"] = "not layers"
    gate.write("data_0.pt", entries)


def _outlier(gate):
    for i in range(3):
        entries = spec()
        entries["input_ids"] = ids(6, start=3 + 7 * i)
        gate.write(f"data_{i}.pt", entries)
    write_eagle(gate.root / "data_3.ckpt", ids(6), layered(6, H, 1)[0])


@pytest.mark.parametrize(("rule", "write", "options", "says"), [
    ("readable", _garbage, {}, "not a torch.save file"),
    ("readable", _truncated, {}, "truncated (40 bytes missing) [HeaderError]"),
    ("layout", _vllm_file, {"layout": Layout.SPECULATORS_PT}, "pass the right --layout"),
    ("layout", _bad_entry, {}, "hidden_states"),
    ("layout", _outlier, {}, "this sample follows eagle, but its dataset is speculators"),
], ids=["unreadable", "truncated", "not the layout named", "entry of the wrong type", "layout outlier"])
def test_reading_rules(gate, rule, write, options, says):
    write(gate)
    found = one(gate.findings(rule, **options), BROKEN, "")
    assert says in found.message + (found.fix or ""), (found.message, found.fix)


def test_values_that_cannot_be_read(gate):
    """No file here reads its header and then fails on its values, so the VALUES check is called on the failure."""
    check = READABLE.also[Phase.VALUES]
    [finding] = check(ReadFailure(FailureKind.UNREADABLE, "short read", "OSError"), None)
    assert finding.message == "reading tensor values failed: OSError: short read" and finding.found == "OSError"
    assert "re-extract" in finding.fix
    assert check(object(), None) == ()


def test_readable_ignores_a_layout_mismatch_and_layout_an_unreadable_file():
    unreadable = ReadFailure(FailureKind.UNREADABLE, "bad", "ValueError")
    mismatch = ReadFailure(FailureKind.LAYOUT_MISMATCH, "no layout", "KeyError")
    assert READABLE.check(mismatch, None) == () and LAYOUT.check(unreadable, None) == ()
    assert READABLE.structural and LAYOUT.structural


@pytest.mark.parametrize("write", [lambda g: g.write("data_0.pt", spec()), _vllm_file,
                                   lambda g: write_eagle(g.root / "data_0.ckpt", ids(6), layered(6, H, 1)[0])],
                         ids=["speculators", "vllm", "eagle"])
def test_a_sound_file_reads(gate, write):
    write(gate)
    found = [f for f in gate.run(values=True).findings if f.check in ("readable", "layout")]
    assert not found, [f.message for f in found]
