"""probes/attributes.py: attributes read or written and methods called on objects whose vLLM class is known.

Not covered offline: ``error`` (the receiver's class read with a traceback) comes only from the runtime reading of
an installed build; the static reading gives no traceback."""

from __future__ import annotations

import pytest
from compat.probes.attributes import PROBE

from compat.findings import Status

ENGINE = '''
    from abc import ABC, abstractmethod


    class Config:
        def __init__(self):
            self.block_size = 16
            self.hf_config = None

        def describe(self):
            return ""
{then}


    class Lazy:
        def __getattr__(self, name):
            return 1


    class Queue(ABC):
        @abstractmethod
        def add(self, item):
            raise NotImplementedError


    class FCFSQueue(Queue):
        def add(self, item):
            pass


    class Scheduler:
        def __init__(self):
            self.waiting: Queue = FCFSQueue()
            self.lazy: Lazy = Lazy()
            self.config: Config = Config()

        def schedule(self):
            return self._pick()
{then_scheduler}


    def make_config() -> Config:
        return Config()


    def make_anything():
        return 1
'''

THEN = '''
        def old_hook(self):
            return 0

        def set_mode(self, mode):
            self.mode = mode'''

THEN_SCHEDULER = '''
        def _pick(self):
            return 1'''

NOW = {"vllm/engine.py": ENGINE.format(then="", then_scheduler="")}
BEFORE = {"vllm/engine.py": ENGINE.format(then=THEN, then_scheduler=THEN_SCHEDULER)}

IMPORTS = "from vllm.engine import Config, FCFSQueue, Lazy, Scheduler, make_anything, make_config\n\n\n"


def use(body: str, classes: str = "") -> str:
    """A consumer that runs ``body`` (lines of a function) with a Config, a Scheduler and what they hold."""
    lines = "\n".join(f"    {line}" for line in body.splitlines())
    return f"{IMPORTS}{classes}\ndef run():\n    config = Config()\n    scheduler = Scheduler()\n{lines}\n"


SUBCLASS = '''
class MyConfig(Config):
    def old_hook(self):
        return super().old_hook()

'''

OWN_QUEUE = '''
class MyQueue(FCFSQueue):
    def peek(self):
        return None

'''

OWN_SCHEDULER = '''
class MyScheduler(Scheduler):
    def schedule(self):
        return self._pick()


class Child(MyScheduler):
    def _pick(self):
        return 3

'''

NARROWED = 'if hasattr(config, "new_thing"):\n    return config.new_thing'


# (consumer, the attribute judged, expected status (None: the probe says nothing), words the message holds)
CASES = [
    pytest.param(use("return config.block_size"), "block_size", Status.OK,
                 ["vllm.engine.Config.block_size exists (instance-attribute)"], id="exists"),
    pytest.param(use("return config.describe()"), "describe", Status.OK, ["Config.describe exists (method)"],
                 id="method-exists"),
    pytest.param(use("return make_config().describe()"), "describe", Status.OK, ["Config.describe exists"],
                 id="annotated-return"),
    pytest.param(use("return config.__dict__"), "__dict__", Status.OK, ["Python's, on every object"],
                 id="python-s-own-name"),
    pytest.param(use("config.cache_hint = 1"), "cache_hint", Status.OK,
                 ["defined by the consumer", "the consumer's own attribute"], id="consumer-s-own-attribute"),
    pytest.param(use(NARROWED), "new_thing", Status.OK, ["not in this build, and the consumer checks for it"],
                 id="checked-first"),
    pytest.param(use("return config.blok_size"), "blok_size", Status.BROKEN,
                 ["vllm.engine.Config has no attribute 'blok_size'", "the consumer reads it"], id="missing"),
    pytest.param(use("return config.gone()"), "gone", Status.BROKEN, ["the consumer calls it"],
                 id="missing-method"),
    pytest.param(use("return make_anything().thing"), "thing", Status.UNKNOWN,
                 ["unknown, 'thing' not checked"], id="receiver-class-unknown"),
    pytest.param(use("return scheduler.lazy.anything"), "anything", Status.UNKNOWN,
                 ["cannot tell whether vllm.engine.Lazy.anything exists", "__getattr__"], id="getattr-class"),
    pytest.param(use("return scheduler.waiting.popleft()"), "popleft", Status.UNKNOWN,
                 ["not declared by the interface", "vllm.engine.Queue is a ABC"], id="interface"),
    pytest.param(use("return scheduler.waiting.peek()", OWN_QUEUE), "peek", Status.UNKNOWN,
                 ["may at run time be consumer.MyQueue", "a subclass of vllm.engine.Queue",
                  "which defines 'peek'"], id="stand-in-defines-it"),
    pytest.param(use("return config.hf_config.num_layers"), "num_layers", None, [], id="another-library-s-object"),
]


