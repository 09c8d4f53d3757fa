"""What the consumer scan produces: each place the consumer touches vLLM, and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from compat.consumer.guards import GuardExpr
from compat.consumer.state import MethodState
from compat.location import Location
from compat.signature import CallShape, Signature


class Kind(StrEnum):
    IMPORT = "import"
    CALL = "call"
    ATTRIBUTE = "attribute"
    RPC = "rpc"
    PATCH = "patch"


class RefKind(StrEnum):
    """How the consumer obtained an object whose vLLM class the probes must work out (``Ref.kind``)."""

    SYMBOL = "symbol"
    """The vLLM object itself (a class, a module), named by ``Ref.symbol``."""
    CALL = "call"
    """The result of calling ``Ref.base``."""
    ATTRIBUTE = "attribute"
    """Attribute ``Ref.name`` of ``Ref.base``."""
    SELF = "self"
    """``self`` in a consumer class that extends or patches the vLLM class ``Ref.symbol`` (an instance)."""
    WORKER = "worker"
    """vLLM's worker."""


class PatchKind(StrEnum):
    """How consumer code takes the place of vLLM's (``ClassPatch.kind``, ``Replacement.how``)."""

    PATCH = "patch"
    """A patch class's body copied onto the target."""
    SUBCLASS = "subclass"
    """A consumer subclass of the target, overriding it."""
    REPLACE = "replace"
    """The consumer assigns its own function or class over the target's attribute."""


class ReplyUseKind(StrEnum):
    """What the consumer does with what a worker RPC returns (``ReplyUse.kind``)."""

    INDEX = "index"
    """Indexes it (``reply[0]``)."""
    UNPACK = "unpack"
    """Unpacks it (``a, b = reply``)."""
    ITERATE = "iterate"
    """Iterates over it (``for x in reply``)."""
    LEN = "len"
    """Takes its length (``len(reply)``)."""


class Finishes(StrEnum):
    """Which requests a hand-written step loop finishes (``StepLoop.finishes``)."""

    SCHEDULED = "scheduled"
    """Every request the step scheduled."""
    OTHER = "other"
    """Some other set of requests."""
    NONE = ""
    """None."""


class PinKind(StrEnum):
    """What a consumer's requirement on vLLM says of the build it was written for (``Pin.kind``)."""

    EXACT = "exact"
    """``==X``: X."""
    UPPER = "upper"
    """``<=X``: X."""
    RANGE = "range"
    """An upper bound: the newest release it admits, read from the package index."""
    OPEN = "open"
    """No upper bound: no build."""


@dataclass(frozen=True)
class Ref:
    """How the consumer obtained an object whose vLLM class the probes must work out (``RefKind`` says each way)."""

    kind: RefKind
    symbol: str | None = None
    base: Ref | None = None
    name: str | None = None
    typing: bool = False
    """``symbol`` comes from an import under ``if TYPE_CHECKING:``: stale there, it breaks nothing at run time."""

    @staticmethod
    def of_symbol(path: str) -> Ref:
        return Ref(RefKind.SYMBOL, symbol=path)

    def called(self) -> Ref:
        return Ref(RefKind.CALL, base=self)

    def attr(self, name: str) -> Ref:
        return Ref(RefKind.ATTRIBUTE, base=self, name=name)

    def render(self) -> str:
        if self.kind == RefKind.WORKER:
            return "<vLLM worker>"
        if self.kind == RefKind.SELF:
            return self.symbol or "?"
        if self.kind == RefKind.SYMBOL:
            return self.symbol or "?"
        if self.kind == RefKind.CALL:
            return f"{self.base.render() if self.base else '?'}(...)"
        return f"{self.base.render() if self.base else '?'}.{self.name}"


@dataclass(frozen=True)
class Guard:
    """A condition the touchpoint's code runs under, and which branch it sits in."""

    expr: GuardExpr
    branch: bool
    text: str
    location: Location


