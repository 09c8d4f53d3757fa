"""The consumer's own step loop: run it as vLLM's engine core runs steps, and give each request its own rows.

speculators 0.3.0 finishes every request a step scheduled and slices the rows the worker captured, in the order
they were computed, by the prompts' lengths in the order they were added. That is right only where a step
computes whole prompts in that order; no build since 0.11.0 promises it (chunked prefill splits a prompt at the
token budget from 0.11.1; 0.11.0 itself runs later prompts ahead of one that does not fit; a full KV cache
preempts a request and computes it again). The fix keeps the consumer's own configuration and the build's own
scheduling, and makes the loop correct whatever a step does:

- the loop becomes ``run_steps``: each step's output goes back to the scheduler (``update_from_output``, as the
  engine core does), a request is finished only once its whole prompt is computed, stepping goes on while
  requests remain (a step may schedule nothing while a preempted request waits), and what each step computed of
  which request is recorded;
- the rows the worker returns are given to their requests by the positions (and token ids, or the worker's batch
  order) each forward pass ran on (``by_request``, reading what the shim's capture hooks keep), each request's
  rows in prompt order, the requests in the order they were added, the layers in the order asked for;
- a call starts with ``begin_call``: empty prompts and token ids outside the vocabulary are refused, and what a
  failed call left behind (queued requests, the workers' capture records) is cleared;
- a prompt the consumer cuts to fit the context is reported (``truncated``).

On vLLM 0.11.0 with prompts that fit a step this is what the release did: one step per prompt, finished after it.
"""

from __future__ import annotations

import ast

import compat.probes.defaults as defaults_probe
import compat.probes.models as models_probe
import compat.probes.steps as steps_probe
from compat.fixers.protocol import CODE as EXECUTE_MODEL

from compat.consumer.result import Finishes, Kind, StepLoop
from compat.fix.context import FixContext
from compat.fix.edits import InsertAfter, InsertBefore, ReplaceStatements
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from compat.fix.source import call_of, function_of, segment, statement_at
from compat.syntax import FunctionNode

NAME = "steps"

STEPS = '''
class _Call:
    """One call's requests, in the order they were added, and which tokens of which request each step computed."""

    def __init__(self):
        self.order = None
        self.prompts = {}
        self.steps = []


_CALLS = weakref.WeakKeyDictionary()
STALLED_STEPS = 3
_log = logging.getLogger(__name__)


def _ids(prompt):
    return prompt.tolist() if hasattr(prompt, "tolist") else list(prompt)


def begin_call(scheduler, executor, prompts, status):
    """Start a call: refuse prompts vLLM would mishandle, end what a failed call left behind (its queued requests,
    which the workers are told about, and the workers' capture records) and open a record of this call's steps."""
    vocab = scheduler.vllm_config.model_config.get_vocab_size()
    for index, prompt in enumerate(prompts):
        ids = _ids(prompt)
        if not ids:
            raise ValueError(f"prompt {index} is empty: there is no token to compute a hidden state for")
        outside = [t for t in ids if not 0 <= int(t) < vocab]
        if outside:
            raise ValueError(f"prompt {index} has token id {outside[0]} outside the model's vocabulary "
                             f"(0..{vocab - 1}); {len(outside)} such id(s) in all")
    left = list(scheduler.requests)
    if left:
        _log.warning("ending %d request(s) a failed call left queued", len(left))
        scheduler.finish_requests(left, status)
        execute_model(executor, scheduler.schedule())  # tells the workers, which keep a request until told
    _reset_capture_records(executor)
    _CALLS[scheduler] = _Call()


def run_steps(scheduler, executor, status):
    """Run the scheduler's steps until every request of the call is done, as vLLM's engine core runs them: each
    step's output goes back to the scheduler (``update_from_output``), so a prompt split across steps goes on
    where it stopped and a preempted one is computed again; a request is finished only once its whole prompt is
    computed; a step with nothing scheduled while requests remain is run empty and scheduling tried again. The
    step with nothing scheduled that ends the call still runs: it tells the workers which requests finished."""
    call = _CALLS.setdefault(scheduler, _Call())
    call.order = list(scheduler.requests)
    stalled = 0
    while True:
        output = scheduler.schedule()
        if not output.total_num_scheduled_tokens:
            result = execute_model(executor, output)
            if result is not None:
                scheduler.update_from_output(output, result)
            if not scheduler.get_num_unfinished_requests():
                return call
            stalled += 1
            if stalled > STALLED_STEPS:
                left = list(scheduler.requests)
                raise RuntimeError(f"the scheduler schedules nothing for {len(left)} unfinished request(s) "
                                   f"({', '.join(left[:5])}): the KV cache cannot hold what they need")
            continue
        stalled = 0
        layout = []
        for rid, count in output.num_scheduled_tokens.items():
            request = scheduler.requests[rid]
            if rid not in call.prompts:
                call.prompts[rid] = list(request.prompt_token_ids)
            layout.append((rid, request.num_computed_tokens - count, count))
        call.steps.append(layout)
        result = execute_model(executor, output)
        if result is not None:
            scheduler.update_from_output(output, result)
        done = [rid for rid, _, _ in layout if rid in scheduler.requests
                and scheduler.requests[rid].num_computed_tokens >= scheduler.requests[rid].num_prompt_tokens]
        if done:
            scheduler.finish_requests(done, status)


def truncated(prompts, limit):
    """``[p[:limit] for p in prompts]``, saying which prompts lose tokens."""
    cut = [(i, len(p)) for i, p in enumerate(prompts) if len(p) > limit]
    if cut:
        named = ", ".join(f"prompt {i} ({n} tokens)" for i, n in cut[:10]) + (" ..." if len(cut) > 10 else "")
        _log.warning("%d prompt(s) longer than %d tokens are cut to their first %d: %s", len(cut), limit, limit,
                     named)
        warnings.warn(f"{len(cut)} prompt(s) longer than {limit} tokens are cut to their first {limit}: {named}",
                      RuntimeWarning, stacklevel=2)
    return [p[:limit] for p in prompts]
'''

