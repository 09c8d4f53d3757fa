"""fixers/kv_cache.py: a KV cache the consumer plans itself (``x = get_kv_cache_config_from_groups(...)``) is
checked right after, as vLLM's engine core checks its own; no finding is involved. Skipped where the plan is not
assigned to a name or the call does not name the config and the memory."""

from __future__ import annotations

import pytest
from compat.fixers.kv_cache import FIXER

UTILS = "vllm/v1/core/kv_cache_utils.py"
PLAN = "def get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, kv_cache_specs, available_memory):\n" \
       "    pass\n"
CHECK = "def check_enough_kv_cache_memory(vllm_config, spec, memory):\n    pass\n"
CONCURRENCY = "def get_max_concurrency_for_kv_cache_config(vllm_config, config):\n    return 1\n"
BUILDS = {"0.1.0": {"vllm/v1/core/__init__.py": "", UTILS: PLAN + CHECK},
          "0.2.0": {"vllm/v1/core/__init__.py": "", UTILS: PLAN + CHECK + CONCURRENCY}}
HEAD = "from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups\n\n\ndef plan(config, groups, specs):\n"


@pytest.mark.parametrize(("body", "inserted"), [
    pytest.param("    kv = get_kv_cache_config_from_groups(config, groups, specs, 1024)\n    return kv\n",
                 "vllm_compat.check_kv_cache(config, specs, 1024, kv)", id="positional: checked"),
    pytest.param("    kv = get_kv_cache_config_from_groups(vllm_config=config, kv_cache_groups=groups,\n"
                 "                                         available_memory=1024)\n    return kv\n",
                 "vllm_compat.check_kv_cache(config, None, 1024, kv)", id="keywords, no specs: checked"),
    pytest.param("    return get_kv_cache_config_from_groups(config, groups, specs, 1024)\n", "",
                 id="not assigned: skipped"),
    pytest.param("    kv = get_kv_cache_config_from_groups(config, groups)\n    return kv\n", "",
                 id="no memory named: skipped"),
    pytest.param("    return None\n", "", id="no plan of its own: nothing"),
])
def test_kv_cache_check(fixing, body, inserted):
    ctx = fixing.context({"pkg/run.py": HEAD + body}, BUILDS)
    plan = FIXER.plan(ctx)
    assert not plan.claims and not plan.unhandled
    if not inserted:
        assert plan.empty and not plan.notes
        return
    [piece] = plan.pieces
    assert "_CHECK_ENOUGH = ('vllm.v1.core.kv_cache_utils.check_enough_kv_cache_memory',)" in piece.code
    assert "_MAX_CONCURRENCY = ('vllm.v1.core.kv_cache_utils.get_max_concurrency_for_kv_cache_config',)" \
           in piece.code
    assert plan.notes[0].startswith("pkg/run.py:5: the KV cache the pipeline plans is checked")
    lines = fixing.edited(ctx, plan)["pkg/run.py"].splitlines()
    assert lines[lines.index("    " + inserted) + 1] == "    return kv"
