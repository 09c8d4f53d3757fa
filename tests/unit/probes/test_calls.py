"""probes/calls.py: each call of a vLLM callable binds to the audited signature.

Not covered offline: ``error`` (a callee read with a traceback) comes only from the runtime reading of an installed
build; the static reading gives no traceback."""

from __future__ import annotations

import pytest
from compat.probes.calls import PROBE

from compat.findings import Status

CONFIG = '''
    import functools
    from typing import overload


    def opaque(fn):
        return functools.wraps(fn)(lambda *a, **k: fn(*a, **k))


    class SamplingParams:
        def __init__(self, n: int = 1, temperature: float = 1.0, *, max_tokens: int = 16{extra}):
            self.n = n


    def tokens(prompt, {pair}, *, strict=False):
        return prompt


    @overload
    def pick(x: int) -> int: ...
    @overload
    def pick(x: str, y: int) -> str: ...
    def pick(x, y=0, *, strict=False):
        return x


    def only_positional(x, /):
        return x


    class Method:
        def apply(self, layer, x):
            return x


    class Runner:
        def __init__(self):
            self.method: Method = Method()

        def step(self, batch):
            return batch


    def make():
        return Runner()


    step_alias = getattr(Runner, "step")
    decorated = some_decorator_factory()(tokens)
'''

LAZY = "def __getattr__(name):\n    import importlib\n    return importlib.import_module('vllm.' + name)\n"


def build(extra: str = "", pair: str = "a, b") -> dict[str, str]:
    return {"vllm/config.py": CONFIG.format(extra=extra, pair=pair), "vllm/lazy.py": LAZY}


NOW = build(extra=", seed: int", pair="b, a")
THEN = build()

IMPORTS = "from vllm.config import Method, Runner, SamplingParams, decorated, only_positional, pick, tokens\n\n\n"


def use(line: str, classes: str = "") -> str:
    return f"{IMPORTS}{classes}\ndef run(runner: Runner, batch):\n    return {line}\n"


def guarded(owner: str) -> str:
    """A call that runs only where vLLM's ``owner`` has ``gone`` (the audit around the probe evaluates it)."""
    return (f"{IMPORTS}\ndef run():\n    if hasattr({owner}, 'gone'):\n"
            "        return SamplingParams(n=2, max_tokens=4)\n")


MY_METHOD = '''
class MyMethod(Method):
    def apply(self, layer, x, router_logits):
        return x

'''

OWN_TOKENS = '''
import vllm.config


def my_tokens(prompt, *args, **kwargs):
    return prompt


vllm.config.tokens = my_tokens
'''

# (consumer, build written for (None: not known), expected status (None: the probe says nothing), words)
CASES = [
    pytest.param(use("SamplingParams(n=2, max_tokens=4, seed=1)"), None, Status.OK,
                 ["SamplingParams() binds"], id="binds"),
    pytest.param(use("SamplingParams(n=2, max_tokens=4)"), None, Status.BROKEN,
                 ["requires 'seed'"], id="missing-required"),
    pytest.param(use("SamplingParams(n=2, top_k=4, seed=1)"), None, Status.BROKEN,
                 ["top_k"], id="unexpected-keyword"),
    pytest.param(use("SamplingParams(2, 1.0, 16, seed=1)"), None, Status.BROKEN,
                 ["positional"], id="too-many-positional"),
    pytest.param(use("only_positional(x=1)"), None, Status.BROKEN, ["x"], id="positional-only-by-keyword"),
    pytest.param(use("pick(1, 2, strict=True)"), None, Status.OK, ["pick() binds"], id="overload-implementation"),
    pytest.param(use("pick(1, 2, 3)"), None, Status.BROKEN, ["positional"], id="overload-too-many"),
    pytest.param(use("tokens('p', 1, 2)"), THEN, Status.CHANGED,
                 ["binds, but positionally shifted", "argument 2 now binds to 'b' (was 'a')"], id="positional-shift"),
    pytest.param(use("tokens('p', a=1, b=2)"), THEN, Status.OK, ["tokens() binds"], id="by-keyword-no-shift"),
    pytest.param(use("Runner.step(runner, batch)"), None, Status.OK, ["step() binds"], id="method-through-class"),
    pytest.param(use("runner.step(batch, 1)"), None, Status.BROKEN, ["positional"], id="method-on-instance"),
    pytest.param(use("runner.method.apply(None, batch, router_logits=batch)"), None, Status.BROKEN,
                 ["router_logits"], id="method-refuses-keyword"),
    pytest.param(use("runner.method.apply(None, batch, router_logits=batch)", MY_METHOD), None, Status.UNKNOWN,
                 ["may at run time be consumer.MyMethod", "the runtime class decides"], id="stand-in-takes-it"),
    pytest.param(use("decorated('p', 1, 2)"), None, Status.UNKNOWN,
                 ["signature of vllm.config.decorated unknown"], id="signature-unknown"),
    pytest.param("from vllm.lazy import thing\n\n\ndef run():\n    return thing(1)\n", None, Status.UNKNOWN,
                 ["cannot bind thing()", "module __getattr__"], id="callee-unresolved"),
    pytest.param(IMPORTS.replace("decorated, ", "decorated, gone, ") + "\ndef run():\n    return gone(1)\n",
                 None, Status.BROKEN, ["cannot bind gone()", "no name 'gone'"], id="callee-missing"),
    pytest.param(use("tokens('p', 1, 2, 3)", OWN_TOKENS), None, None, [], id="replaced-by-the-consumer"),
    pytest.param(guarded("Runner"), None, Status.OK, ["not run with this build", "hasattr(Runner, 'gone')"],
                 id="guard-false-on-this-build"),
    pytest.param(guarded("decorated"), None, Status.UNKNOWN,
                 ["requires 'seed'", "but this code is guarded", "cannot be evaluated"], id="guard-unknown"),
    pytest.param(use("runner.gone(1)"), None, None, [], id="missing-method-is-the-attribute-probe-s"),
    # vllm-ascend 0.18.0: ``SpeculativeConfig.__pydantic_decorators__.model_validators.get(...)``, made by pydantic
    pytest.param(use("SamplingParams.__pydantic_decorators__.model_validators.get('x')"), None, None, [],
                 id="through-a-dunder-not-vllm-s"),
    pytest.param(use("SamplingParams.gone.model_validators.get('x')"), None, Status.BROKEN, ["no attribute 'gone'"],
                 id="through-a-missing-name"),
]


@pytest.mark.parametrize(("source", "written_for", "status", "says"), CASES)
def test_a_call_against_the_audited_signature(trees, source, written_for, status, says):
    findings = [f for f in trees.findings(PROBE, source, NOW, written_for) if not f.symbol.endswith("Runner")]
    if status is None:
        assert findings == [], [f.message for f in findings]
        return
    assert [f.status for f in findings] == [status], [(f.symbol, f.message) for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


def test_the_fix_and_evidence_name_what_changed(trees):
    (finding,) = trees.findings(PROBE, use("SamplingParams(n=2, max_tokens=4)"), NOW, THEN)
    assert finding.status is Status.BROKEN and "pass `seed=`" in finding.fix
    assert "seed" in finding.evidence.audited and "seed" not in finding.evidence.written_for
