"""A wrapper whose ``__getattr__`` forwards what it lacks to the object it wraps: members the wrapper lacks are the
wrapped object's, where the code that built the wrapper says what it wraps (``compat.vllm.forwarding``); any
other ``__getattr__``, or a wrapped object of unknown class, leaves the member unknown."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from compat.audit.pipeline import AuditOptions, Auditor
from compat.vllm.builds import OpenedBuild, static_surface
from compat.vllm.forwarding import forwarded_attribute
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo, Found, Missing, Unresolved
from tests.conftest import run_cli
from tests.test_scan import scan_source
from tests.trees import write_tree

WRAPPERS = '''
from typing import Any, Callable


class DictWrapper:
    """Forwards through a local bound to self.__dict__.get (no recursion before runnable is set)."""

    def __init__(self, runnable: Callable[..., Any], config: object) -> None:
        self.runnable = runnable
        self.config = config

    def __getattr__(self, key: str) -> Any:
        runnable = self.__dict__.get("runnable")
        if runnable is not None and hasattr(runnable, key):
            return getattr(runnable, key)
        raise AttributeError(key)

    def unwrap(self):
        return self.runnable


class AttrWrapper:
    def __init__(self, runnable: Callable[..., Any], *, debug: bool = False) -> None:
        self.runnable = runnable
        self.debug = debug

    def __getattr__(self, key: str) -> Any:
        if hasattr(self.runnable, key):
            return getattr(self.runnable, key)
        if self.debug:
            raise AttributeError(f"{key} is not on {self.runnable}")
        raise AttributeError


class Defaulting:
    """Answers every name: None where the wrapped object has none."""

    def __init__(self, runnable) -> None:
        self.runnable = runnable

    def __getattr__(self, key):
        if hasattr(self.runnable, key):
            return getattr(self.runnable, key)


class Table:
    def __init__(self, runnable) -> None:
        self.runnable = runnable
        self.table = {}

    def __getattr__(self, key):
        return self.table[key]
'''

RUNNER = '''
from vllm.wrappers import AttrWrapper, Defaulting, DictWrapper, Table


class Stack:
    def __init__(self) -> None:
        self.layers = []


class Model:
    def __init__(self) -> None:
        self.model = Stack()

    def forward(self, x):
        return x


class Other:
    pass


def load(config) -> Model:
    return Model()


def make(config):
    return Model()


class Runner:
    def __init__(self, config) -> None:
        self.config = config

    def load_model(self, model: Model | None = None) -> None:
        if self.config is not None:
            with open(self.config) as handle:  # as deep as vLLM's: the wrapping below is the assignment read
                loaded = load(handle)
                self.model = model or loaded
        if self.config:
            self.model = DictWrapper(self.model, self.config)
        self.fast = AttrWrapper(load(self.config), debug=True)
        self.unknown = DictWrapper(make(self.config), self.config)
        self.defaulting = Defaulting(load(self.config))
        self.table = Table(load(self.config))

    def shutdown(self) -> None:
        self.model = None


class Mixed:
    def wrap(self) -> None:
        self.model = AttrWrapper(self.model)

    def load_model(self, flag) -> None:
        self.model = load(None)
        if flag:
            self.model = Other()
'''


@pytest.fixture
def surface(tmp_path) -> StaticSurface:
    root = write_tree(tmp_path / "tree", {"vllm/__init__.py": "", "vllm/wrappers.py": WRAPPERS,
                                          "vllm/runner.py": RUNNER})
    return StaticSurface(root, BuildInfo("vllm", "1.0", "test tree", "static", str(root)), "vllm")


def held(surface: StaticSurface, attribute: str, cls: str = "vllm.runner.Runner") -> Found:
    found = surface.attribute_type(surface.lookup(cls), attribute)  # type: ignore[arg-type]
    assert isinstance(found, Found), found
    return found


def function(source: str) -> ast.FunctionDef:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


@pytest.mark.parametrize(("source", "attribute"), [
    ("def __getattr__(self, key):\n    return getattr(self.runnable, key)\n", "runnable"),
    ("def __getattr__(self, name):\n    inner = self.__dict__['inner']\n    return getattr(inner, name)\n", "inner"),
    ("def __getattr__(self, key):\n    if key.startswith('_'):\n        raise AttributeError(key)\n"
     "    return getattr(self.runnable, key)\n", "runnable"),
    # Anything else is not forwarding: a default, another name, another object, two objects, falling off the end.
    ("def __getattr__(self, key):\n    return getattr(self.runnable, key, None)\n", None),
    ("def __getattr__(self, key):\n    return getattr(self.runnable, 'x')\n", None),
    ("def __getattr__(self, key):\n    return getattr(other, key)\n", None),
    ("def __getattr__(self, key):\n    if key == 'a':\n        return getattr(self.a, key)\n"
     "    return getattr(self.b, key)\n", None),
    ("def __getattr__(self, key):\n    if hasattr(self.runnable, key):\n        return getattr(self.runnable, key)\n",
     None),
    ("def __getattr__(self, key):\n    inner = self.__dict__.get('a')\n    inner = self.b\n"
     "    return getattr(inner, key)\n", None),
])
def test_what_a_getattr_forwards_to_is_read_from_its_returns(source, attribute):
    assert forwarded_attribute(function(source)) == attribute


def test_a_wrapper_built_around_the_previous_value_forwards_to_its_class(surface):
    model = held(surface, "model")
    # The first assignment read is the wrapping one: the wrapper, wrapping what self.model held before (a
    # parameter `Model | None` or the result of load(), annotated Model: one class).
    assert model.path == "vllm.wrappers.DictWrapper" and model.wraps is not None
    assert model.wraps.path == "vllm.runner.Model"
    served = surface.member(model, "forward")
    assert isinstance(served, Found) and served.path == "vllm.runner.Model.forward"
    stack = surface.attribute_type(model, "model")
    assert isinstance(stack, Found) and stack.path == "vllm.runner.Stack"
    # The wrapper's own members stay its own; a name neither has is missing, as the forward raises.
    assert surface.member(model, "unwrap").path == "vllm.wrappers.DictWrapper.unwrap"  # type: ignore[union-attr]
    assert isinstance(surface.member(model, "nothing"), Missing)


def test_the_argument_is_found_by_keyword_or_position_and_typed_where_it_is_built(surface):
    fast = held(surface, "fast")
    assert fast.path == "vllm.wrappers.AttrWrapper"
    assert fast.wraps is not None and fast.wraps.path == "vllm.runner.Model"
    assert isinstance(surface.member(fast, "model"), Found)


@pytest.mark.parametrize("attribute", ["defaulting", "table"])
def test_a_getattr_that_does_not_only_forward_stays_unknown(surface, attribute):
    wrapper = held(surface, attribute)
    assert wrapper.wraps is None
    found = surface.member(wrapper, "forward")
    assert isinstance(found, Unresolved) and "defines __getattr__" in found.reason


def test_a_wrapper_around_an_object_of_unknown_class_stays_unknown(surface):
    wrapper = held(surface, "unknown")  # make() has no return annotation
    assert wrapper.path == "vllm.wrappers.DictWrapper" and wrapper.wraps is None
    assert isinstance(surface.member(wrapper, "forward"), Unresolved)


def test_a_previous_value_of_several_classes_stays_unknown(surface):
    wrapper = held(surface, "model", "vllm.runner.Mixed")
    assert wrapper.path == "vllm.wrappers.AttrWrapper" and wrapper.wraps is None
    assert isinstance(surface.member(wrapper, "forward"), Unresolved)


def test_the_memo_keeps_what_a_wrapper_wraps(tmp_path, monkeypatch, surface):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    from compat.sources import SourceTree

    tree = SourceTree(surface.index.root, "vllm", "1.0", "test tree")
    first = static_surface(tree, "vllm")
    runner = first.lookup("vllm.runner.Runner")
    assert first.attribute_type(runner, "model").wraps.path == "vllm.runner.Model"  # type: ignore[union-attr]
    first.save()
    warm = static_surface(tree, "vllm")
    model = warm.attribute_type(warm.lookup("vllm.runner.Runner"), "model")  # type: ignore[arg-type]
    assert warm.memo and isinstance(model, Found) and model.wraps is not None
    assert warm.member(model, "forward").path == "vllm.runner.Model.forward"  # type: ignore[union-attr]
    plain = warm.member(held(surface, "unknown"), "forward")
    assert isinstance(plain, Unresolved)  # a wrapper of unknown contents is not answered from the other's memo


def test_the_audit_says_the_member_is_served_through_the_wrapper(tmp_path, surface):
    scan = scan_source(tmp_path, """
        from vllm.runner import Runner

        runner = Runner(None)
        runner.model.forward(1)
        runner.unknown.forward(1)
    """)
    result = Auditor(AuditOptions(confirm="never")).run(scan, OpenedBuild(surface), written_for=None)
    by_symbol = {f.symbol: f for f in result.findings if f.check == "attribute"}
    served = by_symbol["vllm.wrappers.DictWrapper.forward"]
    assert served.status.value == "ok"
    assert dict(served.evidence.extra)["served"] == ("served through DictWrapper.__getattr__ by the wrapped model "
                                                     "(vllm.runner.Model)")
    unknown = [f for f in result.findings if f.check == "attribute" and f.status.value == "unknown"]
    assert [f.consumer_location for f in unknown] == ["consumer.py:6"]


@pytest.mark.network
def test_the_installed_vllm_leaves_no_wrapper_member_unknown_in_the_default_audit(tmp_path):
    """The real tree (read statically, never imported): the model runner's model is a forwarding wrapper there
    whose wrapped object the code says, so nothing the consumer reads through it is unknown for that reason."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    proc = run_cli("--confirm", "never", "--format", "json", "--no-reports", cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["vllm"]["reading"] == "static"
    assert [f["message"] for f in report["findings"] if f["status"] == "unknown" and "__getattr__" in f["message"]] \
        == []
    served = [f for f in report["findings"] if "served" in f["evidence"]]
    assert served and all(f["status"] == "ok" and "__getattr__ by the wrapped" in f["evidence"]["served"]
                          for f in served)
    root = Path(report["vllm"]["root"])
    assert (root / "vllm").is_dir()
