"""fixers/startup.py: start-up steps of the engine core a hand-built pipeline skips (``startup`` findings): the
KV cache layout is resolved after the executor is created, with the engine core's own statements of each build
(feature-detected); a step that does not matter for the pipeline is accepted with why; a step the fixer does not
know is left as it is; a build whose step reads the engine core's own state, or an executor not created as
``x = Executor(...)``, leaves a note and no edit.

The ``startup`` findings are given; the engine cores the fixer replays are hand-written."""

from __future__ import annotations

import pytest
from compat.fixers.startup import FIXER

from compat.facts.startup import NOT_NEEDED

from .conftest import finding

UTILS = {"vllm/v1/attention/__init__.py": "", "vllm/v1/attention/backends/__init__.py": "",
         "vllm/v1/attention/backends/utils.py": "def resolve_kv_cache_layout(config):\n    return 'NHD'\n\n\n"
                                                "def set_kv_cache_layout(layout):\n    pass\n"}
CORE = """
from vllm.v1.attention.backends.utils import resolve_kv_cache_layout, set_kv_cache_layout


class EngineCore:
    def __init__(self, vllm_config, executor_class):
        self.vllm_config = vllm_config
        self.model_executor = executor_class(vllm_config)
        layout = resolve_kv_cache_layout({reads})
        set_kv_cache_layout(layout)
"""
NONE = {"vllm/v1/engine/__init__.py": "", "vllm/v1/engine/core.py": "class EngineCore:\n    pass\n", **UTILS}
RESOLVES = {"vllm/v1/engine/__init__.py": "", "vllm/v1/engine/core.py": CORE.format(reads="self.vllm_config"),
            **UTILS}
OWN_STATE = {"vllm/v1/engine/__init__.py": "", "vllm/v1/engine/core.py": CORE.format(reads="self.scheduler"),
             **UTILS}
CREATED = "from vllm.v1.executor.abstract import Executor\n\n\ndef start(config):\n" \
          "    executor = Executor(vllm_config=config)\n    return executor\n"
RETURNED = "from vllm.v1.executor.abstract import Executor\n\n\ndef start(config):\n" \
           "    return Executor(vllm_config=config)\n"
LAYOUT = "vllm.v1.engine.core.EngineCore:resolve_kv_cache_layout"
WARM_UP = "vllm.v1.engine.core.EngineCore:compile_or_warm_up_model"
UNKNOWN = "vllm.v1.engine.core.EngineCore:tune_the_flux_capacitor"


@pytest.mark.parametrize(("source", "builds", "step", "claimed", "accepted", "note"), [
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": RESOLVES}, LAYOUT, True, "", "the KV cache layout is resolved "
                 "with the engine core's own statements (vLLM 0.2.0: vllm/v1/engine/core.py:8; vLLM 0.2.0)",
                 id="layout resolved"),
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": OWN_STATE}, LAYOUT, False, "",
                 "vLLM 0.2.0: the KV cache layout is not resolved: the step reads the engine core's own state: "
                 "self.scheduler", id="step reads engine state: note only"),
    pytest.param(RETURNED, {"0.1.0": NONE, "0.2.0": RESOLVES}, LAYOUT, False, "",
                 "the executor is not created as `x = Executor(...)` at pkg/run.py:5", id="not assigned: note only"),
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": RESOLVES}, WARM_UP, False,
                 NOT_NEEDED["compile_or_warm_up_model"].text(), "", id="not needed: accepted"),
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": RESOLVES}, UNKNOWN, False, "", "", id="unknown step: left"),
])
def test_startup_steps(fixing, source, builds, step, claimed, accepted, note):
    skipped = finding("startup", step, "pkg/run.py:5")
    ctx = fixing.context({"pkg/run.py": source}, builds, given={"0.2.0": [skipped]})
    plan = FIXER.plan(ctx)
    assert not plan.unhandled
    assert any(c.covers(skipped) for c in plan.claims) == claimed
    assert [why for c, why in plan.accepted if c.covers(skipped)] == ([accepted] if accepted else [])
    assert [n for n in plan.notes if note in n] if note else not plan.notes, plan.notes
    if not claimed:
        assert not plan.edits and not plan.pieces
        return
    [piece] = plan.pieces
    assert "layout = resolve_kv_cache_layout(vllm_config)" in piece.code and "set_kv_cache_layout(layout)" in \
        piece.code
    lines = fixing.edited(ctx, plan)["pkg/run.py"].splitlines()
    at = lines.index("    executor = Executor(vllm_config=config)")
    assert lines[at + 1] == "    vllm_compat.resolve_kv_cache_layout(executor, config)"


def test_no_finding_plans_nothing(fixing):
    assert FIXER.plan(fixing.context({"pkg/run.py": CREATED}, {"0.1.0": NONE, "0.2.0": RESOLVES})).empty
