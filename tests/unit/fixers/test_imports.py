"""fixers/imports.py: a name a build no longer serves where the consumer imports it is imported from the shim."""

from __future__ import annotations

import pytest
from compat.fixers.imports import FIXER
from compat.probes.imports import PROBE

from .conftest import covers

HELPER = "def helper(x):\n    return x + 1\n"
OLD = {"vllm/utils/__init__.py": HELPER}
NEW = {"vllm/utils/__init__.py": "", "vllm/utils/helpers.py": HELPER}
"""0.2.0 moved ``helper`` to ``vllm.utils.helpers``."""
GONE = {"vllm/utils/__init__.py": ""}
BUILDS = {"0.1.0": OLD, "0.2.0": NEW}
BUILDS_SAME = {"0.1.0": OLD, "0.1.1": OLD}

ROUTED = "from pkg._vllm_compat import helper"


@pytest.mark.parametrize(("files", "builds", "routed", "left", "unhandled"), [
    pytest.param({"pkg/run.py": "from vllm.utils import helper\n\nhelper(1)\n"}, BUILDS,
                 {"pkg/run.py": 1}, {}, [], id="moved: routed"),
    pytest.param({"pkg/run.py": "from vllm.utils import helper\n",
                  "pkg/other.py": "import os\nfrom vllm.utils import helper\n"}, BUILDS,
                 {"pkg/run.py": 1, "pkg/other.py": 1}, {}, [], id="every import of it routed"),
    pytest.param({"pkg/run.py": "from vllm.utils import helper\n",
                  "pkg/guarded.py": "try:\n    from vllm.utils import helper\n"
                                    "except ImportError:\n    helper = None\n"},
                 BUILDS, {"pkg/run.py": 1}, {"pkg/guarded.py": "from vllm.utils import helper"}, [],
                 id="own fallback kept"),
    pytest.param({"pkg/run.py": "from vllm.utils import helper as h\n"}, BUILDS, {}, {}, ["not imported as"],
                 id="alias: declined"),
    pytest.param({"pkg/run.py": "from vllm.utils import helper\n"}, {"0.1.0": GONE, "0.2.0": GONE}, {}, {},
                 ["helper"], id="defined nowhere: declined"),
    pytest.param({"pkg/run.py": "from vllm.utils import helper\n"}, BUILDS_SAME, {}, {}, [],
                 id="nothing moved: nothing planned"),
])
def test_moved_imports(fixing, files, builds, routed, left, unhandled):
    ctx = fixing.context(files, builds, PROBE)
    plan = FIXER.plan(ctx)
    assert len(plan.unhandled) == len(unhandled)
    for u, says in zip(plan.unhandled, unhandled):
        assert says in u.reason and u.finding.check == "import"
    assert sorted(e.file for e in plan.edits) == sorted(routed)
    edited = fixing.edited(ctx, plan) if plan.edits else {}
    for rel in routed:
        assert ROUTED in edited[rel] and "from vllm.utils import helper" not in edited[rel]
    for rel, kept in left.items():
        assert rel not in edited
        assert kept in (ctx.root / rel).read_text()
    failing = [f for _, f in ctx.failing(PROBE)]
    assert [covers(plan, f) for f in failing] == [bool(routed)] * len(failing)
    assert bool(failing) == (builds is not BUILDS_SAME)
    if routed:
        assert [p.key for p in plan.pieces] == ["raw:helper", "export:helper"]
        assert "vllm.utils.helpers" in plan.pieces[0].code and "vllm.utils" in plan.pieces[0].code
        assert plan.notes and "vllm.utils.helpers" in plan.notes[0] and "vllm.utils " in plan.notes[0] + " "
        assert ("(2 imports)" in plan.notes[0]) == (len(routed) == 2)
    else:
        assert not plan.pieces and not plan.notes
