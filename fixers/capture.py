"""Replacement forwards that capture hidden states: the build's model conventions (embedding method, how its
forward calls the decoder layers and with which extra arguments, the wrappers around the decoder stack, the
EAGLE-3 marker) keep changing under a forward the consumer wrote for one build.

The fix removes the cause: the shim leaves the build's own forward in place and observes the decoder layers
with forward hooks, so the layers are called with the build's own convention and arguments, the embedding is
the build's own, and the stack is found through the wrappers the audited builds use. When the hooks capture
and where the states go are the consumer's own expressions, read from its replacement forward; what they capture
is the residual stream after each layer, as that layer's own code returns it (``compat.facts.streams``: ``h +
residual`` where the residual is not yet added, ``output`` where it is), which is what the consumer's
``hidden_states + residual`` meant on the layers it was written for. A layer whose reading is not the running
code's, or under a condition that may hold there, is refused (``CaptureRefused``), and the consumer's own
``supports_eagle3`` refusal stays for every model the shim does not prove.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import compat.probes.models as models_probe

from compat.consumer.patches import summed_outputs
from compat.consumer.result import Kind, ModelPatch
from compat.errors import CompatError
from compat.facts import streams
from compat.fix.context import FixContext
from compat.fix.edits import ReplaceStatements
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from compat.fix.source import function_of, segment, statement_at
from compat.syntax import FunctionNode

CODE = """
def decoder_stack(model):
    \"\"\"The module holding the decoder layers, through the wrappers the audited builds put around it.\"\"\"
    for path in _STACK_PATHS:
        obj = model
        for name in path:
            obj = getattr(obj, name, None)
        if obj is not None and hasattr(obj, "layers"):
            return obj
    raise ValueError(f"{type(model).__name__} has no decoder stack at "
                     + " or ".join("model." + ".".join(p) for p in _STACK_PATHS))


class CaptureRefused(RuntimeError):
    \"\"\"The hooks will not capture this model: what a decoder layer returns was not read from this build's code, or
    a condition under which that reading does not hold may hold here.\"\"\"


_RECORDS = []
\"\"\"In a worker: for each forward pass the hooks captured, the positions, token ids and batch order it ran on.\"\"\"
_HOOKED = []
\"\"\"In a worker: the decoder layers the hooks capture, fixed when they are installed.\"\"\"
_FINGERPRINTS = {}


def _capture_records(worker=None):
    \"\"\"Run in a worker (``collective_rpc``): the layers the hooks capture and what ``_RECORDS`` holds, on the CPU
    (the hooks keep device copies, so that a forward pass never waits for the device).\"\"\"
    return {"layers": list(_HOOKED),
            "records": [tuple(x.to("cpu") if hasattr(x, "to") else x for x in record) for record in _RECORDS]}


def _clear_capture_records(worker=None):
    \"\"\"Run in a worker (``collective_rpc``): forget every forward pass recorded so far.\"\"\"
    _RECORDS.clear()


def _reset_capture_records(executor):
    executor.collective_rpc(_clear_capture_records)


def _positions_of(layer):
    \"\"\"A function reading the ``positions`` argument of a call of ``layer`` (None where it takes none): decoder
    layers take them by name or position, and the stack's own forward is not hooked (compiled models replace
    its ``__call__``).\"\"\"
    try:
        signature = inspect.signature(layer.forward)
    except (TypeError, ValueError):
        return lambda args, kwargs: None
    if "positions" not in signature.parameters:
        return lambda args, kwargs: None

    def read(args, kwargs):
        try:
            return signature.bind_partial(*args, **kwargs).arguments.get("positions")
        except TypeError:
            return kwargs.get("positions")

    return read


def _defs(body):
    \"\"\"The defs and classes of a module or class body, those under ``if``/``try`` blocks included.\"\"\"
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            yield from _defs([*node.body, *getattr(node, "orelse", ()), *getattr(node, "handlers", ()),
                              *getattr(node, "finalbody", ())])


