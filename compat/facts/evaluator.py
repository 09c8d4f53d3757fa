"""Run a def of the build on the values of ``compat.facts.algebra``, path by path.

Statements and expressions are read as Python runs them, on abstract values: ``a + b`` of two tensors adds their
terms, a constant or non-tensor factor scales them, and anything else that makes a tensor from the stream (a
norm's ``x * rsqrt(mean(x^2))``) is a new term carrying none of it. A call that receives the stream is followed
into the build's own def (a function, a method, a submodule's ``forward``: ``compat.facts.callees`` says which),
or is a tensor method or ``torch`` function whose effect is known; any other such call makes its result and
every tensor it received ``Unknown`` (it may add the stream, or change it in place). An in-place operation
(``x *= c``) changes the object for every name that holds it, in every frame.

A condition the values do not decide splits the state; each state keeps what it assumed (``Assumption``: a
formula and its truth) and states that end alike are merged under what they both assumed. Paths that raise
are dropped: they are not the forward's result.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from compat.facts import callees
from compat.facts.algebra import (
    FALSE,
    RUN_DTYPE,
    TRUE,
    Assumption,
    Atom,
    AtomKind,
    Bound,
    Choice,
    CodeRead,
    Cond,
    Const,
    DType,
    Ext,
    Formula,
    Func,
    Obj,
    Other,
    Stream,
    Tup,
    Unknown,
    Value,
    add,
    both,
    carries,
    either,
    fingerprint,
    negate,
    number,
    scale,
    swap,
    text_of,
)
from compat.syntax import FunctionNode
from compat.vllm.definitions import definition
from compat.vllm.modules import ModuleInfo
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

MAX_STATES = 512
MAX_DEPTH = 8
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not}
_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Is: "is",
        ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}


class Unreadable(Exception):
    """The code splits into more paths than are followed; the message says where."""


@dataclass
class Frame:
    env: dict[str, Value]
    module: ModuleInfo
    context: str

    def key(self) -> tuple[Any, ...]:
        return self.context, tuple(sorted(self.env.items(), key=lambda item: item[0]))


@dataclass
class State:
    frames: list[Frame]
    assumptions: frozenset[Assumption] = frozenset()
    returned: Value | None = None
    dead: bool = False

    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    def fork(self) -> State:
        return State([Frame(dict(f.env), f.module, f.context) for f in self.frames], self.assumptions, self.returned,
                     self.dead)

    def assuming(self, formula: Formula, truth: bool) -> State:
        forked = self.fork()
        forked.assumptions = self.assumptions | {(formula, truth)}
        return forked

    def key(self) -> tuple[Any, ...]:
        return tuple(f.key() for f in self.frames), self.returned, self.dead


Results = list[tuple[Value, State]]


@dataclass
class Evaluator:
    surface: StaticSurface
    read: dict[tuple[str, str], CodeRead] = field(default_factory=dict)
    """Every def followed, by (module, qualified name): what the reading depends on."""

    def call_method(self, obj: Obj, name: str, arguments: Sequence[tuple[str, Value]]) -> Results:
        """Every path through ``obj.<name>(**arguments)``: its returned value and its final state."""
        member = self.surface.member(obj.cls, name)
        if not isinstance(member, Found):
            return [(Unknown(f"{obj.cls.path} has no {name}"), State([]))]
        root = State([])
        return self._call_found(root, member, obj, [], list(arguments), "")

    # ---- defs -------------------------------------------------------------------------------------------------
    def _note(self, module: ModuleInfo, node: FunctionNode, qualname: str) -> None:
        key = (module.name, qualname)
        if key not in self.read:
            lines = module.path.read_text(errors="replace").splitlines()
            self.read[key] = CodeRead(module.name, qualname, fingerprint(lines, node))

    def _call_found(self, state: State, found: Found, obj: Obj | None, args: list[Value],
                    kwargs: list[tuple[str, Value]], context: str) -> Results:
        defined = definition(found)
        if defined is None or defined.function is None:
            return [(Unknown(f"cannot read {found.path}"), state)]
        problem = callees.decorator_problem(defined.function, found.path)
        if problem:
            return [(Unknown(problem), state)]
        if len(state.frames) >= MAX_DEPTH:
            return [(Unknown(f"calls nested deeper than {MAX_DEPTH} at {found.path}"), state)]
        qualname = f"{defined.owner.node.name}.{defined.function.name}" if defined.owner is not None \
            else defined.function.name
        self._note(defined.module, defined.function, qualname)
        bound: Value | None = None
        if found.kind in (FoundKind.METHOD, FoundKind.PROPERTY):
            if obj is None:
                return [(Unknown(f"{found.path} is called without its object"), state)]
            bound = obj
        elif found.kind == FoundKind.CLASSMETHOD:
            bound = Other("cls")
        env = _bind(defined.function, bound, args, kwargs)
        if isinstance(env, str):
            return [(Unknown(f"{qualname}: {env}"), state)]
        state.frames.append(Frame(env, defined.module, f"{context}>{qualname}"))
        out: Results = []
        for end in self._block(defined.function.body, [state]):
            if end.dead:
                continue
            value = end.returned if end.returned is not None else Const(None)
            end.frames.pop()
            end.returned = None
            out.append((value, end))
        if not out:
            state.frames.pop()
            return [(Unknown(f"every path through {qualname} raises"), state)]
        return _merge_results([(_canonical(value, f"{context}>") if context else value, s) for value, s in out])

    # ---- statements -------------------------------------------------------------------------------------------
    def _block(self, body: Sequence[ast.stmt], states: list[State]) -> list[State]:
        for stmt in body:
            live = [s for s in states if s.returned is None and not s.dead]
            if not live:
                break
            after = [s for s in states if s.returned is not None or s.dead]
            for state in live:
                after += self._stmt(stmt, state)
            states = _merge(after)
            if len(states) > MAX_STATES:
                raise Unreadable(f"more than {MAX_STATES} paths at line {stmt.lineno}")
        return states

    def _stmt(self, stmt: ast.stmt, state: State) -> list[State]:
        if isinstance(stmt, ast.Expr):
            return [s for _, s in self._expr(stmt.value, state)]
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            if stmt.value is None:
                return [state]
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            out = []
            for value, s in self._expr(stmt.value, state):
                for target in targets:
                    self._store(s, target, value)
                out.append(s)
            return out
        if isinstance(stmt, ast.AugAssign):
            node = ast.copy_location(ast.BinOp(stmt.target, stmt.op, stmt.value), stmt)
            out = []
            for value, s in self._expr(node, state):
                old = s.frame.env.get(stmt.target.id) if isinstance(stmt.target, ast.Name) else None
                if isinstance(old, Stream) and isinstance(value, (Stream, Unknown)):
                    # ``x *= c`` on a tensor changes the object: every name that holds it sees the change.
                    _replace_object(s, old.oid, replace(value, oid=old.oid) if isinstance(value, Stream) else value)
                else:
                    self._store(s, stmt.target, value)
                out.append(s)
            return out
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                state.returned = Const(None)
                return [state]
            out = []
            for value, s in self._expr(stmt.value, state):
                s.returned = value
                out.append(s)
            return out
        if isinstance(stmt, ast.If):
            out = []
            for test, s in self._expr(stmt.test, state):
                formula = _truth(test)
                if formula == TRUE:
                    out += self._block(stmt.body, [s])
                elif formula == FALSE:
                    out += self._block(stmt.orelse, [s])
                else:
                    out += self._block(stmt.body, [s.assuming(formula, True)])
                    out += self._block(stmt.orelse, [s.assuming(formula, False)])
            return out
        if isinstance(stmt, ast.Raise):
            state.dead = True
            return [state]
        if isinstance(stmt, (ast.Pass, ast.Assert, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal,
                             ast.Delete)):
            return [state]
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self._block(stmt.body, [state])
        if isinstance(stmt, ast.Try):
            return self._block([*stmt.body, *stmt.orelse, *stmt.finalbody], [state])
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            state.frame.env[stmt.name] = Other(stmt.name)
            return [state]
        # A loop (or a match) is not followed: what it assigns is unknown after it, and so is every tensor a call
        # inside it receives.
        why = f"a {type(stmt).__name__.lower()} at line {stmt.lineno}"
        for inner in ast.walk(stmt):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                state.frame.env[inner.id] = Unknown(f"assigned in {why}")
            elif isinstance(inner, ast.Call):
                _taint_names(state, [a for a in [*inner.args, *(k.value for k in inner.keywords)]
                                     if isinstance(a, ast.Name)], f"passed to a call in {why}")
        return [state]

    def _store(self, state: State, target: ast.expr, value: Value) -> None:
        if isinstance(target, ast.Name):
            state.frame.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            plain = not any(isinstance(e, ast.Starred) for e in target.elts)
            if isinstance(value, Tup) and plain and len(value.items) == len(target.elts):
                for t, v in zip(target.elts, value.items):
                    self._store(state, t, v)
            else:
                for i, t in enumerate(target.elts):
                    part: Value = Unknown(f"unpacked at line {target.lineno} from {type(value).__name__}")
                    if not carries(value):
                        # The parts of a value that is not the stream (a projection's ``output, bias``) are not.
                        part = replace(value, oid=f"{value.oid}[{i}]", terms=frozenset(
                            f"{term}[{i}]" for term in value.terms)) if isinstance(value, Stream) else Other(
                            f"{text_of(value)}[{i}]")
                    self._store(state, t.value if isinstance(t, ast.Starred) else t, part)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            held = state.frame.env.get(target.value.id)
            if isinstance(held, Stream) and (held.carries or carries(value)):
                _replace_object(state, held.oid, Unknown(f"part of a tensor assigned at line {target.lineno}"))
        # ``self.x = ...`` is not followed: a forward does not read back what it stores on its object

    # ---- expressions ------------------------------------------------------------------------------------------
    def _oid(self, node: ast.AST, state: State) -> str:
        return f"{state.frame.context}@{state.frame.module.relpath}:{getattr(node, 'lineno', 0)}:" \
               f"{getattr(node, 'col_offset', 0)}"

    def _fresh(self, node: ast.AST, state: State, dtype: str = RUN_DTYPE) -> Stream:
        oid = self._oid(node, state)
        return Stream((), frozenset({oid}), oid, dtype)

    def _sequence(self, nodes: Sequence[ast.expr], state: State) -> list[tuple[list[Value], State]]:
        combos: list[tuple[list[Value], State]] = [([], state)]
        for node in nodes:
            combos = [(values + [v], s2) for values, s in combos for v, s2 in self._expr(node, s)]
            if len(combos) > MAX_STATES:
                raise Unreadable(f"more than {MAX_STATES} paths in one expression at line {node.lineno}")
        return combos

    def _expr(self, node: ast.expr, state: State) -> Results:
        if isinstance(node, ast.Constant):
            return [(Const(node.value), state)]
        if isinstance(node, ast.Name):
            return [(self._name(node, state), state)]
        if isinstance(node, ast.Attribute):
            return [(self._attribute(node, v, s), s) for v, s in self._expr(node.value, state)]
        if isinstance(node, (ast.Tuple, ast.List)):
            return [(Tup(tuple(vs)), s) for vs, s in self._sequence(node.elts, state)]
        if isinstance(node, ast.BinOp):
            return [(self._binop(node, vs[0], vs[1], s), s) for vs, s in self._sequence([node.left, node.right],
                                                                                        state)]
        if isinstance(node, ast.UnaryOp):
            return [(self._unary(node, v, s), s) for v, s in self._expr(node.operand, state)]
        if isinstance(node, ast.BoolOp):
            out: Results = []
            for vs, s in self._sequence(node.values, state):
                formula = _truth(vs[0])
                for v in vs[1:]:
                    formula = both(formula, _truth(v)) if isinstance(node.op, ast.And) else either(formula, _truth(v))
                out.append((Cond(formula), s))
            return out
        if isinstance(node, ast.Compare):
            return [(self._compare(node, vs), s) for vs, s in self._sequence([node.left, *node.comparators], state)]
        if isinstance(node, ast.IfExp):
            out = []
            for test, s in self._expr(node.test, state):
                formula = _truth(test)
                if formula != FALSE:
                    out += self._expr(node.body, s if formula == TRUE else s.assuming(formula, True))
                if formula != TRUE:
                    out += self._expr(node.orelse, s if formula == FALSE else s.assuming(formula, False))
            return _merge_results(out)
        if isinstance(node, ast.Call):
            return self._call(node, state)
        if isinstance(node, ast.Subscript):
            return [(self._subscript(node, v, s), s) for v, s in self._expr(node.value, state)]
        if isinstance(node, ast.Starred):
            return self._expr(node.value, state)
        if isinstance(node, ast.JoinedStr):
            return [(Other("<f-string>"), state)]
        names = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
        if any(carries(state.frame.env.get(n.id, Const(None))) for n in names):
            return [(Unknown(f"the stream in a {type(node).__name__} at line {node.lineno}"), state)]
        return [(Other(ast.unparse(node)[:80]), state)]

    def _name(self, node: ast.Name, state: State) -> Value:
        if node.id in state.frame.env:
            return state.frame.env[node.id]
        module = state.frame.module
        found = self.surface.resolve_expr(module, node)
        if not isinstance(found, Found):
            return Other(node.id, module=module.name)
        if found.kind == FoundKind.EXTERNAL:
            return Other(found.path, module=module.name)
        if found.kind in (FoundKind.FUNCTION, FoundKind.CLASS, FoundKind.MODULE):
            return Func(found, node.id, module.name)
        return Other(node.id, module=module.name)

    def _attribute(self, node: ast.Attribute, base: Value | None, state: State) -> Value:
        name = node.attr
        if isinstance(base, Obj):
            member = self.surface.member(base.cls, name)
            if isinstance(member, Found) and member.kind in (FoundKind.METHOD, FoundKind.STATICMETHOD,
                                                             FoundKind.CLASSMETHOD):
                return Bound(base, member)
            classes = callees.submodule_classes(self.surface, base.cls, name)
            path = f"{base.path}.{name}"
            if len(classes) == 1 and classes[0].kind == FoundKind.EXTERNAL:
                return Ext(classes[0].path, path)
            if classes and all(c.kind == FoundKind.CLASS for c in classes):
                objs = tuple(Obj(c, path) for c in classes)
                return objs[0] if len(objs) == 1 else Choice(objs, path)
            return Other(path, on_self=True, module=state.frame.module.name)
        if isinstance(base, Stream):
            if name == "dtype":
                return DType(base.dtype)
            if name in ("data", "T", "mT"):
                return base if name == "data" else self._fresh(node, state, base.dtype)
            return Other(f"<tensor>.{name}")
        if isinstance(base, Other):
            if base.text == "torch" and name in callees.DTYPE_NAMES:
                return DType(callees.DTYPE_NAMES[name])
            return Other(f"{base.text}.{name}", base.on_self, base.module)
        if isinstance(base, Func):
            if name in callees.IR_OVERLOADS and callees.is_ir_op(base.found):
                return base
            member = self.surface.member(base.found, name)
            if not isinstance(member, Found) and base.found.kind == FoundKind.MODULE:
                member = self.surface.lookup(f"{base.found.path}.{name}")  # a submodule its package does not import
            text = f"{base.text}.{name}"
            if isinstance(member, Found):
                if member.kind in (FoundKind.FUNCTION, FoundKind.CLASS, FoundKind.STATICMETHOD, FoundKind.CLASSMETHOD,
                                   FoundKind.MODULE):
                    return Func(member, text, base.module)
                if member.kind == FoundKind.EXTERNAL:
                    return Other(member.path, module=base.module)
            return Other(text, module=base.module)
        if isinstance(base, Unknown):
            return base
        return Other(f"{text_of(base) if base is not None else '?'}.{name}")

    def _subscript(self, node: ast.Subscript, base: Value, state: State) -> Value:
        if isinstance(base, Tup):
            index = node.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, int) and \
                    -len(base.items) <= index.value < len(base.items):
                item: Value = base.items[index.value]
                return item
            if isinstance(index, ast.UnaryOp) and isinstance(index.operand, ast.Constant) and isinstance(
                    index.operand.value, int):
                position = -index.operand.value if isinstance(index.op, ast.USub) else None
                if position is not None and -len(base.items) <= position < len(base.items):
                    chosen: Value = base.items[position]
                    return chosen
            return Unknown(f"an element of a tuple at line {node.lineno}") if carries(base) else Other("<item>")
        if isinstance(base, Stream):
            # Some rows or columns of the stream are not the stream.
            return self._fresh(node, state, base.dtype)
        if isinstance(base, Unknown):
            return base
        if isinstance(base, Other):
            return Other(f"{base.text}[{ast.unparse(node.slice)}]", base.on_self, base.module)
        return Other(ast.unparse(node)[:80])

    def _unary(self, node: ast.UnaryOp, value: Value, state: State) -> Value:
        if isinstance(node.op, ast.Not):
            return Cond(negate(_truth(value)))
        if isinstance(value, Stream):
            return scale(value, Fraction(-1) if isinstance(node.op, ast.USub) else Fraction(1), self._oid(node, state))
        if isinstance(value, Const) and isinstance(value.value, (int, float)):
            return Const(-value.value if isinstance(node.op, ast.USub) else value.value)
        if isinstance(value, Unknown):
            return value
        return _composed(f"(-{text_of(value)})", [value])

    def _binop(self, node: ast.BinOp, left: Value, right: Value, state: State) -> Value:
        oid = self._oid(node, state)
        for side in (left, right):
            if isinstance(side, Unknown):
                return side
        if any(isinstance(side, Const) and side.value is None for side in (left, right)) and any(
                isinstance(side, Stream) for side in (left, right)):
            state.dead = True  # a tensor and None: Python raises here, so no result comes from this path
            return Unknown(f"{ast.unparse(node)[:60]} with None at line {node.lineno} raises")
        if isinstance(left, Stream) and isinstance(right, Stream):
            if isinstance(node.op, (ast.Add, ast.Sub)):
                return add(left, right, 1 if isinstance(node.op, ast.Add) else -1, oid)
            # A product of tensors (a norm's ``x * rsqrt(...)``, a gate): a new value, whatever it came from.
            return self._fresh(node, state, left.dtype)
        if isinstance(left, Stream) or isinstance(right, Stream):
            stream, other = (left, right) if isinstance(left, Stream) else (right, left)
            assert isinstance(stream, Stream)
            factor = number(other)
            if isinstance(node.op, ast.Mult):
                return scale(stream, factor, oid)
            if isinstance(node.op, ast.Div) and stream is left:
                return scale(stream, 1 / factor if factor else None, oid)
            if not stream.carries:
                return self._fresh(node, state, stream.dtype)
            return Unknown(f"{ast.unparse(node)[:60]} at line {node.lineno}")
        if isinstance(left, Const) and isinstance(right, Const) and type(node.op) in _BINARY:
            try:
                return Const(_BINARY[type(node.op)](left.value, right.value))
            except Exception:  # noqa: BLE001 - not a constant expression after all (1 / 0, None + 1)
                pass
        op = ast.unparse(ast.BinOp(ast.Name("a"), node.op, ast.Name("b"))).split()[1]
        return _composed(f"({text_of(left)} {op} {text_of(right)})", [left, right])

    def _compare(self, node: ast.Compare, values: list[Value]) -> Value:
        formula = TRUE
        for op, left, right in zip(node.ops, values, values[1:]):
            formula = both(formula, _compare_one(op, left, right))
        return Cond(formula)

    # ---- calls ------------------------------------------------------------------------------------------------
    def _call(self, node: ast.Call, state: State) -> Results:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            parts = [a.value if isinstance(a, ast.Starred) else a for a in node.args] + [k.value for k in node.keywords]
            out: Results = []
            for values, s in self._sequence(parts, state):
                if any(carries(v) for v in values):
                    out.append((Unknown(f"the stream passed through * or ** at line {node.lineno}"), s))
                else:
                    out.append((self._fresh(node, s), s))
            return out
        receiver_node = node.func.value if isinstance(node.func, ast.Attribute) else None
        out = []
        heads = self._expr(receiver_node, state) if receiver_node is not None else [(None, state)]
        for head, s in heads:
            if isinstance(head, Stream) and isinstance(node.func, ast.Attribute):
                for values, s2 in self._sequence([*node.args, *(k.value for k in node.keywords)], s):
                    args, kwargs = _split(node, values)
                    out.append((self._tensor_method(node, head, node.func.attr, args, kwargs, s2), s2))
                continue
            func = self._attribute(node.func, head, s) if isinstance(node.func, ast.Attribute) and head is not None \
                else self._name(node.func, s) if isinstance(node.func, ast.Name) else None
            if func is None:
                fs = self._expr(node.func, s)
            else:
                fs = [(func, s)]
            for f, s1 in fs:
                for values, s2 in self._sequence([*node.args, *(k.value for k in node.keywords)], s1):
                    args, kwargs = _split(node, values)
                    out += self._apply(node, f, args, kwargs, s2)
        return _merge_results(out)

    def _apply(self, node: ast.Call, func: Value, args: list[Value], kwargs: list[tuple[str, Value]],
               state: State) -> Results:
        given = [*args, *(v for _, v in kwargs)]
        flowing = any(carries(v) for v in given)
        context = self._oid(node, state)
        lost = next((v for v in given if isinstance(v, Unknown) or (isinstance(v, Tup) and _unknown_in(v))), None)
        if lost is not None:
            # What the stream became is already unknown: nothing is gained by following the call.
            reason = lost.reason if isinstance(lost, Unknown) else "an unknown value"
            return [(_taint(node, state, reason), state)]
        if isinstance(func, Unknown):
            return [(_taint(node, state, func.reason) if flowing else Unknown(func.reason), state)]
        if isinstance(func, Bound):
            if not flowing:
                return [(self._fresh(node, state), state)]
            return self._call_found(state, func.found, func.obj, args, kwargs, context)
        if isinstance(func, Choice):
            out: Results = []
            for obj in func.objs:
                out += self._apply(node, obj, args, kwargs, state.fork())
            return _merge_results(out)
        if isinstance(func, Ext):
            tail = func.path.rsplit(".", 1)[-1]
            if tail in callees.TORCH_SAME and len(args) == 1 and not kwargs:
                return [(args[0], state)]
            if tail in callees.TORCH_NEW or not flowing:
                return [(self._fresh(node, state), state)]
            return [(_taint(node, state, f"{func.text} ({func.path}) at line {node.lineno} receives the stream"),
                     state)]
        if isinstance(func, Obj):
            if not flowing or callees.is_projection(self.surface, func.cls):
                return [(self._fresh(node, state), state)]
            method = callees.forward_of(self.surface, func.cls)
            member = self.surface.member(func.cls, method)
            if not isinstance(member, Found):
                return [(_taint(node, state, f"cannot read {func.cls.path}.{method}"), state)]
            return self._call_found(state, member, func, args, kwargs, context)
        if isinstance(func, Func):
            if not flowing:
                return [(self._fresh(node, state), state)]
            if func.found.kind == FoundKind.CLASS:
                return [(_taint(node, state, f"{func.found.path}(...) at line {node.lineno} is built from the "
                                             "stream"), state)]
            return self._call_found(state, func.found, None, args, kwargs, context)
        text = func.text if isinstance(func, Other) else ""
        if text.startswith("torch."):
            return [(self._torch(node, text, args, kwargs, state), state)]
        if text.rsplit(".", 1)[-1] in ("isinstance", "len", "hasattr", "getattr", "int", "float", "bool"):
            if flowing and text.rsplit(".", 1)[-1] in ("hasattr", "getattr"):
                return [(Unknown(f"{text}(...) on the stream at line {node.lineno}"), state)]
            return [(_composed(f"{text.rsplit('.', 1)[-1]}({', '.join(text_of(a) for a in args)})",
                               [a for a in args if not isinstance(a, Stream)], tensors=any(
                                   isinstance(a, Stream) for a in args)), state)]
        if flowing:
            return [(_taint(node, state, f"{text or ast.unparse(node.func)}(...) at line {node.lineno} receives the "
                                         "stream"), state)]
        return [(self._fresh(node, state), state)]

    def _tensor_method(self, node: ast.Call, receiver: Stream, name: str, args: list[Value],
                       kwargs: list[tuple[str, Value]], state: State) -> Value:
        oid = self._oid(node, state)
        others = [*args, *(v for _, v in kwargs)]
        if name in callees.VIEWS:
            return receiver
        if name in callees.COPIES:
            return replace(receiver, oid=oid)
        if name in callees.CASTS:
            dtype = callees.CAST_DTYPES.get(name)
            for value in others:
                if isinstance(value, DType):
                    dtype = value.name
            if dtype is None and name in ("to",) and not any(isinstance(v, DType) for v in others):
                dtype = receiver.dtype  # to(device): the same dtype
            return replace(receiver, oid=oid, dtype=dtype or RUN_DTYPE)
        if name in ("add", "sub") and args and isinstance(args[0], Stream) and len(others) == 1:
            return add(receiver, args[0], 1 if name == "add" else -1, oid)
        if name in ("mul", "div") and args and number(args[0]) is not None and len(others) == 1:
            factor = number(args[0])
            return scale(receiver, factor if name == "mul" else (1 / factor if factor else None), oid)
        if name.endswith("_") and not name.endswith("__"):
            if receiver.carries or any(carries(v) for v in others):
                _replace_object(state, receiver.oid, Unknown(f"changed in place by {name}() at line {node.lineno}"))
                return Unknown(f"{name}() at line {node.lineno}")
            fresh = self._fresh(node, state, receiver.dtype)
            _replace_object(state, receiver.oid, replace(fresh, oid=receiver.oid))
            return fresh
        if not any(carries(v) for v in others) and (name in callees.NONLINEAR_METHODS or not receiver.carries):
            return self._fresh(node, state, receiver.dtype)
        return _taint(node, state, f"<tensor>.{name}(...) at line {node.lineno}")

    def _torch(self, node: ast.Call, text: str, args: list[Value], kwargs: list[tuple[str, Value]],
               state: State) -> Value:
        tail = text.rsplit(".", 1)[-1]
        streams = [a for a in args if isinstance(a, Stream)]
        if tail in ("add", "sub") and len(streams) == 2 and len(args) == 2 and not kwargs:
            return add(streams[0], streams[1], 1 if tail == "add" else -1, self._oid(node, state))
        if tail in callees.NONLINEAR_TORCH or not any(carries(v) for v in [*args, *(v for _, v in kwargs)]):
            return self._fresh(node, state)
        return _taint(node, state, f"{text}(...) at line {node.lineno} receives the stream")


def _unknown_in(value: Tup) -> bool:
    return any(isinstance(v, Unknown) or (isinstance(v, Tup) and _unknown_in(v)) for v in value.items)


def _split(node: ast.Call, values: list[Value]) -> tuple[list[Value], list[tuple[str, Value]]]:
    args = values[:len(node.args)]
    kwargs = [(k.arg or "", v) for k, v in zip(node.keywords, values[len(node.args):])]
    return list(args), kwargs


def _bind(node: FunctionNode, bound: Value | None, args: list[Value],
          kwargs: list[tuple[str, Value]]) -> dict[str, Value] | str:
    """The callee's parameters bound as Python binds them, or why they cannot be."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    env: dict[str, Value] = {}
    if bound is not None:
        if not positional:
            return "takes no self"
        env[positional[0].arg] = bound
        positional = positional[1:]
    for param, value in zip(positional, args):
        env[param.arg] = value
    extra = args[len(positional):]
    if extra and a.vararg is None:
        return "more positional arguments than it takes"
    if a.vararg is not None:
        env[a.vararg.arg] = Tup(tuple(extra))
    named = {p.arg for p in [*positional, *a.kwonlyargs]}
    rest = [(k, v) for k, v in kwargs if k not in named]
    env.update({k: v for k, v in kwargs if k in named})
    if rest:
        if a.kwarg is None:
            return f"no parameter {rest[0][0]!r}"
        if any(carries(v) for _, v in rest):
            return f"the stream reaches **{a.kwarg.arg}"
        env[a.kwarg.arg] = Other(f"**{a.kwarg.arg}")
    defaults = dict(zip([p.arg for p in [*a.posonlyargs, *a.args]][len(a.posonlyargs) + len(a.args) - len(a.defaults):],
                        a.defaults))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    for param in [*positional, *a.kwonlyargs]:
        if param.arg in env:
            continue
        if param.arg not in defaults:
            return f"called without {param.arg!r}"
        default = defaults[param.arg]
        env[param.arg] = Const(default.value) if isinstance(default, ast.Constant) else Other(ast.unparse(default))
    if a.kwarg is not None and a.kwarg.arg not in env:
        env[a.kwarg.arg] = Other(f"**{a.kwarg.arg}")
    return env