@dataclass(frozen=True)
class Fallback:
    """An import inside ``try`` whose ``except ImportError`` handler provides a fallback."""

    location: Location
    handler_imports: tuple[str, ...] = ()
    text: str = ""


@dataclass(frozen=True)
class ReplyUse:
    """How the consumer uses what a worker RPC returns: ``[0]``, unpacking, iterating, ``len``."""

    kind: ReplyUseKind
    detail: str
    location: Location
    code: str = ""


@dataclass(frozen=True)
class Replacement:
    """The consumer's own code for a vLLM name (a ``PATCH`` touchpoint): a method of a patch class copied onto
    the target, an override in a subclass, or a function or class assigned over vLLM's (``how``). vLLM's own
    callers then call the consumer's code with vLLM's arguments."""

    patcher: str
    """The consumer's def (qualname)."""
    how: PatchKind
    signature: Signature | None = None
    """The def's parameters as written (``self`` included for a method); None for a class or a value."""


@dataclass(frozen=True)
class Alias:
    """A call made through a local name bound to an attribute of a vLLM object (``step =
    self.executor.execute_model``, then ``step(out)``): the call's touchpoint is the attribute's, and a fixer that
    rewrites the call must name the receiver where the name is called."""

    name: str
    """The local name called (``step``)."""
    receiver: str = ""
    """The receiver's source (``self.executor``) when evaluating it again at the call gives the object the name was
    bound from (the function binds neither the name nor the receiver's root name again, and assigns no attribute
    along the receiver); "" when it may not, and ``why`` says why."""
    why: str = ""


@dataclass(frozen=True)
class TouchPoint:
    kind: Kind
    symbol: str
    """Dotted vLLM path as the consumer names it; for attributes, the receiver rendered + name."""
    location: Location
    code: str = ""
    call: CallShape | None = None
    receiver: Ref | None = None
    attribute: str | None = None
    store: bool = False
    rpc_method: str | None = None
    guards: tuple[Guard, ...] = ()
    fallback: Fallback | None = None
    context: str = ""
    note: str | None = None
    """Why the scan could not resolve this touchpoint fully (kept, reported as unknown)."""
    reply_uses: tuple[ReplyUse, ...] = ()
    """For RPC touchpoints: what the consumer does with the reply."""
    literals: tuple[tuple[str, str], ...] = ()
    """Keyword arguments passed as literals (``enable_prefix_caching=False``, or in a ``**mapping`` whose keys the
    scan sees), as source text."""
    replacement: Replacement | None = None
    """For PATCH touchpoints: the consumer's code that takes the place of ``symbol``."""
    caller_guards: tuple[Guard, ...] = ()
    """Guards every call of the consumer's private helper that holds this touchpoint runs under (``if
    find_spec("vllm.profiler.wrapper") is None: return ...`` before ``self._setup_profiler_wrapper()``): the
    helper's code runs under them too, unless vLLM's class the helper's class extends defines that name (vLLM may
    call it itself); ``caller`` is the helper."""
    caller: str = ""
    narrowed: str = ""
    """The check the consumer makes before this use, so that a missing attribute is handled: ``hasattr(x, "a")``
    around ``x.a``, or a ``try`` whose handler catches AttributeError (source text and location)."""
    alias: Alias | None = None
    """For ATTRIBUTE touchpoints of a call made through a local name bound to the attribute: that name."""
    via_super: bool = False
    """A call ``super().m(...)``: it reaches vLLM's ``m``, never the consumer class's own."""


@dataclass(frozen=True)
class ScanProblem:
    location: Location
    message: str
    traceback: str = ""
    """Where the scan itself failed (a bug of the scan, not of the file); empty for a file that cannot be read."""


