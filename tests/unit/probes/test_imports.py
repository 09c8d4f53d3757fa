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
