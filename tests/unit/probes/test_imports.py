"""probes/imports.py: a name the consumer imports exists where it is imported from."""

from __future__ import annotations

import pytest

from compat.findings import Status
from compat.probes.imports import PROBE

BUILD = {"vllm/engine.py": "class Engine:\n    pass\n", "vllm/moved/__init__.py": "",
         "vllm/moved/place.py": "class Scheduler:\n    pass\n"}


@pytest.mark.parametrize(("source", "status", "says"), [
    ("from vllm.engine import Engine\n", Status.OK, ""),
    ("from vllm.engine import Gone\n", Status.BROKEN, "does not exist"),
    ("from vllm.engine import Scheduler\n", Status.BROKEN, "vllm.moved.place"),
    ("try:\n    from vllm.engine import Gone\nexcept ImportError:\n    Gone = None\n", Status.OK, "fallback"),
])
def test_an_import_is_judged_where_it_is_imported_from(trees, source, status, says):
    findings = trees.findings(PROBE, source, BUILD)
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    assert says in findings[0].message