def _truth(value: Value) -> Formula:
    if isinstance(value, Cond):
        return value.formula
    if isinstance(value, Const):
        return TRUE if value.value else FALSE
    if isinstance(value, (Obj, Func, DType, Bound, Choice, Ext)):
        return TRUE
    if isinstance(value, Tup):
        return TRUE if value.items else FALSE
    if isinstance(value, Other):
        return ("atom", Atom(AtomKind.SELF if value.on_self else AtomKind.INPUT, value.text, value.module))
    return ("atom", Atom(AtomKind.INPUT, text_of(value)))


def _compare_one(op: ast.cmpop, left: Value, right: Value) -> Formula:
    if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, Const) and right.value is None:
        is_none: Formula
        if isinstance(left, Const):
            is_none = TRUE if left.value is None else FALSE
        elif isinstance(left, (Stream, Obj, Func, Tup, DType, Cond, Bound, Choice, Ext)):
            is_none = FALSE
        elif isinstance(left, Other) and left.on_self:
            is_none = ("atom", Atom(AtomKind.SELF, f"{left.text} is None", left.module))
        else:
            is_none = ("atom", Atom(AtomKind.INPUT, f"{text_of(left)} is None"))
        return is_none if isinstance(op, ast.Is) else negate(is_none)
    if isinstance(left, DType) and isinstance(right, DType) and isinstance(op, (ast.Eq, ast.NotEq, ast.Is,
                                                                                ast.IsNot)):
        same: Formula
        if left.name == right.name:
            same = TRUE
        elif RUN_DTYPE not in (left.name, right.name):
            same = FALSE
        else:
            same = ("atom", Atom(AtomKind.DTYPE, left.name if right.name == RUN_DTYPE else right.name))
        return same if isinstance(op, (ast.Eq, ast.Is)) else negate(same)
    if isinstance(left, Const) and isinstance(right, Const) and type(op) in _COMPARE:
        try:
            return TRUE if _COMPARE[type(op)](left.value, right.value) else FALSE
        except Exception:  # noqa: BLE001 - not comparable constants
            pass
    value = _composed(f"{text_of(left)} {_CMP.get(type(op), '?')} {text_of(right)}", [left, right])
    return _truth(value)


