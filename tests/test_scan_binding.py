"""Calls whose arguments the scan sees through a ``**mapping`` or a local name, audited against a tiny tree shaped
like vLLM's (no vLLM, no network): keys of a mapping the scan can follow bind like keywords written out, a mapping
it cannot follow stays opaque, and a call through a local name bound to a method is that method's call (judged by
the protocol probe, and routed by its fixer when the receiver can be named at the call)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from compat.fixers.protocol import FIXER as PROTOCOL_FIXER

from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer.result import Kind
from compat.fix.context import AuditedBuild, FixContext, Shim
from compat.fix.edits import RouteCall
from compat.vllm.builds import OpenedBuild
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo
from tests.conftest import run_cli
from tests.test_scan import by_kind, scan_source
from tests.trees import write_tree

VLLM = {
    "vllm/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/request.py": """
class Request:
    def __init__(self, request_id, prompt_token_ids):
        self.request_id = request_id
""",
    "vllm/sampling_params.py": """
class SamplingParams:
    def __init__(self, max_tokens=16, temperature=1.0):
        self.max_tokens = max_tokens
""",
    "vllm/config.py": """
class CacheConfig:
    def __init__(self, block_size=16, enable_prefix_caching=True):
        self.block_size = block_size
""",
    "vllm/v1/executor/__init__.py": "",
    "vllm/v1/executor/abstract.py": """
class Executor:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config

    def execute_model(self, scheduler_output):
        return None

    def sample_tokens(self, grammar_output):
        return None
""",
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/worker/gpu_model_runner.py": """
class GPUModelRunner:
    def execute_model(self, scheduler_output):
        if self.pending is not None:
            raise RuntimeError("State error: sample_tokens() must be called after execute_model() returns None.")
        return None
""",
    "vllm/v1/worker/gpu_worker.py": """
from vllm.v1.worker.gpu_model_runner import GPUModelRunner


class Worker:
    def __init__(self):
        self.model_runner = GPUModelRunner()
