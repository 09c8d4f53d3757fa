"""probes/patches.py: the consumer's code in place of a vLLM name (an override in a subclass, a patch, a function
assigned over vLLM's) still has something to replace and still takes what vLLM's callers pass; a consumer subclass
of a vLLM ABC defines the abstract methods the build added (the tables of tests/test_stale_state.py included)."""

from __future__ import annotations

import pytest
from compat.probes.patches import PROBE

from compat.findings import Status

RUNNER = '''
    import torch
    from abc import ABC, abstractmethod


    def opaque_factory():
        return lambda fn: fn


    class Runner:
        @property
        def mode(self):
            return "default"

        def prepare_inputs(self, batch{prepare}):
            return batch

        def execute(self, batch, *, tag=None):
            return batch

        {decorator}
        def sample(self, logits):
            return logits

        def run(self, {run}):
            return None
{extra}


    class Module({module_base}):
{module_body}


    class Loader(ABC):
        @abstractmethod
        def load(self):
            raise NotImplementedError
{abstract}


    def drive(runner: Runner, batch, out):
        {site}
        return runner.execute(batch)
'''

POSTPROCESS = '''
        def postprocess(self, sampled):
            return sampled'''

UNLOAD = '''
        @abstractmethod
        def unload(self):
            raise NotImplementedError'''


def build(*, prepare: str = "", decorator: str = "", run: str = "x", extra: str = POSTPROCESS,
          module_base: str = "", module_body: str = "        def forward(self, x):\n            return x",
          abstract: str = "", site: str = "pass") -> dict[str, str]:
    return {"vllm/runner.py": RUNNER.format(prepare=prepare, decorator=decorator, run=run, extra=extra,
                                            module_base=module_base, module_body=module_body, abstract=abstract,
                                            site=site)}


THEN = build()
NOW_GONE = build(extra="")

OVERRIDE = '''
import torch
from vllm.runner import Loader, Module, Runner


class MyRunner(Runner):
    def __init__(self):
        self.computed = torch.empty(8)

{methods}
'''


def override(*methods: str) -> str:
    return OVERRIDE.format(methods="\n\n".join(methods))


POST_WRITES = "    def postprocess(self, sampled):\n        self.computed.copy_(sampled)"
POST_PRINTS = "    def postprocess(self, sampled):\n        print(sampled)"
PREP_READS = "    def prepare_inputs(self, batch):\n        batch.seq_lens = self.computed\n        return batch"
PREP = "    def prepare_inputs(self, batch):\n        return batch"
SAMPLE = "    def sample(self, logits):\n        return logits"
RUN = "    def run(self, x):\n        return x"
OWN = "    def my_helper(self):\n        return 1"
MODE = '    @property\n    def mode(self):\n        return "mine"'

REPLACE = '''
from vllm.runner import Runner


def my_postprocess(self, sampled):
    return sampled


Runner.postprocess = my_postprocess
'''

MODULE_OVERRIDE = '''
from vllm.runner import Module


class MyModule(Module):
    def forward(self, x):
        return x
'''

SETATTR = '''
import importlib


def my_prepare(self, batch):
    return batch


def install():
    runner = importlib.import_module("vllm.runner")
    setattr(getattr(runner, "Runner"), "prepare_inputs", my_prepare)
'''

CALLER_REPLACED = '''

def my_drive(runner, batch, out):
    return runner.prepare_inputs(batch)


importlib.import_module("vllm.runner").drive = my_drive
'''

CALLER_WRAPPED = '''
import vllm.runner


def wrap(func):
    def new_func(*args, **kwargs):
        return func(*args, **kwargs)
    return new_func


vllm.runner.drive = wrap(vllm.runner.drive)
'''

CALLER_KEPT = '''
import vllm.runner

_orig_drive = vllm.runner.drive


def my_drive(runner, batch, out):
    return _orig_drive(runner, batch, out)


vllm.runner.drive = my_drive
'''

INNER_CLASS = '''
import importlib


def install():
    base = getattr(importlib.import_module("vllm.runner"), "Runner")

    class Patched(base):
        def prepare_inputs(self, batch):
            return batch

    setattr(importlib.import_module("vllm.runner"), "Runner", Patched)
'''

