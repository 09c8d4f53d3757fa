"""What a real engine of the installed build does, observed on tiny models in child processes
(``compat.confirm``): the runtime counterpart of the static facts, which ``probes/confirm.py`` compares."""

from __future__ import annotations

from dataclasses import dataclass, fields

from compat import confirm
from compat.facts import Fact
from compat.facts.codec import decode
from compat.vllm.static import StaticSurface

ENGINE_ARCH = "LlamaForCausalLM"
"""The architecture of the tiny model the engine check runs (its model conventions come with it)."""


@dataclass(frozen=True)
class Run:
    """How one check in a child process ended: the dtype it ran in (after ``attempts``), or why it observed
    nothing: ``error`` (it raised; ``traceback``), ``unconfirmed`` (it died by ``signal`` or ran past its
    timeout) or ``unsupported`` (the engine refused to run the model here, with vLLM's reason), with the
    last step it reached and the tail of its log."""

    check: str
    vllm: str | None = None
    dtype: str | None = None
    attempts: tuple[str, ...] = ()
    error: str | None = None
    unconfirmed: str | None = None
    unsupported: str | None = None
    last_step: str | None = None
    signal: str | None = None
    log: str | None = None
    traceback: str | None = None

    @property
    def failed(self) -> bool:
        return bool(self.error or self.unconfirmed or self.unsupported)


@dataclass(frozen=True)
class MultiprocReplies:
    without_rank: str
    with_rank: str
    workers: int | None = None


@dataclass(frozen=True)
class UniprocReplies:
    without_rank: str
    accepts_rank: bool


@dataclass(frozen=True)
class RepliesSeen:
    """``collective_rpc`` reply shapes (``single`` or ``list``) on a multiprocess executor, and on the
    single-process one at tensor parallel 1."""

    multiproc: MultiprocReplies
    uniproc: UniprocReplies | None = None
    executor_start_s: float | None = None
    multiproc_class: str | None = None
    uniproc_class: str | None = None
    """The executor classes the build picks for the ``mp`` and ``uni`` backends (``Executor.get_class``)."""


@dataclass(frozen=True)
class ModelSeen:
    """The loaded model as the worker sees it."""

    cls: str
    eagle3: bool
    base: str
    layer: str
    path: tuple[str, ...] | None = None
    embedding: tuple[str, ...] = ()
    layer_parameters: tuple[str, ...] = ()
    stream: tuple[int, ...] | None = None
    """Which of a decoder layer's outputs, summed, equal HF's residual stream after it (``()``: the one tensor it
    returns), as every layer of one prompt showed; None where no single sum does (``stream_note`` says why)."""
    stream_error: float | None = None
    stream_note: str | None = None


@dataclass(frozen=True)
class ProtocolSeen:
    execute_model_returned_none: bool
    second_call: str | None = None
    """What a second ``execute_model`` without ``sample_tokens`` raised."""


@dataclass(frozen=True)
class HashingSeen:
    """What scheduling a Request without a block hasher whose prompt fills two blocks did."""

    failure: str
    prefix_caching: bool
    message: str | None = None
    where: str | None = None


@dataclass(frozen=True)
class EngineSeen:
    startup_calls: tuple[str, ...]
    model: ModelSeen
    prefix_caching: bool
    protocol: ProtocolSeen
    hashing: HashingSeen


@dataclass(frozen=True)
class Check:
    """One check: how it ran, and what it saw (None when it failed). Exactly one of the ``seen`` fields is
    set for a check that ran."""

    run: Run
    replies: RepliesSeen | None = None
    engine: EngineSeen | None = None
    model: ModelSeen | None = None


@dataclass(frozen=True)
class Observations:
    replies: tuple[tuple[int, Check], ...]
    """By tensor parallel size."""
    engine: Check
    """The in-process engine (tiny Llama): start-up, protocol, hashing, model conventions."""
    models: tuple[tuple[str, Check], ...]
    """By architecture (``model`` set), the engine's Llama first."""

    def engine_dtypes(self) -> str:
        """Which dtype each check ran in, and the attempts that came before."""
        checks = [(f"replies_tp{tp}", c) for tp, c in self.replies] + [("engine", self.engine)] + [
            (f"model {arch}", c) for arch, c in self.models if arch != ENGINE_ARCH]
        return "; ".join(f"{name}: " + (c.run.dtype or "?" if len(c.run.attempts) < 2 else " then ".join(
            c.run.attempts)) for name, c in checks)


def parse_check(raw: dict, seen: str) -> Check:
    """A child's result (``compat.confirm.run_child``) of a ``replies``, ``engine`` or ``model`` check."""
    run = decode(Run, {"check": seen} | {f.name: raw[f.name] for f in fields(Run) if f.name in raw})
    if run.failed:
        return Check(run)
    kind = {"replies": RepliesSeen, "engine": EngineSeen, "model": ModelSeen}[seen]
    body = raw["model"] if seen == "model" else raw
    return Check(run, **{seen: decode(kind, body)})


def read(surface: StaticSurface, timeout: float, architectures: tuple[str, ...],
         tensor_parallel: tuple[int, ...] = (1, 2)) -> Observations:
    """Run the checks on the installed build (whose code ``surface`` reads)."""
    raw = confirm.observe(timeout, tensor_parallel, architectures)
    engine = parse_check(raw["engine"], "engine")
    llama = Check(engine.run, model=engine.engine.model) if engine.engine is not None else engine
    models = [(ENGINE_ARCH, llama)] + [(arch, parse_check(r, "model")) for arch, r in raw["models"].items()
                                       if arch != ENGINE_ARCH]
    return Observations(tuple((tp, parse_check(raw[f"replies_tp{tp}"], "replies")) for tp in tensor_parallel), engine,
                        tuple(models))


FACT = Fact("observed", read, kept=False)
