"""What a function's own statements say about its local names, read before the walk enters the function.

The walk (``compat.consumer.visitor``) reads statements in source order and keeps the last value of each name: it
cannot see that a loop's next turn, a branch or a nested function changes the name under it. Two readings need
that, so they look at every statement of the function first, and leave the name opaque whenever something they
cannot follow touches it (a false finding costs more than an opaque call):

- the keys a ``**mapping`` argument passes (``kwargs = dict(a=1)``, ``kwargs["b"] = 2``, ``f(**kwargs)``), so the
  call binds against a build as if they were written ``f(a=..., b=...)``;
- whether the receiver of a bound method held in a name (``step = self.executor.execute_model``) can be evaluated
  again where the name is called, so a fixer can rewrite ``step(out)`` into a call that names the receiver.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from compat.consumer.result import Alias
from compat.syntax import FunctionNode, called_name

INDIRECT_CALLERS = ("Process", "Thread")
"""Calls that call their ``target=`` with their ``args=`` and ``kwargs=`` (multiprocessing's and threading's)."""

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.comprehension, ast.ListComp, ast.SetComp, ast.DictComp,
          ast.GeneratorExp)
_BLOCKS = ("body", "orelse", "finalbody")


@dataclass(frozen=True)
class Spread:
    """The keys a ``**mapping`` argument passes, in order, each with its value's source when it is a literal (what
    ``TouchPoint.literals`` records for a keyword written out)."""

    items: tuple[tuple[str, str | None], ...] = ()

    @staticmethod
    def of(pairs: Iterable[tuple[str, ast.expr]]) -> Spread:
        return Spread(tuple({key: _literal(value) for key, value in pairs}.items()))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.items)

    @property
    def literals(self) -> tuple[tuple[str, str], ...]:
        return tuple((key, value) for key, value in self.items if value is not None)

    def plus(self, other: Spread) -> Spread:
        """This mapping updated with ``other``'s keys, as ``dict.update`` does: a key keeps its place, the later
        value wins."""
        merged = dict(self.items)
        merged.update(other.items)
        return Spread(tuple(merged.items()))


def _literal(value: ast.expr) -> str | None:
    return ast.unparse(value) if isinstance(value, ast.Constant) else None


def literal_spread(node: ast.expr, dict_builtin: bool = True) -> Spread | None:
    """The keys of a mapping written out in full: a dict display with constant string keys (``{"a": 1}``), or
    ``dict(a=1)`` whose one positional argument, if any, is such a mapping too. None when a part of it cannot be
    read statically: a ``**`` entry, a computed key, ``dict(other, a=1)``. ``dict_builtin``: the module never
    binds the name ``dict`` (else ``dict(...)`` may be anything)."""
    if isinstance(node, ast.Dict):
        keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None for k in node.keys]
        if any(key is None for key in keys):
            return None
        return Spread.of((str(key), value) for key, value in zip(keys, node.values))
    if dict_builtin and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return _merged(node.args, node.keywords, dict_builtin)
    return None


def _merged(args: list[ast.expr], keywords: list[ast.keyword], dict_builtin: bool) -> Spread | None:
    """What ``dict(m, k=v)`` holds, and what ``d.update(m, k=v)`` adds: ``m`` (read by ``literal_spread``), then
    the keywords; None when a part of it is opaque."""
    if len(args) > 1 or any(isinstance(a, ast.Starred) for a in args) or any(k.arg is None for k in keywords):
        return None
    base = literal_spread(args[0], dict_builtin) if args else Spread()
    if base is None:
        return None
    return base.plus(Spread.of((k.arg, k.value) for k in keywords if k.arg is not None))


def bound_names(node: ast.AST) -> Iterator[str]:
    """The names ``node`` itself binds in the scope it is in (not what the body of a def or class it opens binds)."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        yield node.id
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, ast.alias) and node.name != "*":
        yield node.asname or node.name.split(".")[0]
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        yield node.name
    elif isinstance(node, ast.MatchMapping) and node.rest:
        yield node.rest


def binds_anywhere(tree: ast.AST, name: str) -> bool:
    """Some code under ``tree`` binds ``name`` (``dict = ...``, ``def dict``, a parameter, an import)."""
    return any(name in bound_names(node) for node in ast.walk(tree))