BY_REQUEST = '''
def _attribute(step, positions, tokens, order, prompts):
    """Which rows of one forward pass are which request's: (request id, first position, count, first row). From the
    worker's batch order when it kept one, checked against the positions and token ids the pass ran on; else read
    from those positions and token ids alone. Never assumed from the order the step scheduled them in."""
    rows = positions.tolist() if positions is not None else None
    ids = tokens.tolist() if tokens is not None else None

    def fits(entry, row):
        rid, start, count = entry
        return ((rows is None or rows[row:row + count] == list(range(start, start + count)))
                and (ids is None or ids[row:row + count] == prompts[rid][start:start + count]))

    counts = {entry[0]: entry for entry in step}
    if order is not None:
        if sorted(order) != sorted(counts):
            raise RuntimeError(f"the worker ran requests {sorted(order)}; the step scheduled {sorted(counts)}")
        placed, row = [], 0
        for rid in order:
            if not fits(counts[rid], row):
                raise RuntimeError(f"rows {row}.. of a forward pass are not request {rid}'s tokens "
                                   f"{counts[rid][1]}..{counts[rid][1] + counts[rid][2] - 1}")
            placed.append((rid, counts[rid][1], counts[rid][2], row))
            row += counts[rid][2]
        return placed
    if rows is None:
        raise RuntimeError("the worker kept neither the batch order nor the positions of a forward pass")
    left, placed, row = list(step), [], 0
    while left:
        if row >= len(rows):
            raise RuntimeError(f"a forward pass has {len(rows)} rows; its step scheduled "
                               f"{sum(c for _, _, c in step)} tokens")
        matches = [entry for entry in left if fits(entry, row)]
        if not matches:
            raise RuntimeError(f"row {row} of a forward pass (position {rows[row]}) is no request's the step "
                               "scheduled")
        chosen = matches[0]
        end = chosen[1] + chosen[2]
        if any(prompts[e[0]][:e[1] + e[2]] != prompts[chosen[0]][:end] for e in matches[1:]):
            raise RuntimeError(f"rows {row}..{row + chosen[2] - 1} of a forward pass could be any of requests "
                               f"{', '.join(e[0] for e in matches)}, whose earlier tokens differ")
        left.remove(chosen)
        placed.append((chosen[0], chosen[1], chosen[2], row))
        row += chosen[2]
    return placed


def by_request(scheduler, executor, replies, layer_ids=None, unique_reply_rank=None):
    """This call's captured rows, per layer, one request after another in the order they were added, each
    request's rows in prompt order (of a position computed twice, after a preemption, the last computation), the
    layers in the order ``layer_ids`` asks for (repeats included). ``replies``: a one-entry list holding the
    rank's per-layer tensors, every forward pass's rows one after another, as the consumer's worker returns them."""
    import torch

    call = _CALLS.pop(scheduler, None)
    layers = replies[0]
    if call is None or call.order is None or not layers:
        return replies
    reply = executor.collective_rpc(_capture_records)[unique_reply_rank or 0]
    forwards = reply["records"]
    if layer_ids is not None and sorted(set(layer_ids)) != sorted(reply["layers"]):
        raise RuntimeError(f"the generator asks for layers {list(layer_ids)}, but the workers capture layers "
                           f"{sorted(reply['layers'])} (set when the capture was installed): the states would be "
                           "labelled as other layers. Set the layer ids when building the generator")
    if len(forwards) != len(call.steps):
        raise RuntimeError(f"the worker captured {len(forwards)} forward passes for {len(call.steps)} steps")
    source, offset = {}, 0
    for step, (positions, tokens, order) in zip(call.steps, forwards):
        for rid, start, count, row in _attribute(step, positions, tokens, order, call.prompts):
            rows = source.setdefault(rid, {})
            for k in range(count):
                rows[start + k] = offset + row + k
        offset += len(positions) if positions is not None else sum(c for _, _, c in step)
    total = layers[0].shape[0]
    if offset != total:
        raise RuntimeError(f"the worker returned {total} rows; its forward passes ran {offset}")
    index = []
    for rid in call.order:
        rows, length = source.get(rid, {}), len(call.prompts.get(rid, ()))
        missing = [p for p in range(length) if p not in rows]
        if missing or not length:
            raise RuntimeError(f"request {rid}: no hidden state for {len(missing) if length else 'any'} of its "
                               f"{length} positions")
        index += [rows[p] for p in range(length)]
    if index == list(range(total)):
        ordered = list(layers)  # each prompt's rows already follow the one before (whole or split in order)
    else:
        where = torch.tensor(index, dtype=torch.long, device=layers[0].device)
        ordered = [layer.index_select(0, where) for layer in layers]
    if layer_ids is not None:
        captured = sorted(set(layer_ids))
        ordered = [ordered[captured.index(k)] for k in layer_ids]
    _refuse_non_finite(ordered, list(layer_ids) if layer_ids is not None else sorted(reply["layers"]), call)
    return [ordered]


class NonFiniteStates(ValueError):
    """A captured state holds NaN or infinity."""


def _refuse_non_finite(layers, layer_ids, call):
    """Raise, naming the sample and the layer, where a captured state holds NaN or infinity: vLLM computed no
    usable state there, and a training set must not take it silently."""
    import torch

    for layer_id, layer in zip(layer_ids, layers):
        finite = torch.isfinite(layer)
        if bool(finite.all()):
            continue
        rows = (~finite).reshape(finite.shape[0], -1).any(dim=1).nonzero().flatten().tolist()
        start = 0
        for sample, rid in enumerate(call.order):
            length = len(call.prompts.get(rid, ()))
            inside = [r - start for r in rows if start <= r < start + length]
            if inside:
                raise NonFiniteStates(f"sample {sample} (request {rid}): layer {layer_id} holds non-finite values "
                                      f"(NaN or infinity) at {len(inside)} of its {length} tokens, the first at "
                                      f"token {inside[0]}: vLLM computed no usable state for it, and this call "
                                      "returns nothing")
            start += length
        raise NonFiniteStates(f"layer {layer_id} holds non-finite values (NaN or infinity) at rows {rows[:5]}")
'''