def _fingerprint(module, qualname):
    \"\"\"The running build's def ``module.qualname``, its lines stripped, hashed as the audit hashed the code it read
    (None where the running build has no such def).\"\"\"
    key = (module, qualname)
    if key not in _FINGERPRINTS:
        found = None
        try:
            spec = importlib.util.find_spec(module)
            with open(spec.origin, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            body, node = ast.parse(text).body, None
            for part in qualname.split("."):
                node = next((n for n in _defs(body) if n.name == part), None)
                if node is None:
                    break
                body = node.body
            if node is not None:
                lines = text.splitlines()
                first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
                kept = "\\n".join(line.strip() for line in lines[first - 1:node.end_lineno] if line.strip())
                found = hashlib.sha1(kept.encode()).hexdigest()[:16]
        except (ImportError, AttributeError, OSError, SyntaxError, ValueError):
            found = None
        _FINGERPRINTS[key] = found
    return _FINGERPRINTS[key]


def _holds(formula, layer, dtype):
    \"\"\"Whether a condition the audit could not decide holds for this layer: True, False, or None (unknown).\"\"\"
    kind = formula[0]
    if kind in ("true", "false"):
        return kind == "true"
    if kind == "not":
        inner = _holds(formula[1], layer, dtype)
        return None if inner is None else not inner
    if kind in ("and", "or"):
        left, right = _holds(formula[1], layer, dtype), _holds(formula[2], layer, dtype)
        if kind == "and":
            return False if False in (left, right) else None if None in (left, right) else True
        return True if True in (left, right) else None if None in (left, right) else False
    _, atom, text, module = formula
    if atom == "dtype":
        return None if dtype is None else dtype == text
    if atom == "self":
        namespace = vars(sys.modules[module]) if module in sys.modules else {}
        try:
            return bool(eval(text, dict(namespace), {"self": layer}))  # noqa: S307 - vLLM's own expression
        except Exception:  # noqa: BLE001 - it cannot be evaluated here: unknown
            return None
    return None


def _model_dtype(model, runner=None):
    dtype = getattr(getattr(runner, "model_config", None), "dtype", None)
    if dtype is None:
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    return str(dtype).replace("torch.", "") if dtype is not None else None


def stream_outputs(layer, index, dtype):
    \"\"\"Which outputs of this decoder layer, summed, are the residual stream after it, as the audit read the
    layer's code (``_STREAMS``); raises, naming the layer's class, where that code was not read, could not be read
    or is not the running build's, or where a condition under which it does not hold may hold here.\"\"\"
    cls = type(layer)
    name = f"{cls.__module__}.{cls.__qualname__}"
    entries = _STREAMS.get(name)
    if not entries:
        raise CaptureRefused(f"{__name__}: decoder layer {index} is a {name}, whose code compat.fix did not read "
                           f"for {', '.join(AUDITED)}: what it returns is not known, so nothing is captured")
    for outputs, reason, read, unless, unless_text in entries:
        if not all(_fingerprint(*_CODES[i][:2]) == _CODES[i][2] for i in read):
            continue
        if outputs is None:
            raise CaptureRefused(f"{__name__}: cannot capture decoder layer {index} ({name}): {reason}")
        for assumed, text in zip(unless, unless_text):
            held = [_holds(f, layer, dtype) if truth else _negate(_holds(f, layer, dtype))
                    for f, truth in json.loads(assumed)]
            if False not in held:
                raise CaptureRefused(f"{__name__}: cannot capture decoder layer {index} ({name}) here: where "
                                   f"{text}; that {'holds' if all(held) else 'may hold'} for this layer "
                                   f"(dtype {dtype})")
        return tuple(outputs)
    where = ", ".join(f"{_CODES[i][0]}.{_CODES[i][1]}" for i in entries[0][2])
    raise CaptureRefused(f"{__name__}: decoder layer {index} ({name}): the running vLLM's code of {where} is not "
                       f"the code compat.fix read for {', '.join(AUDITED)}; run `python -m compat.fix` "
                       "against this vLLM")


def _negate(value):
    return None if value is None else not value


def _stream(output, outputs, index):
    \"\"\"The residual stream after a layer from its outputs: the one tensor, one output, or the sum of several.\"\"\"
    if not outputs:
        if isinstance(output, tuple):
            raise CaptureRefused(f"{__name__}: decoder layer {index} returned {len(output)} outputs where the "
                                 "audit read one")
        return output.clone()
    if len(outputs) == 1:
        return output[outputs[0]].clone()
    total = output[outputs[0]] + output[outputs[1]]
    for i in outputs[2:]:
        total = total + output[i]
    return total


def capture_proven(model):
    \"\"\"Whether the hooks can capture this model's residual stream: its decoder stack is found and every decoder
    layer's convention was read from the running build's own code (and holds for it).\"\"\"
    try:
        stack = decoder_stack(model)
        dtype = _model_dtype(model)
        for index, layer in enumerate(stack.layers):
            if type(layer).__name__ != "PPMissingLayer":
                stream_outputs(layer, index, dtype)
    except (CaptureRefused, ValueError):
        return False
    return True


def capture_layers(model, layer_ids, store, when, runner=None):
    \"\"\"Capture the residual stream after decoder layers ``layer_ids`` (the state Hugging Face's
    ``output_hidden_states`` gives for each, before the final norm), with forward hooks: the build's own forward
    runs (its embedding, its layer calls and their extra arguments), and each layer's stream is read from its
    outputs as the audit read its code (``stream_outputs``; every layer up to the last captured one is checked, as
    each hands the stream to the next). For each forward pass on which ``when()`` holds, ``store`` gets one list,
    in ascending layer order (each layer once), of the captured layers' states (layers of other pipeline stages
    are not here). The positions, token ids and batch order (``runner.input_batch.req_ids`` where the model
    runner has one) of each such pass are recorded for ``by_request``. Each pass starts from an empty buffer, so a
    pass that failed half-way leaves nothing behind. Returns the hook handles.\"\"\"
    stack = decoder_stack(model)
    local = [i for i in sorted(set(layer_ids))
             if i < len(stack.layers) and type(stack.layers[i]).__name__ != "PPMissingLayer"]
    _HOOKED[:] = sorted(set(layer_ids))
    if not local:
        return []
    dtype = _model_dtype(model, runner)
    outputs = {}
    for index in range(local[-1] + 1):
        layer = stack.layers[index]
        if type(layer).__name__ != "PPMissingLayer":
            outputs[index] = stream_outputs(layer, index, dtype)
    captured = []
    seen = {}
    first = stack.layers[local[0]]
    positions_of = _positions_of(first)

    def begin(module, args, kwargs):
        captured.clear()
        positions = positions_of(args, kwargs)
        if positions is not None and positions.dim() > 1:
            positions = positions[0]  # M-RoPE: every row holds the text position
        batch = getattr(getattr(runner, "input_batch", None), "req_ids", None)
        seen["positions"] = positions
        seen["order"] = [r for r in batch if r is not None] if batch is not None else None

    def embedded(module, args):
        seen["input_ids"] = args[0] if args else None

    def hook_for(index):
        chosen = outputs[index]

        def hook(module, args, output):
            if not when():
                return
            captured.append(_stream(output, chosen, index))
            if index == local[-1]:
                store(list(captured))
                captured.clear()
                positions, ids = seen.pop("positions", None), seen.pop("input_ids", None)
                # Copies on the device (the runner reuses its input buffers): no wait for the device per pass.
                _RECORDS.append((positions.detach().clone() if positions is not None else None,
                                 ids.detach().clone() if ids is not None else None,
                                 seen.pop("order", None)))

        return hook

    handles = [first.register_forward_pre_hook(begin, with_kwargs=True)]
    embedding = getattr(stack, "embed_tokens", None)
    if hasattr(embedding, "register_forward_pre_hook"):
        handles.append(embedding.register_forward_pre_hook(embedded))
    return handles + [stack.layers[i].register_forward_hook(hook_for(i)) for i in local]