""",
}

IMPORTS = """\
from vllm.v1.request import Request
from vllm.sampling_params import SamplingParams
from vllm.config import CacheConfig
from vllm.v1.executor.abstract import Executor
"""


def vllm_tree(root: Path) -> Path:
    return write_tree(root, VLLM)


@pytest.fixture
def audit(tmp_path):
    """Scan ``source`` (after the imports above) and audit it against the tiny tree: (scan, findings, surface)."""
    surface = StaticSurface(vllm_tree(tmp_path / "tree"), BuildInfo("vllm", "0.0.1", "test tree", "static",
                                                                       str(tmp_path / "tree")))
    consumer = tmp_path / "consumer"
    consumer.mkdir()

    def run(source: str):
        scan = scan_source(consumer, IMPORTS + textwrap.dedent(source))
        result = Auditor(AuditOptions(confirm="never")).run(scan, OpenedBuild(surface), written_for=None)
        return scan, result.findings, surface

    return run


def lines_of(scan, text: str) -> list[int]:
    lines = (Path(scan.root) / "consumer.py").read_text().splitlines()
    return [number for number, line in enumerate(lines, 1) if text in line]


def call_of(scan, symbol: str, line: int):
    (tp,) = [tp for tp in by_kind(scan, Kind.CALL) if tp.symbol == symbol and tp.location.line == line]
    return tp


def failing(findings, check: str = "call") -> list[str]:
    return [f.message for f in findings if f.check == check and f.status.value == "broken"]


# ---- ** of a mapping written out in the call ---------------------------------------------------------------------

def test_a_dict_call_binds_like_its_keywords_written_out(audit):
    scan, findings, _ = audit("""
        Request(**dict(request_id="a", prompt_token_ids=[1], eos_token_id=2))
        Request(request_id="a", prompt_token_ids=[1], eos_token_id=2)
    """)
    spread, written = (call_of(scan, "vllm.v1.request.Request", lines_of(scan, text)[0])
                       for text in ("Request(**dict", "Request(request_id"))
    assert spread.call == written.call
    assert (spread.call.keywords, spread.call.star_kwargs) == (("request_id", "prompt_token_ids", "eos_token_id"),
                                                               False)
    assert failing(findings) == ["Request() no longer accepts keyword 'eos_token_id'"] * 2


def test_a_dict_display_binds_its_constant_keys(audit):
    _, findings, _ = audit("""
        SamplingParams(**{"max_tokens": 1, "bogus": 2})
    """)
    assert failing(findings) == ["SamplingParams() no longer accepts keyword 'bogus'"]


def test_every_mapping_known_claims_a_missing_parameter_and_an_opaque_one_does_not(audit):
    _, findings, _ = audit("""
        Request(**dict(request_id="a"))
        Request(**dict(request_id="a", eos_token_id=2), **more)
    """)
    assert failing(findings) == ["Request() requires 'prompt_token_ids', which the call does not pass",
                                 "Request() no longer accepts keyword 'eos_token_id'"]


def test_literal_values_in_a_mapping_are_recorded(audit):
    scan, _, _ = audit("""
        CacheConfig(**dict(enable_prefix_caching=False, block_size=size))

        def build():
            kwargs = {"block_size": 16}
            kwargs["enable_prefix_caching"] = False
            return CacheConfig(**kwargs)
    """)
    configs = [tp for tp in by_kind(scan, Kind.CALL) if tp.symbol == "vllm.config.CacheConfig"]
    assert [tp.literals for tp in configs] == [(("enable_prefix_caching", "False"),),
                                               (("block_size", "16"), ("enable_prefix_caching", "False"))]


# ---- ** of a local mapping built in the same function ------------------------------------------------------------

def test_a_local_mapping_is_followed_through_its_changes(audit):
    scan, findings, _ = audit("""
        def make(prompt):
            kwargs = {"request_id": "a"}
            kwargs["prompt_token_ids"] = prompt
            first = Request(**kwargs)
            kwargs.update(eos_token_id=2)
            kwargs.update({"arrival_time": 0.0})
            if prompt:
                return Request(**kwargs)
            return first

        def many(prompts):
            for prompt in prompts:
                kwargs = dict(request_id="a")
                kwargs["prompt_token_ids"] = prompt
                yield Request(**kwargs)
    """)
    first, later, looped = (call_of(scan, "vllm.v1.request.Request", n) for n in lines_of(scan, "Request(**"))
    assert first.call.keywords == ("request_id", "prompt_token_ids") and not first.call.star_kwargs
    assert later.call.keywords == ("request_id", "prompt_token_ids", "eos_token_id", "arrival_time")
    assert not later.call.star_kwargs
    assert looped.call.keywords == ("request_id", "prompt_token_ids") and not looped.call.star_kwargs
    assert failing(findings) == ["Request() no longer accepts keyword 'eos_token_id'; Request() no longer "
                                 "accepts keyword 'arrival_time'"]


OPAQUE = {
    "a parameter": """
        def make(kw):
            return Request(**kw)
    """,
    "dict() of another mapping": """
        def make(other):
            return Request(**dict(other, eos_token_id=2))
    """,
    "a ** entry in the display": """
        def make(other):
            return Request(**{"eos_token_id": 2, **other})
    """,
    "a computed key": """
        def make(key):
            return Request(**{key: 2, "eos_token_id": 2})
    """,
    "dict bound by the module": """
        from collections import OrderedDict as dict

        def make():
            return Request(**dict(eos_token_id=2))
    """,
    "reassigned from something opaque": """
        def make(other):
            kw = dict(eos_token_id=2)
            kw = other
            return Request(**kw)
    """,
    "passed to another function": """
        def make(fill):
            kw = dict(eos_token_id=2)
            fill(kw)
            return Request(**kw)
    """,
    "changed by pop": """
        def make():
            kw = dict(eos_token_id=2)
            kw.pop("eos_token_id")
            return Request(**kw)
    """,
    "deleted from": """
        def make():
            kw = dict(eos_token_id=2)
            del kw["eos_token_id"]
            return Request(**kw)
    """,
    "updated from an opaque mapping": """
        def make(other):
            kw = dict(eos_token_id=2)
            kw.update(other)
            return Request(**kw)
    """,
    "a computed subscript": """
        def make(key):
            kw = dict(eos_token_id=2)
            kw[key] = 1
            return Request(**kw)
    """,
    "changed in a branch": """
        def make(new):
            kw = dict(request_id="a", prompt_token_ids=[1])
            if new:
                kw["eos_token_id"] = 2
            return Request(**kw)
    """,
    "bound in two branches": """
        def make(new):
            if new:
                kw = dict(eos_token_id=2)
            else:
                kw = dict(request_id="a", prompt_token_ids=[1])
            return Request(**kw)
    """,
    "changed later in a loop": """
        def make(prompts):
            kw = dict(request_id="a", prompt_token_ids=[1])
            for _ in prompts:
                Request(**kw)
                kw.update(eos_token_id=2)
    """,
    "defined in a branch, used after it": """
        def make(new):
            if new:
                kw = dict(eos_token_id=2)
            return Request(**kw)
    """,
    "changed by a nested function": """
        def make():
            kw = dict(request_id="a", prompt_token_ids=[1])

            def later():
                kw["eos_token_id"] = 2
            later()
            return Request(**kw)
    """,
    "built in another function": """
        KW = dict(eos_token_id=2)

        def make():
            return Request(**KW)
    """,
}


@pytest.mark.parametrize("source", OPAQUE.values(), ids=OPAQUE.keys())
def test_a_mapping_the_scan_cannot_follow_stays_opaque(audit, source):
    scan, findings, _ = audit(source)
    (request,) = [tp for tp in by_kind(scan, Kind.CALL) if tp.symbol == "vllm.v1.request.Request"]
    assert request.call.star_kwargs and "eos_token_id" not in request.call.keywords
    assert failing(findings) == []


# ---- calls through a local name bound to a method ----------------------------------------------------------------

ALIASED = """
    class Gen:
        def __init__(self, config):
            self.executor = Executor(config)

        def direct(self, out):
            return self.executor.execute_model(out)

        def aliased(self, out):
            step = self.executor.execute_model
            return step(out)

    def local(config, out):
        executor = Executor(config)
        step = executor.execute_model
        return step(out)
