"""What keeps a cold audit fast without changing an answer: the collector paused while parse trees are built,
the build's files read once, a class's ``self.`` assignments walked only as far as needed, definitions found by
name (``compat/syntax.py``, ``compat/vllm/modules.py``, ``compat/vllm/classes.py``)."""

from __future__ import annotations

import ast
import gc
import re
import textwrap
import threading
from pathlib import Path

from compat.facts.defaults import _lines
from compat.syntax import collector_paused
from compat.vllm.classes import _self_assignments
from compat.vllm.definitions import SelfAssignments
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo, Found


def _surface(root: Path, files: dict[str, str]) -> StaticSurface:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return StaticSurface(root, BuildInfo("vllm", "1.0", "test tree", "static", str(root)), "vllm")


def test_the_collector_is_paused_inside_and_restored_by_the_last_to_leave():
    was = gc.isenabled()
    try:
        gc.enable()
        with collector_paused():
            assert not gc.isenabled()
            with collector_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer user is still inside
        assert gc.isenabled()
        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        (gc.enable if was else gc.disable)()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_leaving_collects_what_was_made_inside_and_leaves_what_lived_before_unwalked(monkeypatch):
    """The last to leave collects the cyclic garbage made inside, with what lived before frozen (not walked); a
    full collection follows only once the process has grown by half since the last one."""
    import weakref

    from compat import syntax

    was = gc.isenabled()
    full = []

    def count(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(gc.get_freeze_count())

    gc.callbacks.append(count)
    try:
        gc.enable()
        monkeypatch.setattr(syntax, "_after_full", 1000)
        monkeypatch.setattr(syntax, "_resident", lambda: 1400)  # grown by less than half
        with collector_paused():
            assert gc.get_freeze_count() > 0  # what lived before: out of the collector's sight
            made = weakref.ref(_Node())
            assert made() is not None
        assert made() is None and gc.get_freeze_count() == 0
        assert len(full) == 1 and full[0] > 0  # one collection, the frozen heap aside
        monkeypatch.setattr(syntax, "_resident", lambda: 1600)  # grown by more than half: the whole heap too
        with collector_paused():
            pass
        assert len(full) == 3 and full[2] == 0 and syntax._after_full == 1600
    finally:
        gc.callbacks.remove(count)
        (gc.enable if was else gc.disable)()


def test_concurrent_users_turn_the_collector_back_on_only_when_all_left():
    was = gc.isenabled()
    gc.enable()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(10)

    try:
        thread = threading.Thread(target=other)
        with collector_paused():
            thread.start()
            assert inside.wait(10)
        assert not gc.isenabled()  # the other thread is still building
        leave.set()
        thread.join(10)
        assert gc.isenabled()
    finally:
        leave.set()
        (gc.enable if was else gc.disable)()


CLASS = """
class Runner:
    def __init__(self, config):
        self.config = config
        self.model = None
        if config:
            self.cache: dict = {}
        self.steps += 1

    def load(self):
        self.model = build()
        other.model = 1
        self.extra, (self.pair, _) = 1, (2, 3)

    @staticmethod
    def helper():
        return 1
"""


def _full_walk(body: list[ast.stmt], name: str):
    """The first ``self.<name> =`` of a class body, found by walking it all (what the lazy index must agree with)."""
    return next(((stmt, method) for attr, stmt, method in _self_assignments(body) if attr == name), None)


def test_self_assignments_are_found_lazily_and_as_a_full_walk_finds_them():
    body = ast.parse(CLASS).body[0].body  # type: ignore[attr-defined]
    index = SelfAssignments(_self_assignments(body))
    for name in ("pair", "config", "model", "cache", "steps", "extra", "missing", "config"):
        assert index.first(name) == _full_walk(body, name), name
    stmt, method = index.first("model")  # type: ignore[misc]
    assert (stmt.lineno, method.name) == (5, "__init__")  # the first assignment, not load()'s
    assert index.first("missing") is None


def test_a_member_and_an_instance_attribute_read_from_the_indexes(tmp_path):
    surface = _surface(tmp_path, {"vllm/__init__.py": "", "vllm/runner.py": CLASS + "\n    helper = 2\n"})
    runner = surface.lookup("vllm.runner.Runner")
    assert isinstance(runner, Found)
    helper = surface.member(runner, "helper")
    assert isinstance(helper, Found) and helper.kind == "attribute"  # the last definition in the body wins
    model = surface.member(runner, "model")
    assert isinstance(model, Found) and model.kind == "instance-attribute" and model.location.line == 5
    assert surface.member(runner, "pair").location.line == 13  # type: ignore[union-attr]
    assert not isinstance(surface.member(runner, "missing"), Found)


def test_definitions_are_found_by_name_and_the_files_read_once(tmp_path):
    surface = _surface(tmp_path, {
        "vllm/__init__.py": "class Config:\n    pass\n",
        "vllm/a/__init__.py": "",
        "vllm/a/b.py": "async def Config():\n    class Config: ...\nclass ConfigX: ...\n",
        "vllm/c.py": "x = 'class Config'\ndef Config(): ...\n",
    })
    assert surface.definitions("Config") == ("vllm.Config", "vllm.a.b.Config", "vllm.c.Config")
    assert surface.definitions("ConfigX") == ("vllm.a.b.ConfigX",)
    assert surface.definitions("Nothing") == ()
    texts = surface.index.texts()
    (tmp_path / "vllm" / "d.py").write_text("class Config: ...\n")
    assert surface.index.texts() is texts  # one reading per build
    assert [p.relative_to(tmp_path).as_posix() for p, _ in texts] == [
        "vllm/__init__.py", "vllm/a/__init__.py", "vllm/a/b.py", "vllm/c.py"]


def test_match_lines_are_counted_as_from_the_start_of_the_file():
    data = b"a.x\n\nb = a.x + a.x\n" * 50 + b"a.\n x\n"
    pattern = re.compile(rb"a\s*\.\s*x\b")
    assert _lines(pattern, data) == {data.count(b"\n", 0, m.start()) + 1 for m in pattern.finditer(data)}
    assert _lines(pattern, b"nothing") == set()