"""


@dataclass(frozen=True)
class Capture:
    """What the consumer's replacement forward captures, as expressions of the installing method, and which of the
    layer call's outputs (by position) its captured value sums."""

    layer_ids: str
    store: str
    when: str
    value: str
    summed: tuple[int, ...] | None


def _replacement(ctx: FixContext, patch: ModelPatch) -> FunctionNode:
    function = function_of(ctx.root, patch.definition.file, patch.definition.line)
    if function is None or function.name != patch.function.rpartition(".")[2]:
        raise CompatError(f"cannot find the replacement forward {patch.function} at {patch.definition}")
    return function


def _read_capture(forward: FunctionNode) -> Capture:
    """The layer ids, the store call, the rank condition and the captured value of a forward written as
    ``for ... layer in ...self.layers...: a, b = layer(...); if idx in <ids>: <list>.append(<value>)``
    followed by ``<ext>.<store>(<list>)``, with ``<ext> = self.<link>``."""
    names = {t.id: node.value for node in ast.walk(forward) if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    loop = next((n for n in ast.walk(forward) if isinstance(n, ast.For) and "self.layers" in ast.unparse(n.iter)),
                None)
    if loop is None:
        raise CompatError("the replacement forward does not loop over self.layers")
    outputs = next((target for n in loop.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                    and isinstance(target := n.targets[0], ast.Tuple)), None)
    appends = [(n, append) for n in ast.walk(loop) if isinstance(n, ast.Call)
               and isinstance(append := n.func, ast.Attribute) and append.attr == "append" and len(n.args) == 1]
    guard = next((test for n in ast.walk(loop) if isinstance(n, ast.If) and isinstance(test := n.test, ast.Compare)
                  and isinstance(test.ops[0], ast.In)), None)
    if outputs is None or not appends or guard is None:
        raise CompatError("the replacement forward does not capture `a, b = layer(...)` outputs of selected "
                          "layers with `if index in ids: captured.append(...)`")
    captured = appends[0][0].args[0]
    value = ast.unparse(captured)
    summed = summed_outputs(captured, [ast.unparse(e) for e in outputs.elts])
    ids_name = ast.unparse(guard.comparators[0])
    ids = names.get(ids_name)
    when = "True"
    if isinstance(ids, ast.IfExp):
        when = ast.unparse(names.get(ast.unparse(ids.test), ids.test))
        ids = ids.body
    collected = ast.unparse(appends[0][1].value)
    store = next((func for n in ast.walk(forward) if isinstance(n, ast.Call)
                  and isinstance(func := n.func, ast.Attribute)
                  and [ast.unparse(a) for a in n.args] == [collected] and func.attr != "append"), None)
    if not isinstance(ids, ast.Attribute) or store is None:
        raise CompatError("the replacement forward's layer ids or store call are not `<extension>.<attribute>`")
    ext = ast.unparse(ids.value)
    if ast.unparse(store.value) != ext or not (isinstance(link := names.get(ext), ast.Attribute)
                                               and ast.unparse(link.value) == "self"):
        raise CompatError("the replacement forward does not reach its extension as `self.<attribute>`")
    return Capture(f"self.{ids.attr}", f"self.{store.attr}", f"lambda: {when}", value, summed)


def _installation(ctx: FixContext, patch: ModelPatch) -> tuple[list[str], int, str]:
    """The statements that install the forward (``base = model.model``, ``base.<link> = self``, ``base.forward
    = MethodType(...)``), their first line, and the top-level model they start from."""
    file, line = patch.location.file, patch.location.line
    function = function_of(ctx.root, file, line)
    index = statement_at(function.body, line) if function else None
    if function is None or index is None or not isinstance(installs := function.body[index], ast.Assign) \
            or not isinstance(installed := installs.targets[0], ast.Attribute):
        raise CompatError(f"cannot find the forward's installation at {patch.location}")
    target = ast.unparse(installed.value)
    first = index
    while first > 0:
        stmt = function.body[first - 1]
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and ast.unparse(stmt.targets[0]).split(".")[0]
                == target):
            break
        first -= 1
    definition = function.body[first]
    if not (isinstance(definition, ast.Assign) and ast.unparse(definition.targets[0]) == target
            and isinstance(definition.value, ast.Attribute)):
        raise CompatError(f"{target} is not assigned from an attribute of the model before {patch.location}")
    statements = [segment(ctx.root, file, s) for s in function.body[first:index + 1]]
    return [s.strip() for s in statements], function.body[first].lineno, ast.unparse(definition.value.value)


