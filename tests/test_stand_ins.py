"""The object vLLM holds may be the consumer's own class: a subclass of the declared vLLM class (directly, through
vLLM's own subclasses, or through a generic base ``Impl[Metadata]``) or a class the consumer assigns over it. A
call its method takes, or an attribute it defines, is then not ``broken`` against the declared class (vllm-rbln
0.12.0 @ 0.30.0: ``self._quant_method.apply(router_logits=...)`` on its own ``UnquantizedFusedMoEMethod``
subclass). A subclass's own assignment (``self.impl = cast(type[MLAImpl], cls)(...)``) says the attribute's class
better than a base's annotation (``impl: Impl``). Without a stand-in, the same call is still broken."""

from __future__ import annotations

import pytest

from compat.audit.pipeline import run_probes
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

VLLM = {
    "vllm/__init__.py": "",
    "vllm/_version.py": '__version__ = "9.0.0"\n',
    "vllm/layers.py": """
        from typing import Generic, TypeVar, cast

        T = TypeVar("T")


        class MethodBase:
            def apply(self, layer, x, topk_weights, topk_ids):
                raise NotImplementedError


        class Unquantized(MethodBase):
            def apply(self, layer, x, topk_weights, topk_ids):
                return x


        class Impl(Generic[T]):
            def forward(self, layer, query, output):
                raise NotImplementedError


        class MLAImpl(Generic[T]):
            def forward_mqa(self, q):
                raise NotImplementedError


        class LayerBase:
            impl: "Impl"


        class MLALayer(LayerBase):
            def __init__(self, backend):
                impl_cls = cast(type[MLAImpl], backend.get_impl_cls())
                self.impl = impl_cls()


        class Runner:
            def __init__(self):
                self.quant_method: MethodBase = Unquantized()
    """,
}

CONSUMER = """
    from vllm.layers import MLAImpl, MLALayer, Runner, Unquantized
    {extra}


    def step(runner: Runner, x):
        return runner.quant_method.apply(layer=None, x=x, router_logits=x)


    def attend(layer: MLALayer, q):
        return layer.impl.forward(layer, q, q, topk_indices=None)
"""

STAND_INS = """

    class MyMethod(Unquantized):
        def apply(self, layer, x, router_logits):
            return x


    class MyImpl(MLAImpl[dict]):
        def forward(self, layer, q, kv, topk_indices=None):
            return q
"""


def _findings(tmp_path, monkeypatch, extra):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    surface = open_build(str(write_tree(tmp_path / "vllm", VLLM))).surface
    consumer = write_tree(tmp_path / "c", {"plugin.py": CONSUMER.format(extra=extra)})
    return run_probes(ProbeContext(scan_tree(tree_from_path(consumer / "plugin.py")), surface, None))


@pytest.mark.parametrize(("extra", "broken"), [("", True), (STAND_INS, False)])
def test_a_call_the_consumers_subclass_takes_is_not_broken(tmp_path, monkeypatch, extra, broken):
    findings = [f for f in _findings(tmp_path, monkeypatch, extra) if f.symbol.endswith("quant_method.apply")]
    assert findings, "the call was not audited"
    assert (findings[0].status is Status.BROKEN) is broken, findings[0].message
    if not broken:
        assert findings[0].status is Status.UNKNOWN and "MyMethod" in findings[0].message


@pytest.mark.parametrize(("extra", "status"), [("", Status.UNKNOWN), (STAND_INS, Status.OK)])
def test_a_subclass_assignment_types_the_attribute_over_the_base_annotation(tmp_path, monkeypatch, extra, status):
    """``layer.impl`` is the ``MLAImpl`` MLALayer assigns, not the ``Impl`` LayerBase annotates (whose forward
    refuses ``topk_indices``): an interface without ``forward`` (unknown), or one the consumer's subclass gives
    ``forward`` (its own)."""
    findings = [f for f in _findings(tmp_path, monkeypatch, extra) if f.symbol.endswith(".forward")]
    assert findings and all(f.symbol == "vllm.layers.MLAImpl.forward" for f in findings), \
        [(f.symbol, f.message) for f in findings]
    assert {f.status for f in findings} == {status}, [f.message for f in findings]