def _canonical(value: Value, context: str) -> Value:
    """A callee's result with the tensors it made inside named by where they first appear in the result, so that
    paths of the callee that differ only in how they made them (a weight applied or not) give one result."""
    streams = _streams(value)
    oids: dict[str, str] = {}
    terms: dict[str, str] = {}
    for s in streams:
        if s.oid.startswith(context):
            oids.setdefault(s.oid, f"{context}#o{len(oids)}")
        for t in sorted(s.terms):
            if t.startswith(context):
                terms.setdefault(t, f"{context}#t{len(terms)}")

    def walk(v: Value) -> Value:
        if isinstance(v, Stream):
            return replace(v, terms=frozenset(terms.get(t, t) for t in v.terms), oid=oids.get(v.oid, v.oid))
        if isinstance(v, Tup):
            return Tup(tuple(walk(x) for x in v.items))
        return v

    return walk(value)


def _streams(value: Value) -> list[Stream]:
    if isinstance(value, Stream):
        return [value]
    if isinstance(value, Tup):
        return [s for v in value.items for s in _streams(v)]
    return []


def _composed(text: str, parts: Sequence[Value], tensors: bool = False) -> Other:
    """A value made of others: evaluable on the layer only if every part is (or is a constant), in one module."""
    modules = {p.module for p in parts if isinstance(p, (Other, Func)) and p.module}
    on_self = not tensors and all(isinstance(p, (Const, Func)) or (isinstance(p, Other) and p.on_self)
                                  for p in parts) and any(isinstance(p, Other) for p in parts) and len(modules) <= 1
    return Other(text, on_self, next(iter(modules), ""))