"""


def _shape(tp):
    return tp.kind, tp.symbol, tp.call, tp.receiver, tp.attribute, tp.store, tp.guards, tp.narrowed


def test_a_call_through_a_local_alias_is_the_methods_call(audit):
    scan, findings, _ = audit(ALIASED)
    lines = [*lines_of(scan, "self.executor.execute_model(out)"), *lines_of(scan, "step = self"),
             *lines_of(scan, "step(out)")]
    direct, bound, through_self, through_local = ([tp for tp in scan.touchpoints if tp.location.line == line]
                                                  for line in lines)
    assert [_shape(tp) for tp in through_self] == [_shape(tp) for tp in direct]
    assert [tp.alias.receiver for tp in through_self] == ["self.executor"]
    assert [(tp.attribute, tp.call) for tp in bound] == [("execute_model", None)]
    assert [(tp.attribute, tp.call.positional, tp.alias.receiver) for tp in through_local] == [
        ("execute_model", 1, "executor")]
    broken = {f.consumer_location for f in findings if f.check == "protocol" and f.status.value == "broken"}
    assert broken == {f"consumer.py:{line}" for line in (lines[0], *lines[2:])}


def _plan(scan, findings, surface):
    ctx = FixContext(scan, (AuditedBuild("0.0.1", surface, tuple(findings)),), Shim("pkg._vllm_compat",
                                                                                   "pkg/_vllm_compat.py"))
    return PROTOCOL_FIXER.plan(ctx)


def test_the_protocol_fixer_routes_an_aliased_call_with_its_receiver(audit):
    scan, findings, surface = audit(ALIASED)
    plan = _plan(scan, findings, surface)
    assert plan.unhandled == []
    routes = sorted((e.line, e.callee, e.receiver, e.extra_args) for e in plan.edits if isinstance(e, RouteCall))
    assert [r[1:] for r in routes] == [("execute_model", True, ()), ("step", False, ("self.executor",)),
                                       ("step", False, ("executor",))]
    text = (Path(scan.root) / "consumer.py").read_text()
    module = cst.parse_module(text)
    for edit in plan.edits:
        module = edit.apply(module)
    assert module.code.count("return vllm_compat.execute_model(self.executor, out)") == 2
    assert "return vllm_compat.execute_model(executor, out)" in module.code
    assert "step = self.executor.execute_model" in module.code


UNSAFE = {
    "the receiver is assigned in the function": ("""
        class Gen:
            def __init__(self, config):
                self.executor = Executor(config)

            def run(self, out, config):
                step = self.executor.execute_model
                self.executor = Executor(config)
                return step(out)
    """, "self.executor is assigned in the function"),
    "the receiver's root is bound again": ("""
        def run(config, out):
            executor = Executor(config)
            step = executor.execute_model
            executor = Executor(config)
            return step(out)
    """, "executor is bound again"),
    "the receiver is a call": ("""
        def run(config, out):
            step = Executor(config).execute_model
            return step(out)
    """, "is not a name or an attribute of one"),
    "bound at module level": ("""
        STEP = Executor(None).execute_model

        def run(out):
            return STEP(out)
    """, "bound outside the function"),
    "bound through another attribute": ("""
        class Gen:
            def __init__(self, config):
                self.executor = Executor(config)
                self.execute_model = self.executor.execute_model

            def run(self, out):
                step = self.execute_model
                return step(out)
    """, "whose receiver the scan does not reach through self"),
}


@pytest.mark.parametrize(("source", "why"), UNSAFE.values(), ids=UNSAFE.keys())
def test_an_aliased_call_whose_receiver_cannot_be_named_again_is_unhandled(audit, source, why):
    scan, findings, surface = audit(source)
    call = [f for f in findings if f.check == "protocol" and f.status.value == "broken"]
    calls_line = {f.consumer_location for f in call}
    assert len(calls_line) == 1 and "(out)" in call[0].code
    plan = _plan(scan, findings, surface)
    assert plan.edits == [] and plan.claims == []
    assert [u.finding.consumer_location for u in plan.unhandled] == list(calls_line)
    assert why in plan.unhandled[0].reason and "called through the local name" in plan.unhandled[0].reason


# ---- the command line on a vLLM-shaped directory -----------------------------------------------------------------

def test_the_command_line_reports_a_key_of_a_dict_call(tmp_path):
    consumer = tmp_path / "c.py"
    consumer.write_text(IMPORTS + "Request(**dict(request_id='r', prompt_token_ids=[1], eos_token_id=2))\n")
    done = run_cli("--consumer", str(consumer), "--vllm", str(vllm_tree(tmp_path / "tree")), "--format", "json",
                   "--no-reports", "--confirm", "never", env={"COMPAT_CACHE_DIR": str(tmp_path / "cache")})
    findings = json.loads(done.stdout)["findings"]
    assert [(f["status"], f["message"]) for f in findings if f["probe"] == "call"] == [
        ("broken", "Request() no longer accepts keyword 'eos_token_id'")]