def _statement(function: ast.AST, line: int) -> ast.stmt | None:
    """The statement of ``function``'s own body (any depth of block) that starts on ``line``."""
    return next((n for n in ast.walk(function) if isinstance(n, ast.stmt) and n.lineno == line), None)


def _adding(function: FunctionNode, loop: StepLoop) -> ast.stmt | None:
    """The statement of the function's body, before the loop, that adds the call's requests to the scheduler."""
    index = statement_at(function.body, loop.location.line)
    for stmt in function.body[:index]:
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_request"
               and ast.unparse(n.func.value) == loop.scheduler for n in ast.walk(stmt)):
            return stmt
    return None


def _prompts(adding: ast.stmt) -> str | None:
    """The prompts a ``for ... in enumerate(prompts)`` (or ``in prompts``) loop adds requests for."""
    if not isinstance(adding, ast.For):
        return None
    source = adding.iter
    if isinstance(source, ast.Call) and ast.unparse(source.func) == "enumerate" and source.args:
        source = source.args[0]
    return ast.unparse(source) if isinstance(source, (ast.Name, ast.Attribute)) else None


def _truncation(function: FunctionNode, before: int, prompts: str) -> tuple[ast.Assign, str] | None:
    """``prompts = [p[:limit] for p in prompts]`` before line ``before``, and its limit."""
    for stmt in function.body:
        if stmt.lineno >= before or not isinstance(stmt, ast.Assign) or ast.unparse(stmt.targets[0]) != prompts:
            continue
        value = stmt.value
        if isinstance(value, ast.ListComp) and len(value.generators) == 1 and ast.unparse(
                value.generators[0].iter) == prompts and isinstance(value.elt, ast.Subscript) and isinstance(
                value.elt.slice, ast.Slice) and value.elt.slice.lower is None and value.elt.slice.upper is not None:
            return stmt, ast.unparse(value.elt.slice.upper)
    return None


