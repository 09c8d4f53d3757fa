"""Replacement forwards that capture hidden states: the build's model conventions (embedding method, how its
forward calls the decoder layers and with which extra arguments, the wrappers around the decoder stack, the
EAGLE-3 marker) keep changing under a forward the consumer wrote for one build.

The fix removes the cause: the shim leaves the build's own forward in place and observes the decoder layers
with forward hooks, so the layers are called with the build's own convention and arguments, the embedding is
the build's own, and the stack is found through the wrappers the audited builds use. What a hook captures,
when, and where it goes are the consumer's own expressions, read from its replacement forward.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import compat.probes.models as models_probe

from compat.consumer.result import Kind, ModelPatch
from compat.errors import CompatError
from compat.facts import architectures
from compat.fix.context import FixContext
from compat.fix.edits import ReplaceStatements
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from compat.fix.source import function_of, segment, statement_at
from compat.syntax import FunctionNode

CODE = '''
def decoder_stack(model):
    """The module holding the decoder layers, through the wrappers the audited builds put around it."""
    for path in _STACK_PATHS:
        obj = model
        for name in path:
            obj = getattr(obj, name, None)
        if obj is not None and hasattr(obj, "layers"):
            return obj
    raise ValueError(f"{type(model).__name__} has no decoder stack at "
                     + " or ".join("model." + ".".join(p) for p in _STACK_PATHS))


_RECORDS = []
"""In a worker: for each forward pass the hooks captured, the positions, token ids and batch order it ran on."""


def _capture_records(worker=None):
    """Run in a worker (``collective_rpc``): what ``_RECORDS`` holds, on the CPU (the hooks keep device copies, so
    that a forward pass never waits for the device)."""
    return [tuple(x.to("cpu") if hasattr(x, "to") else x for x in record) for record in _RECORDS]


def _clear_capture_records(worker=None):
    """Run in a worker (``collective_rpc``): forget every forward pass recorded so far."""
    _RECORDS.clear()


def _reset_capture_records(executor):
    executor.collective_rpc(_clear_capture_records)


def _positions_of(layer):
    """A function reading the ``positions`` argument of a call of ``layer`` (None where it takes none): decoder
    layers take them by name or position, and the stack's own forward is not hooked (compiled models replace
    its ``__call__``)."""
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


def capture_layers(model, layer_ids, store, when, value, runner=None):
    """Capture what decoder layers ``layer_ids`` output, with forward hooks: the build's own forward runs
    (its embedding, its layer calls and their extra arguments). For each forward pass on which ``when()``
    holds, ``store`` gets one list, in ascending layer order (each layer once), of ``value(*outputs)`` of each
    captured layer (layers of other pipeline stages are not here). The positions, token ids and batch order
    (``runner.input_batch.req_ids`` where the model runner has one) of each such pass are recorded for
    ``by_request``. Each pass starts from an empty buffer, so a pass that failed half-way leaves nothing
    behind. Returns the hook handles."""
    stack = decoder_stack(model)
    local = [i for i in sorted(set(layer_ids))
             if i < len(stack.layers) and type(stack.layers[i]).__name__ != "PPMissingLayer"]
    if not local:
        return []
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
        def hook(module, args, output):
            if not when():
                return
            captured.append(value(*output) if isinstance(output, tuple) else value(output))
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
'''


@dataclass(frozen=True)
class Capture:
    """What the consumer's replacement forward captures, as expressions of the installing method."""

    layer_ids: str
    store: str
    when: str
    value: str


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
    params = ", ".join(ast.unparse(e) for e in outputs.elts)
    value = f"lambda {params}: {ast.unparse(appends[0][0].args[0])}"
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
    return Capture(f"self.{ids.attr}", f"self.{store.attr}", f"lambda: {when}", value)


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
            runner = _runner(ctx, patch, model)
            call = (f"{ctx.shim.alias}.capture_layers(\n    {model},\n    layer_ids={capture.layer_ids},\n"
                    f"    store={capture.store},\n    when={capture.when},\n    value={capture.value},\n"
                    + (f"    runner={runner},\n" if runner else "") + ")\n")
            plan.edits.append(ReplaceStatements(patch.location.file, line, statements[0], expected=tuple(statements),
                                                replacement=call))
            plan.edits += self._eagle3_checks(ctx, patch, failing)
            plan.notes.append(f"{patch.location}: the replacement forward {patch.function.rpartition('.')[2]} is "
                              "replaced by forward hooks on the decoder layers (the build's own forward runs)")
        if plan.edits:
            paths = sorted({tuple(b.fact(architectures.FACT, arch).path or ()) for b in ctx.builds
                            for arch in _architectures(failing)} - {()})
            plan.pieces.append(ShimPiece("capture:layers", f"_STACK_PATHS = {tuple(paths)!r}\n\n{CODE}",
                                         "decoder layers observed by hooks; the stack found through the wrappers "
                                         f"of the audited builds ({', '.join('.'.join(p) for p in paths)})"))
            plan.claims.append(Claim(models_probe.PROBE.name))
        return plan

    def _eagle3_checks(self, ctx: FixContext, patch: ModelPatch, failing) -> list[ReplaceStatements]:
        """``if not supports_eagle3(model): raise ...``: the hooks need a decoder stack, not the EAGLE-3 marker
        (which some builds' models lack although they run the consumer's capture fine)."""
        if not any(f.symbol.endswith(":eagle3") for _, f in failing):
            return []
        edits = []
        for tp in ctx.scan.touchpoints:
            if tp.kind != Kind.CALL or not tp.symbol.endswith("supports_eagle3") or tp.location.file != \
                    patch.location.file:
                continue
            function = function_of(ctx.root, tp.location.file, tp.location.line)
            index = statement_at(function.body, tp.location.line) if function else None
            stmt = function.body[index] if function and index is not None else None
            if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.UnaryOp) and isinstance(
                    called := stmt.test.operand, ast.Call):
                model = ast.unparse(called.args[0])
                edits.append(ReplaceStatements(tp.location.file, stmt.lineno, "if not supports_eagle3(...)",
                                               expected=(segment(ctx.root, tp.location.file, stmt).strip(),),
                                               replacement=f"{ctx.shim.alias}.decoder_stack({model})\n"))
        return edits


def _architectures(failing) -> set[str]:
    return {f.symbol.split(":")[0] for _, f in failing}


FIXER = LayerHooks(
    name="capture",
    description="A replacement forward that captures decoder-layer outputs: replaced by forward hooks on the "
                "layers, so the build's own forward (its embedding, layer calls and extra arguments) runs and the "
                "stack is found through the audited builds' wrappers.",
    handles=(models_probe.PROBE,),
    order=60,
)