def _judged(findings, name):
    return [f for f in findings if (f.symbol or "").endswith(f".{name}")]


@pytest.mark.parametrize(("source", "name", "status", "says"), CASES)
def test_an_attribute_on_an_object_of_a_known_class(trees, source, name, status, says):
    findings = trees.findings(PROBE, source, NOW)
    judged = _judged(findings, name)
    if status is None:
        assert judged == [], [f.message for f in judged]
        assert findings, "the touchpoints around it were judged"
        return
    assert [f.status for f in judged] == [status], [(f.symbol, f.message) for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message


# Against the build the consumer was written for, which had Config.old_hook, Config.set_mode and Scheduler._pick.
WRITTEN_FOR_CASES = [
    pytest.param(use("config.mode = 1"), "mode", Status.BROKEN,
                 ["has no attribute 'mode'", "the value is written but nothing in vLLM reads it"],
                 id="store-vllm-used-to-read"),
    pytest.param(SUBCLASS + "\n", "old_hook", Status.CHANGED,
                 ["calls it through super()", "vLLM no longer calls it"], id="super-in-an-override"),
    pytest.param(IMPORTS + OWN_SCHEDULER, "_pick", Status.UNKNOWN,
                 ["MyScheduler's subclass", "Child", "defines '_pick'"], id="own-subclass-descendant-defines-it"),
    pytest.param(IMPORTS + OWN_SCHEDULER.split("\n\nclass Child")[0] + "\n", "_pick", Status.BROKEN,
                 ["has no attribute '_pick'"], id="own-subclass-nobody-defines-it"),
]


@pytest.mark.parametrize(("source", "name", "status", "says"), WRITTEN_FOR_CASES)
def test_an_attribute_the_build_written_for_had(trees, source, name, status, says):
    findings = trees.findings(PROBE, IMPORTS + source if not source.startswith(IMPORTS) else source, NOW, BEFORE)
    judged = [f for f in _judged(findings, name) if f.status is not Status.OK]
    assert [f.status for f in judged] == [status], [(f.symbol, f.message) for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message


def test_a_missing_attribute_names_the_close_one_in_its_fix(trees):
    (finding,) = _judged(trees.findings(PROBE, use("return config.blok_size"), NOW), "blok_size")
    assert finding.fix == "use vllm.engine.Config.block_size"


HELD = '''
    from typing import Any

    from vllm.config import VllmConfig


    def read(config: VllmConfig):
        return config.scheduler_config._original_cls
'''


@pytest.mark.parametrize(("store", "status"), [
    pytest.param("vllm_config.scheduler_config._original_cls = 1", Status.OK, id="stored-on-the-held-config"),
    pytest.param("vllm_config.other_config._original_cls = 1", Status.BROKEN, id="stored-on-another-holder"),
    pytest.param("pass", Status.BROKEN, id="not-stored"),
])
def test_an_attribute_the_consumer_stores_on_an_untyped_holder_of_the_config_is_its_own(trees, store, status):
    """tpu-inference 0.32.0 stores ``vllm_config.scheduler_config._original_scheduler_cls`` with ``vllm_config:
    Any`` (dp_scheduler.py:1733) and reads it back on a typed VllmConfig (:521): ``scheduler_config`` is the name
    vLLM holds its SchedulerConfig under, so the attribute is the consumer's."""
    from .test_inbound import _default_builds

    _, build = _default_builds("False", "False")
    source = HELD + f"\n\n    def setup(vllm_config: Any):\n        {store}\n"
    judged = _judged(trees.findings(PROBE, source, build), "_original_cls")
    assert [f.status for f in judged] == [status], [f.message for f in judged]