def _retrieval(ctx: FixContext, function: FunctionNode, loop: StepLoop) -> tuple[ast.Assign, str] | None:
    """The statement after the loop that fetches the captured rows from the workers (the first RPC the scan saw
    there, assigned to a name), and its ``unique_reply_rank``."""
    rpcs = sorted((tp for tp in ctx.scan.touchpoints if tp.kind == Kind.RPC and tp.location.file == loop.location.file
                   and loop.end_line < tp.location.line <= (function.end_lineno or 0)), key=lambda t: t.location.line)
    for tp in rpcs:
        index = statement_at(function.body, tp.location.line)
        stmt = function.body[index] if index is not None else None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            call = stmt.value
            rank = next((ast.unparse(k.value) for k in getattr(call, "keywords", ()) if k.arg == "unique_reply_rank"),
                        "None")
            return stmt, rank
    return None


def _layer_ids(ctx: FixContext) -> str | None:
    """What the consumer hands the worker method that installs the capture (``args=(self.layer_ids,)``): the
    layer ids in the order it asked for them."""
    for patch in ctx.scan.model_patches:
        installer = function_of(ctx.root, patch.location.file, patch.location.line)
        if installer is None:
            continue
        for tp in ctx.scan.touchpoints:
            if tp.kind != Kind.RPC or tp.rpc_method != installer.name:
                continue
            found = call_of(ctx.root, tp.location.file, tp.location.line, "collective_rpc")
            args = next((k.value for k in found[0].keywords if k.arg == "args"), None) if found else None
            if isinstance(args, ast.Tuple) and args.elts:
                return ast.unparse(args.elts[0])
    return None


