"""probes/confirm.py: the static verdicts against what a real engine observed, without an engine: compat's own
runner of the checks (``compat.confirm.observe``, which starts the child processes) is replaced by one that returns
what the children would have reported, so the probe's comparison and its failure handling run on a static tree."""

from __future__ import annotations

import copy

import pytest
from compat.probes.confirm import PROBE

from compat import confirm
from compat.findings import Status

from . import executors, llama
from .test_block_hashing import build as hashing_build

STATIC = {**executors.build(), **hashing_build("True"), **llama.build()}
"""The build the static verdicts are read from: collective_rpc with a rank gives the value itself, a two-phase
execute_model, prefix caching on by default (an assert in cache_full_blocks), a Llama, no engine core."""

LLAMA = "vllm.model_executor.models.llama"
MODEL = {"cls": f"{LLAMA}.LlamaForCausalLM", "eagle3": True, "base": f"{LLAMA}.LlamaModel",
         "layer": f"{LLAMA}.LlamaDecoderLayer", "path": ["model"], "embedding": ["embed_input_ids"],
         "layer_parameters": ["positions", "hidden_states", "residual"], "stream": [0, 1], "stream_error": 1e-7}
ENGINE = {"dtype": "float32", "attempts": ["float32: ran"], "startup_calls": ["shutdown"], "model": MODEL,
          "prefix_caching": True, "protocol": {"execute_model_returned_none": True, "second_call": "RuntimeError"},
          "hashing": {"failure": "AssertionError", "prefix_caching": True, "where": "block_pool.py:1"}}
REPLIES = {"dtype": "float32", "attempts": ["float32: ran"],
           "multiproc": {"without_rank": "list", "with_rank": "single", "workers": 1}}


def observed(replies: dict | None = None, engine: dict | None = None) -> dict:
    """What the children report (``compat.confirm.observe``'s result), each check as given or as the static
    reading predicts."""
    engine = copy.deepcopy(engine if engine is not None else ENGINE)
    return {"replies_tp1": copy.deepcopy(replies or REPLIES), "replies_tp2": copy.deepcopy(REPLIES),
            "engine": engine, "models": {"LlamaForCausalLM": engine}}


def with_(base: dict, path: str, value) -> dict:
    changed = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = changed
    for key in parents:
        node = node[key]
    node[last] = value
    return changed


STREAM = "model:LlamaForCausalLM decoder layer outputs that sum to the residual stream"
REPLIES_LABEL = "reply-shape:MultiprocExecutor.collective_rpc with rank (tensor parallel 1)"

