"""The confirmation probe's comparison: agreement is ok, disagreement is an error finding with both verdicts."""

from compat.findings import Status
from compat.probe import ProbeContext
from compat.touchpoints import Scan
from probes.confirm import PROBE


def context() -> ProbeContext:
    scan = Scan("c", None, "test", "vllm", ())
    return ProbeContext(scan, surface=None)  # type: ignore[arg-type]


def test_agreement_and_disagreement():
    ctx = context()
    ok = PROBE._compare(ctx, "replies", "reply shape", "single", "single")
    bad = PROBE._compare(ctx, "replies", "reply shape", "list", "single")
    assert ok.status is Status.OK and bad.status is Status.ERROR
    assert "static 'list'" in bad.message and "runtime 'single'" in bad.message
    assert [agree for agree, _ in ctx.confirmed["reply-shape"]] == [True, False]