@dataclass
class _Occurrences:
    """Every occurrence of a name in one function's own code, collected in one pass."""

    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    positions: dict[ast.AST, tuple[list[ast.stmt], int]] = field(default_factory=dict)
    """Statement -> the statement list that holds it (a function's, a branch's, a loop's body...) and its index."""
    bindings: Counter[str] = field(default_factory=Counter)
    looped: set[str] = field(default_factory=set)
    """Names bound inside a loop or a comprehension (bound again on each turn)."""
    declared: set[str] = field(default_factory=set)
    """Names declared ``global`` or ``nonlocal`` here or in a nested function."""
    nested: set[str] = field(default_factory=set)
    """Names a nested function, class or lambda mentions."""
    stored: set[str] = field(default_factory=set)
    """Attributes assigned or deleted anywhere in the function (nested functions too), as source."""
    loads: dict[str, list[ast.Name]] = field(default_factory=dict)


def _collect(function: FunctionNode) -> _Occurrences:
    found = _Occurrences()
    found.bindings.update(a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs)
    found.bindings.update(a.arg for a in (function.args.vararg, function.args.kwarg) if a is not None)
    stack: list[tuple[ast.AST, ast.AST, bool]] = [(stmt, function, False) for stmt in function.body]
    _note_block(function, found)
    while stack:
        node, parent, looped = stack.pop()
        found.parents[node] = parent
        for name in bound_names(node):
            found.bindings[name] += 1
            if looped:
                found.looped.add(name)
        if isinstance(node, _NESTED):
            _note_nested(node, found)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.loads.setdefault(node.id, []).append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found.declared.update(node.names)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            found.stored.add(ast.unparse(node))
        _note_block(node, found)
        inner = looped or isinstance(node, _LOOPS)
        stack.extend((child, node, inner) for child in ast.iter_child_nodes(node))
    return found


def _note_block(node: ast.AST, found: _Occurrences) -> None:
    """Where each statement of ``node``'s blocks sits (an ``except`` or ``case`` clause is a node of its own)."""
    for block in (getattr(node, name, None) for name in _BLOCKS):
        if isinstance(block, list):
            for index, stmt in enumerate(block):
                found.positions[stmt] = (block, index)


def _note_nested(node: ast.AST, found: _Occurrences) -> None:
    """A nested function, class or lambda: what it mentions, declares and assigns counts against the names."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.nested.add(sub.id)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            found.declared.update(sub.names)
        elif isinstance(sub, ast.Attribute) and not isinstance(sub.ctx, ast.Load):
            found.stored.add(ast.unparse(sub))


@dataclass(frozen=True)
class AliasBinding:
    """A name bound once to an attribute (``step = self.executor.execute_model``): the attribute expression, and
    what a call of the name says about it (``Alias``)."""

    node: ast.Attribute
    alias: Alias


@dataclass(frozen=True)
class FunctionNames:
    """What ``read_function`` found in one function."""

    spreads: dict[ast.expr, Spread] = field(default_factory=dict)
    """The keys passed by each ``f(**name)`` of a local mapping whose every change is followed, by the node of
    ``name`` in that call (a call it leaves out stays opaque)."""
    aliases: dict[str, AliasBinding] = field(default_factory=dict)
    """Local names bound to an attribute."""


def read_function(function: FunctionNode, dict_builtin: bool = True) -> FunctionNames:
    """The local mappings and bound-method names of ``function`` (its own code: nested defs are opaque to it)."""
    seen = _collect(function)
    spreads: dict[ast.expr, Spread] = {}
    aliases: dict[str, AliasBinding] = {}
    for stmt, (block, index) in seen.positions.items():
        bound = _assigned(stmt)
        if bound is None:
            continue
        name, value = bound
        defined = literal_spread(value, dict_builtin)
        if defined is not None:
            spreads.update(_spreads(seen, name, defined, block, index, dict_builtin))
        elif isinstance(value, ast.Attribute):
            aliases[name] = AliasBinding(value, _alias(seen, name, value))
    return FunctionNames(spreads, aliases)


def _assigned(stmt: ast.AST) -> tuple[str, ast.expr] | None:
    """``name = value`` (or ``name: T = value``), with one target."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id, stmt.value
    return None