STAND_IN = '''
import vllm.runner


class MyRunner:
    def execute(self, batch{execute}):
        return batch
{more}

vllm.runner.Runner = MyRunner
'''
SHARDED = {"vllm/sharded.py": "from vllm.runner import Runner\n\n\nclass ShardedRunner(Runner):\n"
                              "    def execute(self, batch, *, tag=None):\n"
                              "        self.postprocess(batch)\n"
                              "        return super().execute(batch, tag=tag)\n"}
DRIVES = "runner.prepare_inputs(batch, out)"
DRIVES_POST = "runner.postprocess(out)"


# (consumer, audited build, build written for (None: not known), the name replaced, expected status (None: the
#  probe says nothing about it), words the message holds)
CASES = [
    pytest.param(override(POST_WRITES, PREP_READS), NOW_GONE, THEN, "postprocess", Status.BROKEN,
                 ["vLLM no longer calls the override", "the only method to write self.computed",
                  "MyRunner.prepare_inputs still reads it"], id="gone-override-leaves-stale-state"),
    pytest.param(override(POST_PRINTS), build(extra=POSTPROCESS.replace("postprocess", "postprocess_sampled")),
                 THEN, "postprocess", Status.BROKEN, ["has postprocess_sampled instead"], id="gone-override-renamed"),
    pytest.param(override(POST_PRINTS), NOW_GONE, THEN, "postprocess", Status.CHANGED,
                 ["which the override consumer.MyRunner.postprocess replaces, is gone from this build",
                  "vLLM no longer calls it"], id="gone-override"),
    pytest.param(REPLACE, NOW_GONE, THEN, "postprocess", Status.BROKEN,
                 ["which the replacement consumer.my_postprocess replaces, is gone"], id="gone-replacement"),
    pytest.param(MODULE_OVERRIDE, build(module_base="torch.nn.Module", module_body="        pass"), THEN,
                 "forward", Status.UNKNOWN, ["cannot tell whether vllm.runner.Module.forward exists"],
                 id="unknown-existence"),
    pytest.param(override(MODE), build(), THEN, "mode", Status.OK, ["which this build has"],
                 id="class-attribute-replaced"),
    pytest.param(override(SAMPLE), build(decorator="@opaque_factory()"), THEN, "sample", Status.UNKNOWN,
                 ["signature of vllm.runner.Runner.sample unknown"], id="unknown-signature-now"),
    pytest.param(override(SAMPLE), build(), build(decorator="@opaque_factory()"), "sample", Status.UNKNOWN,
                 ["in the build written for unknown"], id="unknown-signature-then"),
    pytest.param(override(PREP), build(prepare=", out"), None, "prepare_inputs", Status.OK,
                 ["compared only against the build it was written for"], id="no-build-written-for"),
    pytest.param(override(RUN), build(run="*args, **kwargs"), THEN, "run", Status.OK,
                 ["does not say what vLLM passes (not compared)"], id="takes-anything"),
    pytest.param(override(PREP), build(prepare=", out", site="runner.prepare_inputs(batch, out)"), THEN,
                 "prepare_inputs", Status.BROKEN, ["now takes (batch, out) (was (batch))",
                                                   "vLLM calls it at vllm/runner.py", "refuses"],
                 id="new-parameter-a-call-passes"),
    pytest.param(override(PREP), build(prepare=", out"), THEN, "prepare_inputs", Status.BROKEN,
                 ["refuses what vLLM's callers may now pass", "no call of it by name in the build"],
                 id="new-parameter-no-call-shows"),
    pytest.param(override(PREP), build(prepare=", out=None", site="runner.prepare_inputs(batch)"), THEN,
                 "prepare_inputs", Status.OK, ["every call of it in the build that reaches", "binds to it"],
                 id="new-optional-parameter-no-call-passes"),
    pytest.param(override(PREP), build(), THEN, "prepare_inputs", Status.OK,
                 ["takes what vLLM's callers pass to vllm.runner.Runner.prepare_inputs(batch)"], id="unchanged"),
    pytest.param(override(OWN), build(), THEN, "my_helper", None, [], id="the-consumer-s-own-method"),
    # A patch by setattr on a class fetched by getattr from importlib.import_module: judged as if written out.
    pytest.param(SETATTR, build(prepare=", out", site=DRIVES), THEN, "prepare_inputs", Status.BROKEN,
                 ["vLLM calls it at vllm/runner.py", "consumer.my_prepare", "refuses"], id="setattr-patch"),
    # vLLM's only call of it sits in a function the consumer replaces too: its own code calls instead.
    pytest.param(SETATTR + CALLER_REPLACED, build(prepare=", out", site=DRIVES), THEN, "prepare_inputs",
                 Status.OK, ["set aside", "vllm/runner.py"], id="setattr-patch-whose-caller-is-replaced"),
    # ... but a replacement made from vLLM's own def (a wrapper) may still run it, and its call with it.
    pytest.param(SETATTR + CALLER_WRAPPED, build(prepare=", out", site=DRIVES), THEN, "prepare_inputs",
                 Status.BROKEN, ["vLLM calls it at vllm/runner.py", "refuses"],
                 id="setattr-patch-whose-caller-is-wrapped"),
    pytest.param(SETATTR + CALLER_KEPT, build(prepare=", out", site=DRIVES), THEN, "prepare_inputs",
                 Status.BROKEN, ["vLLM calls it at vllm/runner.py", "refuses"],
                 id="setattr-patch-whose-caller-is-kept-and-called"),
    # An override in a class made inside a function over a base fetched at run time.
    pytest.param(INNER_CLASS, build(prepare=", out", site=DRIVES), THEN, "prepare_inputs", Status.BROKEN,
                 ["consumer.install.Patched.prepare_inputs", "refuses"], id="override-in-a-class-made-in-a-function"),
    pytest.param(INNER_CLASS, build(site=DRIVES.replace(", out", "")), THEN, "Runner", Status.OK,
                 ["which this build has"], id="replacement-deriving-from-the-class"),
    # A class assigned over vLLM's without deriving from it stands in for it: vLLM's calls must find what they call.
    pytest.param(STAND_IN.format(execute=", *, tag=None", more=""), build(site=DRIVES_POST),
                 build(extra="", site="pass"), "Runner", Status.BROKEN,
                 ["does not derive from it", "it lacks postprocess (vLLM calls it at vllm/runner.py"],
                 id="stand-in-lacks-a-method-vllm-now-calls"),
    pytest.param(STAND_IN.format(execute="", more=""), build(site="runner.execute(batch, tag='t')"), THEN, "Runner",
                 Status.BROKEN,
                 ["execute refuses vLLM's call", "tag"], id="stand-in-refuses-a-keyword-vllm-passes"),
    pytest.param(STAND_IN.format(execute=", *, tag=None", more="\n    def postprocess(self, sampled):\n"
                                 "        return sampled\n"), build(site=DRIVES_POST), THEN, "Runner", Status.OK,
                 ["defines each of the"], id="stand-in-complete"),
    pytest.param(STAND_IN.format(execute=", *, tag=None", more=""), build(site=DRIVES_POST), build(site=DRIVES_POST),
                 "Runner", Status.OK, ["defines each of the"], id="stand-in-lacks-a-method-vllm-called-before-too"),
    # vLLM's own subclass of the class was made over the original: its ``super()`` and ``self`` calls run the
    # original's methods, never the stand-in's (vllm-mindspore's LoRA layers: a false broken at 0.11.0).
    pytest.param(STAND_IN.format(execute="", more=""), {**build(), **SHARDED}, THEN, "Runner", Status.OK,
                 ["defines each of the"], id="stand-in-not-reached-by-vllm-s-own-subclass"),
]


