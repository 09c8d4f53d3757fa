"""compat.facts.reach on small builds: the state the defs reached write and read (config fields, module globals,
attributes of the objects they run on), and which of those writes and reads are not what they seem: a read of
what the def itself just set, a read passed on to a def that tests it first, a write that puts back what the
constructor set or what the def saved, an attribute of an object being made."""

from __future__ import annotations

import textwrap

import pytest

from compat.facts import reach

CONFIG = "class CacheConfig:\n    def __init__(self):\n        self.layout = None\n"


def _build(body: str) -> dict[str, str]:
    return {"vllm/config/__init__.py": "from vllm.config.cache import CacheConfig\n\n\nclass VllmConfig:\n"
                                       "    def __init__(self, cache_config: CacheConfig = None):\n"
                                       "        self.cache_config = cache_config\n",
            "vllm/config/cache.py": CONFIG,
            "vllm/engine.py": textwrap.dedent(body)}


ENGINE = """
    _TABLE = None


    class Engine:
        def __init__(self, vllm_config):
            self.cache_config = vllm_config.cache_config
            self.slots = [None] * 4
            self.pending = None

        def run(self, x):
            {run}

        def send(self, value, sink=None):
            {send}
"""


def _reach(trees, run: str, send: str = "pass"):
    body = ENGINE.format(run=textwrap.indent(textwrap.dedent(run), " " * 12).strip(),
                         send=textwrap.indent(textwrap.dedent(send), " " * 12).strip())
    return reach.read(trees.vllm(_build(body)).inner, "vllm.engine.Engine.run")


def _state(items) -> set[tuple[str, str, bool]]:
    return {(i.kind, i.field, getattr(i, "tested", False)) for i in items}


# (what Engine.run does, what Engine.send does, the writes (kind, field), the reads (kind, field, tested))
CASES = [
    pytest.param("self.pending = x", "pass", {("instance", "pending")}, set(), id="an attribute written"),
    pytest.param("return self.pending", "pass", set(), {("instance", "pending", False)}, id="an attribute read"),
    pytest.param("if self.pending is None:\n    return 0\nreturn self.pending", "pass", set(),
                 {("instance", "pending", True)}, id="read after a test of it"),
    pytest.param("self.pending = x\nreturn self.pending.y", "pass", {("instance", "pending")}, set(),
                 id="read of what the def itself just set"),
    pytest.param("if x:\n    self.pending = x\nreturn self.pending", "pass", {("instance", "pending")},
                 {("instance", "pending", False)}, id="set on one branch only: still a read of earlier state"),
    pytest.param("return self.send(1, sink=self.pending)", "if sink is not None:\n    sink.append(value)", set(),
                 {("instance", "pending", True)}, id="passed on to a def that tests it first"),
    pytest.param("return self.send(1, sink=self.pending)", "sink.append(value)", set(),
                 {("instance", "pending", False)}, id="passed on to a def that uses it untested"),
    pytest.param("return self.send(1, self.pending)", "for s in [s for s in (sink, value) if s]:\n    s.go()", set(),
                 {("instance", "pending", True)}, id="passed on positionally, filtered by a test"),
    pytest.param("self.slots = [None] * 4", "pass", set(), set(), id="puts back what the constructor set"),
    pytest.param("self.slots = [None] * 8", "pass", {("instance", "slots")}, set(), id="not what the constructor set"),
    pytest.param("saved = self.cache_config.layout\nself.cache_config.layout = 'tmp'\n"
                 "self.cache_config.layout = saved", "pass", set(), {("config", "layout", False)},
                 id="a config field saved and put back"),
    pytest.param("try:\n    self.cache_config.layout = x\nfinally:\n    self.cache_config.layout = None", "pass",
                 set(), set(), id="a config field put back in finally"),
    pytest.param("self.cache_config.layout = x", "pass", {("config", "layout")}, set(), id="a config field written"),
    pytest.param("global _TABLE\n_TABLE = x", "pass", {("global", "_TABLE")}, set(), id="a module global rebound"),
    pytest.param("return _TABLE", "pass", set(), {("global", "_TABLE", False)}, id="a module global read"),
]


@pytest.mark.parametrize(("run", "send", "writes", "reads"), CASES)
def test_the_state_a_def_writes_and_reads(trees, run, send, writes, reads):
    found = _reach(trees, run, send)
    assert {(w.kind, w.field) for w in found.writes if w.function.endswith(".run")} == writes, found.writes
    assert {r for r in _state(found.reads) if r[0] != "instance" or r[1] in ("pending", "slots")} >= reads, \
        found.reads
    assert {(k, f) for k, f, _ in _state(found.reads) if f in ("pending", "slots", "layout", "_TABLE")} == \
        {(k, f) for k, f, _ in reads}, found.reads


def test_the_constructor_s_attributes_are_an_object_being_made(trees):
    found = reach.read(trees.vllm(_build(ENGINE.format(run="pass", send="pass"))).inner, "vllm.engine.Engine")
    made = [w for w in found.writes if w.kind == reach.INSTANCE]
    assert {w.field for w in made} == {"cache_config", "slots", "pending"} and all(w.constructing for w in made)