def _runner(ctx: FixContext, patch: ModelPatch, model: str) -> str | None:
    """The model runner the installing method took the model from (``model = self.model_runner.model``): the
    hooks read its batch order, when it keeps one."""
    function = function_of(ctx.root, patch.location.file, patch.location.line)
    for node in ast.walk(function) if function else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and ast.unparse(node.targets[0]) == model \
                and isinstance(node.value, ast.Attribute) and node.value.attr == "model":
            return ast.unparse(node.value.value)
    return None


Entry = tuple[tuple[int, ...] | None, str | None, tuple[int, ...], tuple[str, ...], tuple[str, ...]]
"""A reading of one layer class: its outputs (None: not read), why not, the defs it read (indices into the code
list), the conditions under which it does not hold, and those in words."""


@dataclass(frozen=True)
class StreamTable:
    layers: dict[str, list[Entry]]
    """Every decoder layer class of every audited build, each distinct reading once, the ones read first."""
    codes: list[tuple[str, str, str]]
    """Each def a reading read, once: module, qualified name, fingerprint."""
    paths: list[tuple[str, ...]]
    """The paths from the top-level models to their decoder stacks."""


def stream_table(ctx: FixContext) -> StreamTable:
    layers: dict[str, list[Entry]] = {}
    codes: dict[tuple[str, str, str], int] = {}
    paths: set[tuple[str, ...]] = set()
    for build in ctx.builds:
        for arch in build.fact(streams.ALL).archs:
            stream = arch.stream
            if arch.stack:
                paths.add(tuple(arch.stack))
            if stream.layer is None:
                continue
            read = tuple(codes.setdefault((r.module, r.qualname, r.fingerprint), len(codes)) for r in stream.read)
            entry: Entry = (stream.outputs, stream.reason, read, stream.unless, stream.unless_text)
            entries = layers.setdefault(stream.layer, [])
            if entry not in entries:
                entries.append(entry)
    for entries in layers.values():
        entries.sort(key=lambda e: (e[0] is None, not e[2]))
    return StreamTable(layers, list(codes), sorted(paths, key=lambda p: (len(p), p)))


