"""probes/imports.py: a name the consumer imports exists where it is imported from.

Not covered offline: ``error`` (an Unresolved with a traceback) comes only from the runtime reading of an installed
build, whose import raised; the static reading the unit layer uses gives no traceback."""

from __future__ import annotations

import pytest
from compat.probes.imports import PROBE

from compat.findings import Status

BUILD = {"vllm/engine.py": "class Engine:\n    pass\n", "vllm/moved/__init__.py": "",
         "vllm/moved/place.py": "class Scheduler:\n    pass\n",
         "vllm/twice/__init__.py": "", "vllm/twice/a.py": "class Twin:\n    pass\n",
         "vllm/twice/b.py": "class Twin:\n    pass\n",
         "vllm/lazy.py": "def __getattr__(name):\n    import importlib\n"
                         "    return importlib.import_module('vllm.' + name)\n",
         "vllm/reexport.py": "from vllm.engine import Engine\n"}


@pytest.mark.parametrize(("source", "status", "says"), [
    pytest.param("from vllm.engine import Engine\n", Status.OK, ["vllm.engine.Engine imports"], id="exists"),
    pytest.param("from vllm.reexport import Engine\n", Status.OK, ["defined in vllm.engine.Engine"],
                 id="re-exported"),
    pytest.param("import vllm.engine\n", Status.OK, ["vllm.engine imports"], id="module"),
    pytest.param("from vllm.engine import Gone\n", Status.BROKEN, ["does not exist"], id="missing"),
    pytest.param("from vllm.engine import Scheduler\n", Status.BROKEN,
                 ["no longer importable from vllm.engine", "vllm.moved.place"], id="moved"),
    pytest.param("from vllm.engine import Twin\n", Status.BROKEN, ["now lives in", "also defined in"],
                 id="moved-to-two-places"),
    pytest.param("try:\n    from vllm.engine import Gone\nexcept ImportError:\n    Gone = None\n", Status.OK,
                 ["optional import", "fallback"], id="fallback"),
    pytest.param("from vllm.lazy import Anything\n", Status.UNKNOWN, ["cannot tell", "__getattr__"],
                 id="module-getattr"),
    pytest.param("from vllm.engine import *\n", Status.UNKNOWN, ["star import"], id="star-import"),
])
def test_an_import_is_judged_where_it_is_imported_from(trees, source, status, says):
    findings = trees.findings(PROBE, source, BUILD)
    judged = [f for f in findings if f.symbol != "vllm.engine"]  # the plain ``import vllm.engine`` of some rows
    judged = judged or findings
    assert [f.status for f in judged] == [status], [f.message for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message


def test_the_build_written_for_goes_into_the_evidence(trees):
    then = {"vllm/engine.py": "class Engine:\n    pass\n\n\nclass Scheduler:\n    pass\n"}
    (finding,) = trees.findings(PROBE, "from vllm.engine import Scheduler\n", BUILD, then)
    assert finding.status is Status.BROKEN
    assert finding.fix == "from vllm.moved.place import Scheduler"
    assert "vllm/engine.py" in finding.evidence.written_for and finding.evidence.written_for_build == "0.0.0"



GUARDED = '''
import importlib.util

from vllm.engine import Engine

if importlib.util.find_spec("{module}") is {test} None:
    from vllm.moved.place import Scheduler
else:
    from vllm.engine import Scheduler


class MyEngine(Engine):
    def start(self):
        if {has}:
            return None
        else:
            from vllm.engine import Gone
            return Gone
'''
READY = {**BUILD, "vllm/engine.py": "class Engine:\n    def ready(self):\n        return True\n"}


@pytest.mark.parametrize(("module", "test", "runs", "skipped"), [
    pytest.param("vllm.moved.place", "not", "vllm.moved.place.Scheduler", "vllm.engine.Scheduler", id="present"),
    pytest.param("vllm.moved.place", "", "vllm.engine.Scheduler", "vllm.moved.place.Scheduler", id="is-none"),
    pytest.param("vllm.gone", "not", "vllm.engine.Scheduler", "vllm.moved.place.Scheduler", id="absent"),
])
def test_find_spec_of_a_vllm_module_is_decided_by_the_build(trees, module, test, runs, skipped):
    """``importlib.util.find_spec("vllm.x") is not None``: the branch the build takes is judged, the other is not
    run with it (its import was broken before: the ``else`` was judged as if it ran)."""
    source = GUARDED.format(module=module, test=test, has="True").replace("is  None", "is None")
    findings = {f.symbol: f for f in trees.findings(PROBE, source, READY)}
    assert findings[skipped].status is Status.OK and "not run with this build" in findings[skipped].message, \
        findings[skipped].message
    assert "not run" not in findings[runs].message


FLAG = '''
from importlib.util import find_spec

try:
    _HAS = (
        find_spec("{module}") is not None
    )
except ModuleNotFoundError:
    _HAS = False

if _HAS:
    from vllm.moved.place import Scheduler
else:
    from vllm.engine import Scheduler
'''


@pytest.mark.parametrize(("module", "runs", "skipped"), [
    pytest.param("vllm.moved.place", "vllm.moved.place.Scheduler", "vllm.engine.Scheduler", id="present"),
    pytest.param("vllm.gone", "vllm.engine.Scheduler", "vllm.moved.place.Scheduler", id="absent"),
])
def test_a_find_spec_flag_bound_in_a_try_is_decided_by_the_build(trees, module, runs, skipped):
    """ai-dynamo 1.6.1's ``vllm_protocol.py``: the flag is bound in a ``try`` whose handler sets it False; the
    handler runs only where ``find_spec`` itself raises, so the build decides the flag (the handler's False was
    taken as its value, and the legacy import judged broken at the build written for)."""
    findings = {f.symbol: f for f in trees.findings(PROBE, FLAG.format(module=module), READY)}
    assert findings[skipped].status is Status.OK and "not run with this build" in findings[skipped].message, \
        findings[skipped].message
    assert "not run" not in findings[runs].message, findings[runs].message


@pytest.mark.parametrize(("has", "status", "says"), [
    # The subclass inherits Engine.ready: the branch that uses it runs, the fallback import does not.
    pytest.param('hasattr(self, "ready")', Status.OK, "not run with this build", id="hasattr-self-inherited"),
    pytest.param('getattr(self, "ready", None) is not None', Status.OK, "not run with this build",
                 id="getattr-none-self-inherited"),
    pytest.param('getattr(self, "ready", None) is None', Status.BROKEN, "does not exist",
                 id="getattr-none-self-inherited-negated"),
    # An attribute the build's class lacks may still be given to the instance at run time: not decided.
    pytest.param('hasattr(self, "later")', Status.UNKNOWN, "cannot be evaluated", id="hasattr-self-not-in-the-build"),
])
def test_hasattr_on_self_is_decided_by_the_build_s_base_class(trees, has, status, says):
    source = GUARDED.format(module="vllm.moved.place", test="not", has=has)
    findings = [f for f in trees.findings(PROBE, source, READY) if f.symbol == "vllm.engine.Gone"]
    assert [f.status for f in findings] == [status] and says in findings[0].message, [f.message for f in findings]


def test_import_module_in_a_try_guards_its_fallback(trees):
    source = ("import importlib\n\ntry:\n    place = importlib.import_module('vllm.moved.place')\n"
              "except ImportError:\n    from vllm.engine import Scheduler\n")
    findings = {f.symbol: f for f in trees.findings(PROBE, source, READY)}
    assert "not run with this build" in findings["vllm.engine.Scheduler"].message


SIGNED = '''
import inspect

from vllm.engine import Engine

if {test}:
    from vllm.moved.place import Scheduler
else:
    from vllm.engine import Gone
'''


@pytest.mark.parametrize(("test", "build_takes", "status"), [
    pytest.param('"ready" in inspect.signature(Engine.start).parameters', True, Status.OK, id="takes"),
    pytest.param('"ready" in inspect.signature(Engine.start).parameters', False, Status.BROKEN, id="does-not-take"),
    pytest.param('"ready" not in inspect.signature(Engine.start).parameters', True, Status.BROKEN,
                 id="negated-takes"),
])
def test_a_parameter_of_a_vllm_callable_tested_by_signature_is_decided_by_the_build(trees, test, build_takes, status):
    """``"x" in inspect.signature(vllm_fn).parameters``: the build's signature decides which branch runs."""
    params = "self, ready=False" if build_takes else "self"
    build = {**BUILD, "vllm/engine.py": f"class Engine:\n    def start({params}):\n        return None\n"}
    findings = [f for f in trees.findings(PROBE, SIGNED.format(test=test), build) if f.symbol == "vllm.engine.Gone"]
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    if status is Status.OK:
        assert "not run with this build" in findings[0].message


@pytest.mark.parametrize(("store", "status"), [
    pytest.param("vllm.engine.platform = object()", Status.OK, id="value-set-on-the-module"),
    pytest.param("setattr(vllm.engine, 'platform', object())", Status.OK, id="setattr-of-a-value"),
    pytest.param("other = object()", Status.BROKEN, id="not-set"),
])
def test_a_name_the_consumer_sets_on_a_vllm_module_imports(trees, store, status):
    """vllm-mindspore sets ``vllm.config.current_platform = ascend_platform`` in its ``__init__`` and imports it
    from ``vllm.config`` elsewhere: a value (not only a def or class) set on a vLLM module is the consumer's name."""
    consumer = {"plug/__init__.py": f"import vllm.engine\n\n{store}\n",
                "plug/use.py": "from vllm.engine import platform\n"}
    findings = [f for f in trees.findings(PROBE, consumer, BUILD) if f.symbol == "vllm.engine.platform"]
    assert [f.status for f in findings] == [status], [f.message for f in findings]


@pytest.mark.parametrize("where", ["the-class", "a-subclass"])
def test_hasattr_on_self_of_what_the_consumer_stores_itself_is_not_a_test_of_the_build(trees, where):
    """arctic-inference 0.2.0's ``has_shift = hasattr(self, "shift_model")``: the runner patch sets
    ``self.shift_model`` itself on one path, so the test is of its own state, and the branch is judged as code
    that may run (it was `unknown`, hiding a true break)."""
    source = GUARDED.format(module="vllm.moved.place", test="not", has='hasattr(self, "mine")')
    store = "    def load(self):\n        self.mine = 1\n"
    source += store if where == "the-class" else f"\n\nclass Sub(MyEngine):\n{store}"
    findings = [f for f in trees.findings(PROBE, source, READY) if f.symbol == "vllm.engine.Gone"]
    assert [f.status for f in findings] == [Status.BROKEN], [f.message for f in findings]


HELPER = '''
import importlib.util

from vllm.engine import Engine


class MyEngine(Engine):
    def start(self):
        if importlib.util.find_spec("vllm.gone") is None:
            return None
        return self.{helper}()

    def {helper}(self):
        from vllm.gone import Thing
        return Thing
{extra}'''


@pytest.mark.parametrize(("helper", "extra", "build", "status"), [
    pytest.param("_new_path", "", READY, Status.OK, id="every-call-guarded"),
    pytest.param("_new_path", "\n    def other(self):\n        return self._new_path()\n", READY, Status.BROKEN,
                 id="one-call-unguarded"),
    pytest.param("_new_path", "\n    def hook(self):\n        return self._new_path\n", READY, Status.BROKEN,
                 id="passed-on-as-a-value"),
    pytest.param("new_path", "", READY, Status.BROKEN, id="public-anyone-may-call-it"),
    pytest.param("_ready", "", {**READY, "vllm/engine.py": "class Engine:\n    def _ready(self):\n        pass\n"},
                 Status.BROKEN, id="a-name-vllm-s-base-defines"),
])
def test_a_private_helper_runs_under_the_guards_of_every_call_of_it(trees, helper, extra, build, status):
    """vllm-spyre 1.10.0 returns early where ``find_spec("vllm.profiler.wrapper") is None`` and only then calls
    ``self._setup_profiler_wrapper()``, which imports that module: on a build without it (0.11.0) the helper does
    not run. Not so where another call of it is not guarded, where it is passed on as a value, where it is public,
    or where vLLM's base class defines the name (vLLM's code may call it)."""
    source = HELPER.format(helper=helper, extra=extra)
    findings = [f for f in trees.findings(PROBE, source, build) if f.symbol == "vllm.gone.Thing"]
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    if status is Status.OK:
        assert f"where every call of consumer.MyEngine.{helper} is" in findings[0].message, findings[0].message