class StepLoopFix(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(steps_probe.PROBE)
        if not failing:
            return plan
        captures = "capture" in ctx.fixers and bool(ctx.failing(models_probe.PROBE)) and bool(ctx.scan.model_patches)
        for location, pairs in ctx.by_location(failing).items():
            loop = next((lp for lp in ctx.scan.step_loops if str(lp.location) == location), None)
            why = self._why_not(ctx, loop, captures)
            if why:
                plan.unhandled += [Unhandled(f, why) for _, f in pairs]
                continue
            assert loop is not None  # _why_not says why without one
            problem = self._plan_loop(ctx, plan, loop)
            if problem:
                plan.unhandled += [Unhandled(f, problem) for _, f in pairs]
                continue
            plan.claims.append(Claim(steps_probe.PROBE.name, pairs[0][1].symbol))
        if plan.edits:
            plan.pieces += [ShimPiece("protocol:execute_model", EXECUTE_MODEL, "a step completed by sample_tokens "
                                      "where the build is two-phase"),
                            ShimPiece("steps:run", STEPS, "steps run as the engine core runs them",
                                      imports=("import logging", "import weakref")),
                            ShimPiece("steps:by_request", BY_REQUEST, "each request's own rows, by the positions "
                                      "its steps computed")]
            plan.claims.append(Claim(defaults_probe.PROBE.name, "*SchedulerConfig.enable_chunked_prefill"))
            plan.notes.append("the step loop runs as the engine core runs steps (update_from_output each step, a "
                              "request finished once its whole prompt is computed, stepping while requests remain), "
                              "and each request gets its own rows by the positions its steps computed: right "
                              "whether a build splits a prompt across steps (chunked prefill), runs later prompts "
                              "first or preempts a request")
        return plan

    @staticmethod
    def _why_not(ctx: FixContext, loop: StepLoop | None, captures: bool) -> str:
        if loop is None:
            return "not a step loop the scan read"
        if loop.finishes != Finishes.SCHEDULED or not loop.executor or not loop.finish_status:
            return "the loop does not run `<executor>.execute_model(out)` and finish the step's requests"
        if loop.others:
            return f"the loop also runs {loop.others[0]!r}, which a rewritten loop would drop"
        if not captures:
            return "the rows are captured by the consumer's own forward, which keeps no positions to give each " \
                   "request its rows by"
        return ""

    def _plan_loop(self, ctx: FixContext, plan: FixerPlan, loop: StepLoop) -> str:
        """Plan the edits of one loop; why it cannot be fixed ('' when planned)."""
        file, alias = loop.location.file, ctx.shim.alias
        function = function_of(ctx.root, file, loop.location.line)
        node = _statement(function, loop.location.line) if function else None
        adding = _adding(function, loop) if function else None
        prompts = _prompts(adding) if adding is not None else None
        fetched = _retrieval(ctx, function, loop) if function else None
        if function is None or node is None or adding is None or prompts is None:
            return "the requests are not added by a `for ... in <prompts>` loop before the step loop"
        if fetched is None:
            return "no RPC after the loop fetches the captured rows into a name, so they cannot be given to requests"
        args = f"{loop.scheduler}, {loop.executor}"
        plan.edits.append(ReplaceStatements(file, node.lineno, "while ...schedule()...: <step>",
                                            expected=(segment(ctx.root, file, node),),
                                            replacement=f"{alias}.run_steps({args}, {loop.finish_status})\n",
                                            end_line=loop.end_line))
        plan.edits.append(InsertBefore(file, adding.lineno, f"the statement that adds requests ({prompts})",
                                       contains=".add_request(",
                                       code=f"{alias}.begin_call({args}, {prompts}, {loop.finish_status})"))
        cut = _truncation(function, adding.lineno, prompts)
        if cut is not None:
            stmt, limit = cut
            plan.edits.append(ReplaceStatements(file, stmt.lineno, f"{prompts} = [p[:limit] for p in {prompts}]",
                                                expected=(segment(ctx.root, file, stmt),),
                                                replacement=f"{prompts} = {alias}.truncated({prompts}, {limit})\n"))
        stmt, rank = fetched
        target = ast.unparse(stmt.targets[0])
        layer_ids = _layer_ids(ctx)
        plan.edits.append(InsertAfter(file, stmt.lineno, f"{target} = <the workers' captured rows>", assigns=target,
                                      code=f"{target} = {alias}.by_request({args}, {target}, layer_ids={layer_ids}, "
                                           f"unique_reply_rank={rank})"))
        return ""


FIXER = StepLoopFix(
    name=NAME,
    description="A hand-written step loop that finishes every request a step scheduled: run as the engine core "
                "runs steps, each request's rows given to it by the positions its steps computed, prompts "
                "checked and a failed call's leftovers cleared.",
    handles=(steps_probe.PROBE,),
    order=65,
)