def _spreads(seen: _Occurrences, name: str, defined: Spread, block: list[ast.stmt], index: int,
             dict_builtin: bool) -> dict[ast.expr, Spread]:
    """The keys each ``f(**name)`` (or ``Process(target=f, kwargs=name)``) passes, for ``name = <defined>`` at
    ``block[index]``.

    Only when the function binds ``name`` there alone, no nested code mentions it, and every other use of it is
    ``f(**name)``, ``name["key"] = v`` or ``name.update(...)`` with readable arguments, those two as statements of
    the same block after the definition: then a ``f(**name)`` under a later statement of that block sees the
    definition and the changes before that statement, whatever branches or loops lie around it (in a loop's body,
    the definition runs again on each turn)."""
    if seen.bindings[name] != 1 or name in seen.nested or name in seen.declared:
        return {}
    steps: list[tuple[int, Spread]] = []
    uses: list[ast.Name] = []
    for load in seen.loads.get(name, ()):
        parent = seen.parents[load]
        if isinstance(parent, ast.keyword) and isinstance(call := seen.parents[parent], ast.Call) and (
                parent.arg is None or parent.arg == "kwargs" and called_name(call) in INDIRECT_CALLERS):
            uses.append(load)
            continue
        change = _change(seen, load, dict_builtin)
        where = seen.positions.get(change[0]) if change is not None else None
        if change is None or where is None or where[0] is not block or where[1] <= index:
            return {}
        steps.append((where[1], change[1]))
    steps.sort(key=lambda step: step[0])
    known: dict[ast.expr, Spread] = {}
    for use in uses:
        at = _index_in(seen, use, block)
        if at is None or at <= index:
            continue
        spread = defined
        for _, added in (step for step in steps if step[0] < at):
            spread = spread.plus(added)
        known[use] = spread
    return known


def _change(seen: _Occurrences, load: ast.Name, dict_builtin: bool) -> tuple[ast.AST, Spread] | None:
    """``name["key"] = v`` or ``name.update(...)`` as a statement of its own: the statement and the keys it adds."""
    parent = seen.parents[load]
    grand = seen.parents.get(parent)
    if isinstance(parent, ast.Subscript) and parent.value is load and isinstance(parent.ctx, ast.Store) and \
            isinstance(grand, ast.Assign) and len(grand.targets) == 1 and grand.targets[0] is parent and \
            isinstance(parent.slice, ast.Constant) and isinstance(parent.slice.value, str):
        return grand, Spread.of([(parent.slice.value, grand.value)])
    if isinstance(parent, ast.Attribute) and parent.attr == "update" and isinstance(grand, ast.Call) and \
            grand.func is parent and isinstance(seen.parents.get(grand), ast.Expr):
        added = _merged(grand.args, grand.keywords, dict_builtin)
        return (seen.parents[grand], added) if added is not None else None
    return None


def _index_in(seen: _Occurrences, node: ast.AST, block: list[ast.stmt]) -> int | None:
    """The index of the statement of ``block`` that holds ``node``; None when ``block`` does not hold it."""
    current: ast.AST | None = node
    while current is not None:
        where = seen.positions.get(current)
        if where is not None and where[0] is block:
            return where[1]
        current = seen.parents.get(current)
    return None


def _chain(node: ast.expr) -> list[str] | None:
    """``self.engine.executor`` -> ["self", "self.engine", "self.engine.executor"]; None for anything but a name
    and attributes of it."""
    parts: list[ast.Attribute] = []
    while isinstance(node, ast.Attribute):
        parts.append(node)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + [ast.unparse(part) for part in reversed(parts)]


def _alias(seen: _Occurrences, name: str, value: ast.Attribute) -> Alias:
    """Whether ``value``'s receiver, evaluated again where ``name`` is called, is the object ``name`` was bound
    from: a name and attributes of it, its root a parameter or a local bound once outside any loop, and none of
    its attributes assigned in the function."""
    text = ast.unparse(value.value)
    if seen.bindings[name] != 1 or name in seen.declared:
        return Alias(name, why=f"{name} is bound more than once in the function")
    chain = _chain(value.value)
    if chain is None:
        return Alias(name, why=f"its receiver {text} is not a name or an attribute of one, so evaluating it again "
                                "may give another object")
    root = chain[0]
    if not seen.bindings[root]:
        return Alias(name, why=f"{root} is not a parameter or a local name of the function, so other code may "
                                "rebind it")
    if seen.bindings[root] > 1 or root in seen.looped or root in seen.declared:
        return Alias(name, why=f"{root} is bound again in the function (or in a loop)")
    stored = next((part for part in chain[1:] if part in seen.stored), None)
    if stored is not None:
        return Alias(name, why=f"{stored} is assigned in the function")
    return Alias(name, receiver=text)
