"""The capture shim's run-time side (fixers/capture.py ``CODE``), without vLLM: a decoder layer's stream is read
only where the running code is the code the audit read (the same fingerprint, computed by the shim from the
running module's file), a condition the audit kept is evaluated on the real layer, and anything else refuses
with the layer's class named."""

from __future__ import annotations

import ast
import json
import sys
import textwrap

import pytest
import torch
from compat.fixers.capture import CODE

from compat.facts.algebra import fingerprint

LAYER = '''
import torch


class Layer(torch.nn.Module):
    def __init__(self, tp_size=1):
        super().__init__()
        self.tp_size = tp_size
        self.weight = torch.nn.Parameter(torch.ones(4))

    def forward(self, positions, hidden_states, residual):
        residual = hidden_states + residual if residual is not None else hidden_states
        return hidden_states * 2, residual
'''


@pytest.fixture
def shim(tmp_path, monkeypatch):
    """The shim's capture code over a module ``fake_layers`` written here, and the fingerprint the audit would
    give its ``Layer.forward``."""
    (tmp_path / "fake_layers.py").write_text(textwrap.dedent(LAYER))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("fake_layers", None)
    import fake_layers

    lines = (tmp_path / "fake_layers.py").read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward")

    def make(entries):
        """``entries`` name the defs they read as (module, qualname, fingerprint); the shim lists them once."""
        codes: list = []
        listed = []
        for outputs, reason, read, unless, texts in entries:
            indices = []
            for code in read:
                if code not in codes:
                    codes.append(code)
                indices.append(codes.index(code))
            listed.append((outputs, reason, tuple(indices), unless, texts))
        namespace = {"__name__": "pkg._vllm_compat", "GENERATED_FOR": ("0.1.0",), "AUDITED": ("0.1.0",),
                     "_STACK_PATHS": (("model",),), "_CODES": codes, "_STREAMS": {"fake_layers.Layer": listed}}
        exec("import ast, hashlib, importlib, importlib.util, inspect, json, sys\n" + CODE, namespace)  # noqa: S102
        return namespace

    yield make, fake_layers, fingerprint(lines, node)
    sys.modules.pop("fake_layers", None)


def test_the_running_code_is_recognised_and_read(shim):
    make, module, printed = shim
    ns = make([((0, 1), None, (("fake_layers", "Layer.forward", printed),), (), ())])
    layer = module.Layer()
    assert ns["stream_outputs"](layer, 0, "float32") == (0, 1)
    h, r = torch.ones(2, 4), torch.full((2, 4), 3.0)
    assert torch.equal(ns["_stream"](layer(None, h, r), (0, 1), 0), h * 2 + h + r)


def test_other_code_is_refused_naming_the_class(shim):
    make, module, printed = shim
    ns = make([((0, 1), None, (("fake_layers", "Layer.forward", "0" * 16),), (), ())])
    with pytest.raises(ns["CaptureRefused"], match="fake_layers.Layer.*not the code compat.fix read"):
        ns["stream_outputs"](module.Layer(), 3, "float32")
    assert not ns["capture_proven"](type("M", (), {"model": type("S", (), {"layers": [module.Layer()]})(),
                                                   "parameters": lambda self: iter(())})())


def test_an_unread_layer_and_an_unreadable_one_are_refused(shim):
    make, module, printed = shim
    ns = make([(None, "its outputs cannot be read: a loop", (("fake_layers", "Layer.forward", printed),), (), ())])
    with pytest.raises(ns["CaptureRefused"], match="cannot capture decoder layer 0 .fake_layers.Layer.: its outputs"):
        ns["stream_outputs"](module.Layer(), 0, "float32")
    ns["_STREAMS"].clear()
    with pytest.raises(ns["CaptureRefused"], match="compat.fix did not read"):
        ns["stream_outputs"](module.Layer(), 0, "float32")


def test_a_kept_condition_is_evaluated_on_the_layer(shim):
    make, module, printed = shim
    tp = [[["atom", "self", "self.tp_size > 1", "fake_layers"], True]]
    dtype = [[["atom", "dtype", "float16", ""], True]]
    ns = make([((0, 1), None, (("fake_layers", "Layer.forward", printed),),
                (json.dumps(tp), json.dumps(dtype)), ("self.tp_size > 1: lost", "float16: scaled"))])
    assert ns["stream_outputs"](module.Layer(tp_size=1), 0, "float32") == (0, 1)
    with pytest.raises(ns["CaptureRefused"], match="self.tp_size > 1: lost; that holds"):
        ns["stream_outputs"](module.Layer(tp_size=2), 0, "float32")
    with pytest.raises(ns["CaptureRefused"], match="float16: scaled"):
        ns["stream_outputs"](module.Layer(tp_size=1), 0, "float16")
    with pytest.raises(ns["CaptureRefused"], match="may hold"):
        ns["stream_outputs"](module.Layer(tp_size=1), 0, None)  # the dtype not known: it may hold
