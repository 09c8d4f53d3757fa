"""fixers/startup.py: start-up steps of the engine core a hand-built pipeline skips (``startup`` findings): the
KV cache layout is resolved after the executor is created, and the model warmed up after the executor's
``initialize_from_config``, with the engine core's own statements of each build (feature-detected), also where the
audit could not decide the step (unknown); no step is accepted on a list; a step the fixer does not know is left
as it is; a build whose step reads the engine core's own state, or an executor not created as
``x = Executor(...)``, leaves a note and no edit.

The ``startup`` findings are given; the engine cores the fixer replays are hand-written."""

from __future__ import annotations

import ast

import pytest
from compat.fixers.startup import FIXER

from compat.findings import Status

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
WARMS = {"vllm/envs.py": "VLLM_ELASTIC_EP_SCALE_UP_LAUNCH = False\n", "vllm/v1/engine/__init__.py": "",
         "vllm/v1/engine/core.py": """
import vllm.envs as envs


class EngineCore:
    def __init__(self, vllm_config, executor_class):
        self.model_executor = executor_class(vllm_config)
        self.model_executor.initialize_from_config([])
        if not envs.VLLM_ELASTIC_EP_SCALE_UP_LAUNCH:
            self.model_executor.compile_or_warm_up_model()
"""}
INITIALIZED = "from vllm.v1.executor.abstract import Executor\n\n\ndef start(config, kv):\n" \
              "    executor = Executor(vllm_config=config)\n    executor.initialize_from_config(kv)\n" \
              "    return executor\n"
CREATED = "from vllm.v1.executor.abstract import Executor\n\n\ndef start(config):\n" \
          "    executor = Executor(vllm_config=config)\n    return executor\n"
RETURNED = "from vllm.v1.executor.abstract import Executor\n\n\ndef start(config):\n" \
           "    return Executor(vllm_config=config)\n"
LAYOUT = "vllm.v1.engine.core.EngineCore:resolve_kv_cache_layout"
WARM_UP = "vllm.v1.engine.core.EngineCore:compile_or_warm_up_model"
UNKNOWN = "vllm.v1.engine.core.EngineCore:tune_the_flux_capacitor"


@pytest.mark.parametrize(("source", "builds", "step", "claimed", "accepted", "note"), [
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": RESOLVES}, LAYOUT, True, "", "after creating the executor, "
                 "resolve_kv_cache_layout is performed with the engine core's own statements (vLLM 0.2.0: "
                 "vllm/v1/engine/core.py:8; vLLM 0.2.0)",
                 id="layout resolved"),
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": OWN_STATE}, LAYOUT, False, "",
                 "vLLM 0.2.0: resolve_kv_cache_layout is not performed: the step reads the engine core's own state: "
                 "self.scheduler", id="step reads engine state: note only"),
    pytest.param(RETURNED, {"0.1.0": NONE, "0.2.0": RESOLVES}, LAYOUT, False, "",
                 "the executor is not created as `x = Executor(...)` at pkg/run.py:5", id="not assigned: note only"),
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": RESOLVES}, WARM_UP, False, "", "",
                 id="a step no build's engine core performs: left to the re-audit, never accepted on a list"),
    pytest.param(CREATED, {"0.1.0": NONE, "0.2.0": WARMS}, WARM_UP, False, "",
                 "executor.initialize_from_config(...) is not called as a statement of the function that creates "
                 "the executor at pkg/run.py:5; compile_or_warm_up_model is not performed", id="warm-up: no anchor"),
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


@pytest.mark.parametrize("status", [Status.UNKNOWN, Status.CHANGED])
def test_the_warm_up_is_performed_after_initialize_from_config_where_a_build_s_engine_core_does_it(fixing, status):
    """The step is performed also where the audit could not decide it (unknown): as the engine core does it, in
    the builds whose engine core does it (0.2.0 here; 0.1.0's has no such statement, so no branch for it)."""
    skipped = finding("startup", WARM_UP, "pkg/run.py:5", status=status)
    ctx = fixing.context({"pkg/run.py": INITIALIZED}, {"0.1.0": NONE, "0.2.0": WARMS}, given={"0.2.0": [skipped]})
    plan = FIXER.plan(ctx)
    assert any(c.covers(skipped) for c in plan.claims) and not plan.accepted
    [piece] = plan.pieces
    ast.parse(piece.code)  # the engine core's statements keep their blocks
    assert "importlib.util.find_spec('vllm.envs') is not None" in piece.code  # 0.1.0 has no vllm.envs
    assert "envs = importlib.import_module('vllm.envs')" in piece.code and "import importlib.util" in piece.imports
    assert "            executor.compile_or_warm_up_model()" in piece.code and "# vLLM 0.2.0:" in piece.code
    assert "vLLM 0.1.0" not in piece.code
    lines = fixing.edited(ctx, plan)["pkg/run.py"].splitlines()
    at = lines.index("    executor.initialize_from_config(kv)")
    assert lines[at + 1] == "    vllm_compat.compile_or_warm_up_model(executor, config)"


def test_an_ok_step_plans_nothing(fixing):
    skipped = finding("startup", WARM_UP, "pkg/run.py:5", status=Status.OK)
    ctx = fixing.context({"pkg/run.py": INITIALIZED}, {"0.1.0": NONE, "0.2.0": WARMS}, given={"0.2.0": [skipped]})
    assert FIXER.plan(ctx).empty


def test_no_finding_plans_nothing(fixing):
    assert FIXER.plan(fixing.context({"pkg/run.py": CREATED}, {"0.1.0": NONE, "0.2.0": RESOLVES})).empty