def newly_enabled(ctx: FixContext) -> dict[str, list[str]]:
    """The architectures a release's ``supports_eagle3`` check refuses in a build whose decoder stack and layer
    convention the fix read there: the patched consumer runs them (where ``capture_proven`` holds), by build."""
    enabled: dict[str, list[str]] = {}
    for build in ctx.builds:
        for arch in build.fact(streams.ALL).archs:
            if arch.eagle3 is False and arch.stack and arch.stream.outputs is not None:
                enabled.setdefault(arch.arch, []).append(build.version)
    return enabled


class LayerHooks(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(models_probe.PROBE)
        if not failing:
            return plan
        for patch in ctx.scan.model_patches:
            try:
                capture = _read_capture(_replacement(ctx, patch))
                statements, line, model = _installation(ctx, patch)
            except CompatError as exc:
                plan.unhandled += [Unhandled(f, str(exc)) for _, f in failing]
                continue
            if capture.summed is None:
                # What the consumer keeps of a layer is not a sum of its outputs, so not the residual stream under
                # any layer's convention: capturing the stream instead would change what it stores.
                plan.unhandled += [Unhandled(f, f"the replacement forward captures `{capture.value}`, which is not "
                                                "a sum of the layer's outputs: not the residual stream that the "
                                                "hooks capture") for _, f in failing]
                continue
            runner = _runner(ctx, patch, model)
            call = (f"{ctx.shim.alias}.capture_layers(\n    {model},\n    layer_ids={capture.layer_ids},\n"
                    f"    store={capture.store},\n    when={capture.when},\n"
                    + (f"    runner={runner},\n" if runner else "") + ")\n")
            plan.edits.append(ReplaceStatements(patch.location.file, line, statements[0], expected=tuple(statements),
                                                replacement=call))
            plan.edits += self._eagle3_checks(ctx, patch)
            plan.notes.append(f"{patch.location}: the replacement forward {patch.function.rpartition('.')[2]} is "
                              f"replaced by forward hooks on the decoder layers (the build's own forward runs); "
                              f"where it kept `{capture.value}`, each layer's residual stream is read from its "
                              "outputs as its own code returns it (output[0] + output[1] where the residual is "
                              "not yet added, output[0] where it is)")
        if plan.edits:
            table = stream_table(ctx)
            read = sum(1 for entries in table.layers.values() if any(e[0] is not None for e in entries))
            code = (f"_STACK_PATHS = {tuple(table.paths)!r}\n\n_CODES = {table.codes!r}\n\n"
                    f"_STREAMS = {table.layers!r}\n\n{CODE}")
            plan.pieces.append(ShimPiece(
                "capture:layers", code, "decoder layers observed by hooks; the stack found through the wrappers of "
                f"the audited builds; the stream of {read} of {len(table.layers)} decoder layer classes read from "
                "their code", imports=("import ast", "import hashlib", "import importlib.util", "import json",
                                 "import sys")))
            plan.claims.append(Claim(models_probe.PROBE.name))
            enabled = newly_enabled(ctx)
            if enabled and any(isinstance(e, ReplaceStatements) and "capture_proven" in e.replacement
                               for e in plan.edits):
                plan.notes.append(f"{len(enabled)} architectures the release's supports_eagle3 check refuses now "
                                  "run where the stream of their decoder layers was read from the build's code "
                                  f"(capture_proven): {', '.join(sorted(enabled))}")
        return plan

    def _eagle3_checks(self, ctx: FixContext, patch: ModelPatch) -> list[ReplaceStatements]:
        """``if not supports_eagle3(model): raise ...`` keeps refusing, with the release's own words, every model
        but those whose capture the shim proves on the running build (``capture_proven``: the decoder stack found
        and every layer's stream read from its own code), which the EAGLE-3 marker does not decide."""
        edits = []
        for tp in ctx.scan.touchpoints:
            if tp.kind != Kind.CALL or not tp.symbol.endswith("supports_eagle3") or tp.location.file != \
                    patch.location.file:
                continue
            function = function_of(ctx.root, tp.location.file, tp.location.line)
            index = statement_at(function.body, tp.location.line) if function else None
            stmt = function.body[index] if function and index is not None else None
            if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.UnaryOp) and isinstance(
                    stmt.test.op, ast.Not) and isinstance(called := stmt.test.operand, ast.Call) and called.args:
                model = ast.unparse(called.args[0])
                text = segment(ctx.root, tp.location.file, stmt)
                first, _, rest = text.partition("\n")
                test = ast.unparse(stmt.test)
                replacement = first.replace(test, f"{test} and not {ctx.shim.alias}.capture_proven({model})", 1)
                edits.append(ReplaceStatements(tp.location.file, stmt.lineno, "if not supports_eagle3(...)",
                                               expected=(text.strip(),), replacement=f"{replacement}\n{rest}\n"))
        return edits


FIXER = LayerHooks(
    name="capture",
    description="A replacement forward that captures decoder-layer outputs: replaced by forward hooks on the "
                "layers, so the build's own forward (its embedding, layer calls and extra arguments) runs, the "
                "stack is found through the audited builds' wrappers, and each layer's residual stream is read from "
                "its outputs as its own code returns it. The consumer's supports_eagle3 refusal stays, but for "
                "models whose capture the shim proves on the running build.",
    handles=(models_probe.PROBE,),
    order=60,
)