@dataclass(frozen=True)
class ConsumerClass:
    qualname: str
    location: Location
    methods: tuple[str, ...]
    bases: tuple[str, ...] = ()
    extends: tuple[str, ...] = ()
    """Methods that call the base's own (``super().m(...)`` in ``m``): they add to vLLM's code, which still runs."""
    state: tuple[MethodState, ...] = ()
    """What each method writes and reads of the object's own attributes."""
    signatures: tuple[tuple[str, Signature], ...] = ()
    """Each method's parameters as declared (``self`` included)."""

    def signature(self, method: str) -> Signature | None:
        return next((sig for name, sig in self.signatures if name == method), None)


@dataclass(frozen=True)
class ImportGate:
    """A ``raise`` that runs when a consumer module is imported, under a test of the build (the consumer's own
    check of vLLM's version: ``if Version(vllm.__version__) not in SUPPORTED: raise ...``, or a helper called at
    the module's top level that raises for a version it does not list): where it raises, the module cannot be
    imported, and a vLLM plugin that imports it stops every vLLM start."""

    location: Location
    """Where the module's own code leads to the raise (the ``raise``, or the call of the helper that raises)."""
    module: str
    raises: str
    """The ``raise`` statement, as source text."""
    condition: GuardExpr
    """When it raises, for the build (joined with the tests the statement itself runs under)."""
    text: str
    """The condition as the consumer writes it."""
    via: str = ""
    """The consumer helper that raises, when the raise is in a helper called at the top level."""


@dataclass(frozen=True)
class HeldStore:
    """``<x>.<holder>.<name> = ...`` where the walk does not know what ``x`` is."""

    holder: str
    name: str
    location: Location


@dataclass(frozen=True)
class ClassPatch:
    """A consumer class whose body is copied onto a vLLM class or module (``class P(ArcticPatch[VllmConfig])``):
    what it defines becomes part of the target for the consumer's other code."""

    target: str
    """The vLLM class or module, as the consumer names it."""
    patcher: str
    """The consumer class (qualname)."""
    names: tuple[str, ...]
    """What it defines: methods, class attributes."""
    location: Location
    kind: PatchKind = PatchKind.PATCH
    """How it takes the target's place: a subclass's instances the consumer may hold where the target's type is
    declared; a replacement (``vllm.mod.f = my_f``, ``Cls.__init__ = my_init``) runs the consumer's code there."""
    other_bases: tuple[str, ...] = ()
    """For a subclass: the vLLM classes it also extends after ``target`` (``class R(Runner, LoRAMixin)``)."""
    wraps: bool = False
    """For a replacement: it is made from vLLM's own (``Cls.m = wrap(Cls.m)``), which it may still run."""


@dataclass(frozen=True)
class SelfUse:
    name: str
    location: Location
    call: CallShape | None = None


@dataclass(frozen=True)
class Captured:
    """A value a replacement forward keeps of each layer (``captured.append(hidden_states + residual)``)."""

    expression: str
    outputs: tuple[str, ...]
    """The names the layer call's result is unpacked into (``hidden_states, residual = layer(...)``)."""
    summed: tuple[int, ...] | None
    """Which of those outputs the value adds up; None when it is not such a sum."""
    location: Location


@dataclass(frozen=True)
class ModelPatch:
    """A consumer function installed as a vLLM model's ``forward`` (``types.MethodType(f, model.model)``)."""

    function: str
    location: Location
    """Where the forward is replaced."""
    target: Ref | None
    """The object whose forward is replaced, as the consumer reached it."""
    definition: Location
    parameters: tuple[str, ...]
    accepts_var_kwargs: bool
    defaults: int = 0
    """How many of ``parameters`` (the last ones) have defaults."""
    self_uses: tuple[SelfUse, ...] = ()
    """Attributes the replacement reads or calls on the model (``self.layers``, ``self.get_input_embeddings(...)``)."""
    layer_calls: tuple[SelfUse, ...] = ()
    """Calls of the decoder layers the replacement iterates over."""
    code: str = ""
    captures: tuple[Captured, ...] = ()
    """What it keeps of each layer, inside its loop over the layers."""
    accepts_var_args: bool = False
    """``*args``: it takes any number of positional arguments."""


