"""fixers/defaults.py: each changed default of a config the consumer builds, by what the build shows about it: a
switch turned on is kept off (claimed, the config routed through the shim), a ``disable_*`` switch turned on, a
None that became a config made with its own defaults and a ``*_cls`` the consumer never uses are accepted with
why, anything else is left unhandled with the finding's own words."""

from __future__ import annotations

import pytest
from compat.fixers.defaults import FIXER
from compat.probes.defaults import PROBE

CONFIG = '''
import dataclasses


class ObservabilityConfig:
    pass


@dataclasses.dataclass
class SchedulerConfig:
    max_num_seqs: int = 8
    async_scheduling: bool = {a}
    disable_hybrid: bool = {d}
    observability: object = {o}
    scheduler_cls: object = {c}
    mode: str = {m}

    def __post_init__(self):
        if self.async_scheduling or self.disable_hybrid or self.observability or self.scheduler_cls or self.mode:
            pass
'''
OLD = {"vllm/config.py": CONFIG.format(a=False, d=False, o=None, c=None, m='"a"')}
NEW = {"vllm/config.py": CONFIG.format(a=True, d=True, o="dataclasses.field(default_factory=ObservabilityConfig)",
                                       c='"vllm.core.Scheduler"', m='"b"')}
"""0.2.0 changed every default but ``max_num_seqs``; ``__post_init__`` reads them all, so each is ``changed``."""
CONSUMER = ("from vllm.config import SchedulerConfig\nfrom vllm.core import MyScheduler\n\n\ndef make():\n"
            "    MyScheduler()\n    return SchedulerConfig(max_num_seqs=4)\n")
ALIASED = CONSUMER.replace("import SchedulerConfig", "import SchedulerConfig as SC").replace(
    "return SchedulerConfig", "return SC")


@pytest.mark.parametrize(("consumer", "field", "outcome", "says"), [
    (CONSUMER, "async_scheduling", "claimed", "keeps async_scheduling=False"),
    (CONSUMER, "disable_hybrid", "accepted", "turns a feature off by default (disable_hybrid=True)"),
    (CONSUMER, "observability", "accepted", "None became ObservabilityConfig(), made with its own defaults"),
    (CONSUMER, "scheduler_cls", "accepted", "the consumer builds that object itself (pkg/run.py:6)"),
    (CONSUMER, "mode", "unhandled", "no rule of the defaults fixer covers this change: SchedulerConfig.mode "
                                    "defaults to 'b'"),
    (ALIASED, "async_scheduling", "unhandled", "does not build SchedulerConfig from `from vllm.config import "
                                               "SchedulerConfig`"),
])
def test_each_changed_default(fixing, consumer, field, outcome, says):
    ctx = fixing.context({"pkg/run.py": consumer}, {"0.1.0": OLD, "0.2.0": NEW}, PROBE, written_for=OLD)
    symbol = f"vllm.config.SchedulerConfig.{field}"
    [(build, finding)] = [(b, f) for b, f in ctx.failing(PROBE) if f.symbol == symbol]
    assert build.version == "0.2.0"
    plan = FIXER.plan(ctx)
    got = {"claimed": [c for c in plan.claims if c.covers(finding)],
           "accepted": [why for c, why in plan.accepted if c.covers(finding)],
           "unhandled": [u.reason for u in plan.unhandled if u.finding == finding]}
    assert [k for k, v in got.items() if v] == [outcome], got
    if outcome == "claimed":
        assert says in plan.notes[0] and "vLLM 0.2.0" in plan.notes[0]
    else:
        assert says in got[outcome][0]


def test_a_switch_kept_off_routes_the_config_through_the_shim(fixing):
    ctx = fixing.context({"pkg/run.py": CONSUMER}, {"0.1.0": OLD, "0.2.0": NEW}, PROBE, written_for=OLD)
    plan = FIXER.plan(ctx)
    [adjust] = [p for p in plan.pieces if p.wraps]
    assert adjust.wraps == "SchedulerConfig" and "'async_scheduling': False" in adjust.code
    assert "'mode'" not in adjust.code and "disable_hybrid'" not in adjust.code
    text = fixing.edited(ctx, plan)["pkg/run.py"]
    assert "from pkg._vllm_compat import SchedulerConfig" in text and "from vllm.config" not in text
    assert "return SchedulerConfig(max_num_seqs=4)" in text


def test_nothing_changed_plans_nothing(fixing):
    ctx = fixing.context({"pkg/run.py": CONSUMER}, {"0.1.0": OLD, "0.1.1": OLD}, PROBE, written_for=OLD)
    assert not ctx.failing(PROBE) and FIXER.plan(ctx).empty


def test_the_re_audit_reads_the_switches_the_shim_keeps_off(fixing):
    """The shim's pinned defaults are read back from its own source, and given to the consumer's configs on each
    build whose class has the field (the wrapper passes it only there)."""
    from compat.fix.pipeline import shim_settings
    from compat.fix.shim import pinned

    ctx = fixing.context({"pkg/run.py": CONSUMER}, {"0.1.0": OLD, "0.2.0": NEW}, PROBE, written_for=OLD)
    plan = FIXER.plan(ctx)
    [adjust] = [p for p in plan.pieces if p.wraps]
    pins = pinned(adjust.code)
    assert pins == {"SchedulerConfig": {"async_scheduling": "False"}}
    [new, old] = sorted(ctx.builds, key=lambda b: b.version, reverse=True)
    assert shim_settings(pins, new.surface) == (("SchedulerConfig", "async_scheduling", "False"),)
    without = {**pins, "SchedulerConfig": {**pins["SchedulerConfig"], "no_such_field": "False"}}
    assert shim_settings(without, new.surface) == (("SchedulerConfig", "async_scheduling", "False"),)