# (what the children report, the finding judged (its symbol), expected status, words the message holds)
CASES = [
    pytest.param(observed(), REPLIES_LABEL, Status.OK, ["the engine confirms the static verdict", "'single'"],
                 id="replies-agree"),
    pytest.param(observed(replies=with_(REPLIES, "multiproc.with_rank", "list")), REPLIES_LABEL, Status.ERROR,
                 ["the static reading and the engine disagree", "static 'single', runtime 'list'"],
                 id="replies-disagree"),
    pytest.param(observed(replies={"error": "RuntimeError: boom", "traceback": "Traceback ..."}), "replies TP=1",
                 Status.ERROR, ["runtime confirmation of replies TP=1 failed: RuntimeError: boom"],
                 id="replies-check-raised"),
    pytest.param(observed(replies={"unconfirmed": "the replies check died by SIGILL", "signal": "SIGILL"}),
                 "replies TP=1", Status.UNKNOWN, ["could not confirm replies TP=1 on a real engine",
                                                  "died by SIGILL"], id="replies-check-unconfirmed"),
    pytest.param(observed(engine={"unsupported": "NotImplementedError: not on CPU"}), "engine", Status.UNKNOWN,
                 ["could not confirm engine", "the engine cannot run it here: NotImplementedError"],
                 id="engine-unsupported"),
    pytest.param(observed(engine={"error": "ValueError: bad config"}), "engine", Status.ERROR,
                 ["runtime confirmation of engine failed: ValueError: bad config"], id="engine-raised"),
    pytest.param(observed(), "protocol:execute_model returns None (two-phase)", Status.OK, ["= True"],
                 id="protocol-agrees"),
    pytest.param(observed(engine=with_(ENGINE, "protocol.execute_model_returned_none", False)),
                 "protocol:execute_model returns None (two-phase)", Status.ERROR, ["static True, runtime False"],
                 id="protocol-disagrees"),
    pytest.param(observed(), "block-hashing:a Request without block hasher fails in cache_full_blocks with",
                 Status.OK, ["'AssertionError'"], id="hashing-agrees"),
    pytest.param(observed(engine=with_(ENGINE, "hashing.failure", "IndexError")),
                 "block-hashing:a Request without block hasher fails in cache_full_blocks with", Status.ERROR,
                 ["static 'AssertionError', runtime 'IndexError'"], id="hashing-disagrees"),
    pytest.param(observed(), "model:LlamaForCausalLM decoder layer class", Status.OK,
                 [f"'{LLAMA}.LlamaDecoderLayer'"], id="model-agrees"),
    pytest.param(observed(engine=with_(ENGINE, "model.path", ["model", "language_model"])),
                 "model:LlamaForCausalLM path to the decoder stack", Status.ERROR,
                 ["static ['model'], runtime ['model', 'language_model']"], id="model-disagrees"),
    pytest.param(observed(), STREAM, Status.OK, ["= [0, 1]"], id="stream-agrees"),
    pytest.param(observed(engine=with_(ENGINE, "model.stream", [0])), STREAM, Status.ERROR,
                 ["static [0, 1], runtime [0]"], id="stream-disagrees"),
    pytest.param(observed(engine=with_(ENGINE, "model.stream", None)), STREAM, Status.ERROR,
                 ["static [0, 1], runtime None"], id="stream-no-sum-seen"),
    pytest.param(observed(engine=with_(with_(ENGINE, "model.stream", None), "model.stream_note",
                                       "not observed: OSError: no config")),
                 "model:LlamaForCausalLM residual stream outputs", Status.UNKNOWN,
                 ["could not confirm", "not observed: OSError"], id="stream-not-observed"),
    pytest.param(observed(), "startup:start-up steps the engine took that the static reading does not list",
                 Status.OK, ["= []"], id="startup-agrees"),
    pytest.param(observed(engine=with_(ENGINE, "startup_calls", ["initialize_from_config", "shutdown"])),
                 "startup:start-up steps the engine took that the static reading does not list", Status.ERROR,
                 ["runtime ['initialize_from_config']"], id="startup-disagrees"),
]


@pytest.fixture
def children(monkeypatch):
    """Replace compat's runner of the confirmation's child processes; what it was asked is recorded."""
    asked = []

    def install(raw: dict):
        def observe(timeout, tensor_parallel=(1, 2), architectures=("LlamaForCausalLM",)):
            asked.append((timeout, tuple(tensor_parallel), tuple(architectures)))
            return raw
        monkeypatch.setattr(confirm, "observe", observe)
        return asked
    return install


@pytest.mark.parametrize(("raw", "symbol", "status", "says"), CASES)
def test_the_engine_s_observations_against_the_static_verdicts(trees, children, raw, symbol, status, says):
    asked = children(raw)
    findings = trees.findings(PROBE, "import vllm\n", STATIC, confirm=True, architectures=("LlamaForCausalLM",),
                              confirm_timeout=7.0)
    assert asked == [(7.0, (1, 2), ("LlamaForCausalLM",))]
    judged = [f for f in findings if f.symbol == symbol]
    assert [f.status for f in judged] == [status], [(f.symbol, f.status, f.message) for f in findings]
    for word in says:
        assert word in judged[0].message, judged[0].message
    assert all("engines" in dict(f.evidence.extra) for f in findings)


def test_a_failed_engine_check_confirms_none_of_its_concerns(trees, children):
    children(observed(engine={"error": "ValueError: bad config"}))
    findings = trees.findings(PROBE, "import vllm\n", STATIC, confirm=True, architectures=("LlamaForCausalLM",))
    assert not [f for f in findings if f.symbol.split(":")[0] in ("protocol", "block-hashing", "startup", "model")]


def test_without_confirm_nothing_is_run(trees, children):
    asked = children(observed())
    assert trees.findings(PROBE, "import vllm\n", STATIC) == [] and asked == []