@dataclass(frozen=True)
class StepLoop:
    """A consumer loop that runs vLLM's scheduler by hand: ``while (out := <scheduler>.schedule())...:`` with the
    step executed and requests finished in its body (``compat.consumer.steps``)."""

    function: str
    """The function holding the loop (``module.name``)."""
    location: Location
    end_line: int
    scheduler: str
    """The scheduler as the loop names it (``self.scheduler``)."""
    schedule: Location
    """The ``schedule()`` call in the loop's test."""
    output: str
    """The name the step's output is bound to ('' when it is not bound)."""
    executor: str
    """The receiver of the ``execute_model`` call in the body ('' when there is none)."""
    execute: Location | None
    finishes: Finishes
    finish: Location | None
    finish_status: str
    """The status the loop finishes requests with, as written (``RequestStatus.FINISHED_ABORTED``)."""
    updates: bool
    """The loop hands each step's output back to the scheduler (``update_from_output``), as the engine core does."""
    stops_when_idle: bool
    """The loop ends at the first step that schedules no token (requests may still wait for KV blocks)."""
    others: tuple[str, ...] = ()
    """Body statements that are neither the step, its finishing, a counter nor a log call (first line of each)."""


@dataclass(frozen=True)
class Pin:
    """The requirement a consumer names its target with (``vllm>=0.11,<0.13``), where it was read, and the build it
    says the consumer was written for (``compat.consumer.pins``)."""

    requirement: str
    """As written, with its marker."""
    at: str
    """Where it was read: ``pyproject.toml:9 [project] dependencies``, ``requirements.txt:3``, a METADATA file."""
    kind: PinKind
    build: str | None = None
    note: str | None = None
    """Why there is no build (an open pin, a range the index could not resolve), or how a range was resolved."""

    def describe(self) -> str:
        text = f"{self.requirement} ({self.at})"
        if self.build and self.kind == PinKind.RANGE:
            return f"{text}: written for {self.build}, the newest release the range admits"
        if self.build:
            return f"{text}: written for {self.build}"
        return f"{text}: {self.note}" if self.note else text


@dataclass(frozen=True)
class Scan:
    name: str
    version: str | None
    origin: str
    target: str
    touchpoints: tuple[TouchPoint, ...]
    problems: tuple[ScanProblem, ...] = ()
    classes: tuple[ConsumerClass, ...] = ()
    worker_extensions: tuple[tuple[str, Location], ...] = ()
    written_for: str | None = None
    """The target version the consumer pins in its metadata (``vllm==0.11.0``), when it does."""
    files: int = field(default=0)
    root: str = ""
    """Directory the consumer locations are relative to."""
    model_patches: tuple[ModelPatch, ...] = ()
    step_loops: tuple[StepLoop, ...] = ()
    class_patches: tuple[ClassPatch, ...] = ()
    left_out: tuple[str, ...] = ()
    """Files of the tree not audited: its tests, examples and docs (``compat.consumer.scan.NOT_SHIPPED``)."""
    pin: Pin | None = None
    """The requirement ``written_for`` comes from (or the open one that gives none)."""
    name_at: str | None = None
    """Where ``name`` was read (``pyproject.toml:2 [project] name``); None: named after its path or archive."""
    settings: tuple[tuple[str, str, str], ...] = ()
    """What the consumer's configs are given by code its calls do not show, as (config class name, field,
    literal): the fix's re-audit sets the shim's pinned defaults here, for the build it audits."""
    gates: tuple[ImportGate, ...] = ()
    """The consumer's own checks of the build that raise at import (``ImportGate``)."""
    held_stores: tuple[HeldStore, ...] = ()
    """Attributes the consumer stores on an object it does not type, reached through an attribute named
    ``holder`` (``vllm_config.scheduler_config._x = ...`` with ``vllm_config: Any``): where ``holder`` is a name vLLM
    holds one of its classes under, the consumer sets ``_x`` on that class's objects itself."""
