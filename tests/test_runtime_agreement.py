"""The static reading of the installed vLLM agrees with its runtime reading (inspect.signature)."""

from __future__ import annotations

import pytest

from compat.consumer.result import Kind, Ref
from compat.probe import ProbeContext
from compat.signature import Signature
from compat.vllm.surface import Found

from .signature_views import views

pytestmark = [pytest.mark.runtime, pytest.mark.network]


@pytest.fixture(scope="module")
def surfaces():
    pytest.importorskip("vllm")
    from compat.vllm.runtime import RuntimeSurface

    runtime = RuntimeSurface()
    return runtime, runtime.static


def test_static_and_runtime_agree_on_every_signature_speculators_touches(speculators_scan, surfaces):
    runtime, static = surfaces
    assert runtime.build.version == "0.32.0"
    compared = 0
    for tp in speculators_scan.touchpoints:
        if tp.call is None or tp.kind not in (Kind.CALL, Kind.ATTRIBUTE):
            continue
        sigs = []
        for surface in (static, runtime):
            ctx = ProbeContext(speculators_scan, surface)
            found = ctx.lookup(tp.symbol) if tp.kind == Kind.CALL else ctx.callee(
                Ref("attribute", base=tp.receiver, name=tp.attribute))
            sigs.append(surface.signature(found) if isinstance(found, Found) else found)
        if not all(isinstance(s, Signature) for s in sigs):
            # Only objects whose class neither reading can know (the model behind model_runner) may differ.
            assert "model_runner" in tp.symbol, (tp, sigs)
            continue
        s, r = views(*sigs)
        assert s == r, f"{tp.symbol} at {tp.location}\nstatic : {sigs[0]}\nruntime: {sigs[1]}"
        compared += 1
    assert compared >= 25