@pytest.mark.parametrize(("source", "vllm", "written_for", "name", "status", "says"), CASES)
def test_the_consumer_s_code_in_place_of_vllm_s(trees, source, vllm, written_for, name, status, says):
    findings = [f for f in trees.findings(PROBE, source, vllm, written_for) if f.symbol.endswith(f".{name}")]
    if status is None:
        assert findings == [], [f.message for f in findings]
        return
    assert [f.status for f in findings] == [status], [(f.symbol, f.message) for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


LOADER = '''
from vllm.runner import Loader


class MyLoader(Loader):
    def load(self):
        return 1
{more}
'''

COMPLETED_BELOW = '''

class FullLoader(MyLoader):
    def unload(self):
        return 0
'''


@pytest.mark.parametrize(("source", "written_for", "status"), [
    pytest.param(LOADER.format(more=""), THEN, Status.BROKEN, id="new-abstract-method-not-defined"),
    pytest.param(LOADER.format(more="\n    def unload(self):\n        return 0\n"), THEN, None, id="defined"),
    pytest.param(LOADER.format(more=COMPLETED_BELOW), THEN, None, id="completed-by-a-subclass"),
    pytest.param(LOADER.format(more=""), build(abstract=UNLOAD), None, id="abstract-then-too"),
    pytest.param(LOADER.format(more=""), None, None, id="no-build-written-for"),
])
def test_a_subclass_of_an_abc_the_build_added_abstract_methods_to(trees, source, written_for, status):
    findings = [f for f in trees.findings(PROBE, source, build(abstract=UNLOAD), written_for)
                if f.symbol.endswith(":abstract")]
    if status is None:
        assert findings == [], [f.message for f in findings]
        return
    assert [f.status for f in findings] == [status]
    assert "consumer.MyLoader cannot be instantiated in this build" in findings[0].message
    assert "abstract method(s) unload" in findings[0].message
    assert findings[0].fix == "define unload in consumer.MyLoader"


SIBLING = '''
    class Sibling(Runner):
        def run_twice(self, batch):
            return self.prepare_inputs(batch, 1)
'''


@pytest.mark.parametrize(("sibling", "status", "says"), [
    pytest.param(True, Status.OK, ["calls it only on other classes", "on vllm.runner.Sibling"],
                 id="only-vllm-s-sibling-subclass-calls-it"),
    pytest.param(False, Status.BROKEN, ["no call of it by name in the build"], id="no-call-at-all"),
])
def test_an_override_is_not_judged_by_calls_on_vllm_s_own_sibling_subclasses(trees, sibling, status, says):
    """kunlun's internvl builder overrides get_dummy_mm_data of vLLM's base; vLLM's own InternVL builder (another
    subclass of that base) calls its own method with other arguments: that call never reaches the override."""
    now = build(prepare=", out")
    if sibling:
        now = {"vllm/runner.py": now["vllm/runner.py"] + SIBLING}
    (finding,) = [f for f in trees.findings(PROBE, override(PREP), now, THEN) if f.symbol.endswith(".prepare_inputs")]
    assert finding.status is status, finding.message
    for word in says:
        assert word in finding.message, finding.message


@pytest.mark.parametrize(("site", "status", "says"), [
    pytest.param("extra = {} if out is None else {'out': out}\n        runner.prepare_inputs(batch, **extra)",
                 Status.UNKNOWN, ["with out only when `not (out is None)`", "refuses"], id="keyword-on-one-path"),
    pytest.param("extra = {'out': out}\n        runner.prepare_inputs(batch, **extra)", Status.BROKEN,
                 ["vLLM calls it at vllm/runner.py", "no longer accepts keyword 'out'"], id="keyword-on-every-path"),
    pytest.param("extra = {'out': out}\n        extra.update(more=1)\n        runner.prepare_inputs(batch, **extra)",
                 Status.BROKEN, ["no call of it by name in the build"], id="mapping-changed-after"),
])
def test_keywords_vllm_passes_from_a_mapping_it_builds(trees, site, status, says):
    """tpu-inference 0.32.0 at vLLM 0.34.0: ``extra = {} if x_scale is None else {"x_scale": x_scale}`` then
    ``apply_monolithic(..., **extra)`` passes ``x_scale`` only on one path, which the build does not decide; a
    mapping with the keyword on every path passes it; one changed after it is made says nothing of its keys."""
    now = build(prepare=", out=None", site=site)
    (finding,) = [f for f in trees.findings(PROBE, override(PREP), now, THEN) if f.symbol.endswith(".prepare_inputs")]
    assert finding.status is status, finding.message
    for word in says:
        assert word in finding.message, finding.message