def _replace_object(state: State, oid: str, value: Value) -> None:
    for frame in state.frames:
        for name, held in list(frame.env.items()):
            frame.env[name] = swap(held, oid, value)


def _taint_names(state: State, names: Sequence[ast.Name], why: str) -> None:
    for name in names:
        held = state.frame.env.get(name.id)
        if isinstance(held, Stream):
            _replace_object(state, held.oid, Unknown(why))
        elif held is not None and carries(held):
            state.frame.env[name.id] = Unknown(why)


def _taint(node: ast.Call, state: State, why: str) -> Unknown:
    """An unreadable call that receives the stream: its result, and every tensor it was given, are unknown."""
    _taint_names(state, [a for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.Name)], why)
    return Unknown(why)


def _merge(states: list[State]) -> list[State]:
    """States that hold the same values and ended alike are one, under what they all assumed."""
    out: dict[tuple[Any, ...], State] = {}
    for s in states:
        key = s.key()
        if key in out:
            out[key].assumptions = out[key].assumptions & s.assumptions
        else:
            out[key] = s
    return list(out.values())


def _merge_results(results: Results) -> Results:
    out: dict[tuple[Any, ...], tuple[Value, State]] = {}
    for value, s in results:
        key = (value, s.key())
        if key in out:
            out[key][1].assumptions = out[key][1].assumptions & s.assumptions
        else:
            out[key] = (value, s)
    return list(out.values())
