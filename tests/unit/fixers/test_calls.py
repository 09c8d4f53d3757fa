"""fixers/calls.py: a call a build no longer binds: keywords it stopped accepting dropped, parameters it started
requiring passed as vLLM's own code computes them; declined where the call or its import cannot be routed."""

from __future__ import annotations

import pytest
from compat.fixers.calls import FIXER
from compat.probes.calls import PROBE

from .conftest import covers

CONFIG = """
class ModelConfig:
    def __init__(self, is_encoder_decoder=False):
        self.is_encoder_decoder = is_encoder_decoder


class SchedulerConfig:
    def __init__(self, max_num_seqs=8{params}):
        self.max_num_seqs = max_num_seqs


class VllmConfig:
    def __init__(self, model_config=None, scheduler_config=None):
        self.model_config = model_config
"""
OLD = {"vllm/config.py": CONFIG.format(params=", chunked=False")}
DROPPED = {"vllm/config.py": CONFIG.format(params="")}
"""0.2.0 no longer takes ``chunked``."""
REQUIRED = {"vllm/config.py": CONFIG.format(params=", *, is_encoder_decoder"),
            "vllm/engine.py": "from vllm.config import SchedulerConfig\n\n\ndef build(model_config, n):\n"
                              "    return SchedulerConfig(max_num_seqs=n, "
                              "is_encoder_decoder=model_config.is_encoder_decoder)\n"}
"""0.2.0 requires ``is_encoder_decoder``, which its own code passes as ``model_config.is_encoder_decoder``."""
REQUIRED_UNBOUND = {"vllm/config.py": CONFIG.format(params=", *, is_encoder_decoder")}
"""0.2.0 requires ``is_encoder_decoder`` and no code of its own passes it."""

IMPORT = "from vllm.config import ModelConfig, SchedulerConfig, VllmConfig\n\n"
CHUNKED = IMPORT + "def make():\n    return SchedulerConfig(max_num_seqs=4, chunked=True)\n"
NESTED = IMPORT + ("def make(model_config):\n    return VllmConfig(\n        model_config=model_config,\n"
                   "        scheduler_config=SchedulerConfig(max_num_seqs=4),\n    )\n")
ONE_LINE = IMPORT + ("def make(model_config):\n    return VllmConfig(model_config=model_config, "
                     "scheduler_config=SchedulerConfig(max_num_seqs=4))\n")
ALIASED = ("from vllm.config import SchedulerConfig as SC\n\n\ndef make():\n"
           "    return SC(max_num_seqs=4, chunked=True)\n")
POSITIONAL = IMPORT + "def make():\n    return SchedulerConfig(4, False, 3)\n"


@pytest.mark.parametrize(("source", "new", "edited", "notes", "unhandled"), [
    pytest.param(CHUNKED, DROPPED, ["from pkg._vllm_compat import", "SchedulerConfig(max_num_seqs=4, chunked=True)"],
                 ["drops chunked="], "", id="keyword dropped"),
    pytest.param(NESTED, REQUIRED, ["from pkg._vllm_compat import",
                                    "SchedulerConfig(max_num_seqs=4, model_config=model_config)"],
                 ["passes is_encoder_decoder", "model_config.is_encoder_decoder", "also hands the shim model_config"],
                 "", id="required: passed as vLLM computes it"),
    pytest.param(ONE_LINE, REQUIRED, ["SchedulerConfig(max_num_seqs=4, model_config=model_config)"],
                 ["passes is_encoder_decoder"], "", id="required: nested call on the outer call's line"),
    pytest.param(NESTED, REQUIRED_UNBOUND, [], [], "passes is_encoder_decoder to SchedulerConfig only as nothing",
                 id="required: nothing to compute it from"),
    pytest.param(ALIASED, DROPPED, [], [], "is not imported as `from vllm.config import SchedulerConfig`",
                 id="aliased import: declined"),
    pytest.param(POSITIONAL, DROPPED, [], [], "no fixer for", id="too many positionals: declined"),
    pytest.param(CHUNKED, OLD, [], [], "", id="binds everywhere: nothing planned"),
])
def test_calls(fixing, source, new, edited, notes, unhandled):
    ctx = fixing.context({"pkg/run.py": source}, {"0.1.0": OLD, "0.2.0": new}, PROBE)
    plan = FIXER.plan(ctx)
    failing = [f for _, f in ctx.failing(PROBE)]
    assert bool(failing) == (new is not OLD)
    if unhandled:
        assert [u.reason for u in plan.unhandled if unhandled in u.reason], [u.reason for u in plan.unhandled]
        assert not plan.edits and not plan.claims and not plan.pieces
        return
    assert not plan.unhandled
    if not failing:
        assert plan.empty
        return
    assert [f for f in failing if covers(plan, f)] == failing
    adjust = next(p for p in plan.pieces if p.wraps)
    assert adjust.wraps == "SchedulerConfig"
    for says in notes:
        assert any(says in n for n in plan.notes) or says in "".join(p.code for p in plan.pieces), (says, plan.notes)
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    for says in edited:
        assert says in text, text
    assert "from vllm.config import ModelConfig, VllmConfig" in text  # the other names stay
