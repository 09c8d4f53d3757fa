"""Wrappers that forward: a class whose ``__getattr__`` hands every name it lacks to one of its own attributes.

vLLM wraps objects and keeps them usable as what they wrap (``CUDAGraphWrapper``, ``BreakableCUDAGraphWrapper``,
``UBatchWrapper`` around the model)::

    def __getattr__(self, key):
        runnable = self.__dict__.get("runnable")        # or: if hasattr(self.runnable, key):
        if runnable is not None and hasattr(runnable, key):
            return getattr(runnable, key)               #         return getattr(self.runnable, key)
        raise AttributeError(key)

Read from the code alone: a ``__getattr__`` forwards to attribute ``a`` when every return it makes is
``getattr(<self.a, or a local bound to self.__dict__.get("a")>, <its name parameter>)`` and it cannot fall off
its end (which would return None); the object forwarded to is what the constructor stores in ``self.a`` (one of
its parameters), so the argument a construction site passes for that parameter says what the wrapper wraps there.
"""

from __future__ import annotations

import ast

from compat.syntax import FunctionNode, walk_shallow


def forwarded_attribute(function: FunctionNode) -> str | None:
    """The attribute of ``self`` that a ``__getattr__`` forwards every name to, or None when it does anything else
    (a fixed table, a computed value, a default, an implicit ``return None``)."""
    params = function.args.posonlyargs + function.args.args
    if len(params) < 2 or not _cannot_fall_off(function.body):
        return None
    this, key = params[0].arg, params[1].arg
    returns = [node for node in walk_shallow(function) if isinstance(node, ast.Return)]
    targets = {_forwarded(node.value, this, key, function) for node in returns}
    return targets.pop() if returns and len(targets) == 1 and None not in targets else None


def stored_parameter(init: FunctionNode, attribute: str) -> str | None:
    """The constructor parameter stored, as it is, in ``self.<attribute>`` (``self.runnable = runnable``): the one
    assignment of the attribute in ``__init__``."""
    params = init.args.posonlyargs + init.args.args + init.args.kwonlyargs
    if not params:
        return None
    this, names = params[0].arg, {p.arg for p in params[1:]}
    values = [node.value for node in walk_shallow(init) if isinstance(node, (ast.Assign, ast.AnnAssign))
              and node.value is not None and any(_is_self_attribute(t, this, attribute) for t in _targets(node))]
    if len(values) == 1 and isinstance(values[0], ast.Name) and values[0].id in names:
        return values[0].id
    return None


def bound_argument(call: ast.Call, init: FunctionNode, parameter: str) -> ast.expr | None:
    """The expression a construction site ``call`` passes for the constructor's ``parameter``."""
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
    positional = [p.arg for p in (init.args.posonlyargs + init.args.args)[1:]]
    if parameter not in positional:
        return None
    index = positional.index(parameter)
    starred = next((i for i, arg in enumerate(call.args) if isinstance(arg, ast.Starred)), len(call.args))
    return call.args[index] if index < starred else None


def self_attribute(expr: ast.expr, this: str) -> str | None:
    """``a`` when ``expr`` is ``<this>.a``."""
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == this:
        return expr.attr
    return None


def _forwarded(value: ast.expr | None, this: str, key: str, function: FunctionNode) -> str | None:
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr"
            and len(value.args) == 2 and not value.keywords and isinstance(value.args[1], ast.Name)
            and value.args[1].id == key):
        return None
    held = value.args[0]
    if isinstance(held, ast.Name) and held.id != this:
        assigned = [node.value for node in walk_shallow(function) if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == held.id for t in node.targets)]
        stores = [node for node in walk_shallow(function) if isinstance(node, ast.Name) and node.id == held.id
                  and isinstance(node.ctx, ast.Store)]
        return _from_dict(assigned[0], this) if len(assigned) == 1 and len(stores) == 1 else None
    return self_attribute(held, this)


def _from_dict(value: ast.expr, this: str) -> str | None:
    """``a`` for ``<this>.__dict__.get("a")`` or ``<this>.__dict__["a"]``."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get" and \
            self_attribute(value.func.value, this) == "__dict__" and value.args and \
            isinstance(value.args[0], ast.Constant) and isinstance(value.args[0].value, str):
        return value.args[0].value
    if isinstance(value, ast.Subscript) and self_attribute(value.value, this) == "__dict__" and \
            isinstance(value.slice, ast.Constant) and isinstance(value.slice.value, str):
        return value.slice.value
    return None


def _cannot_fall_off(body: list[ast.stmt]) -> bool:
    """The statements end in ``return`` or ``raise`` on every path (an ``if`` whose branches both do)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _cannot_fall_off(last.body) and _cannot_fall_off(last.orelse)
    return False


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def _is_self_attribute(target: ast.expr, this: str, attribute: str) -> bool:
    return self_attribute(target, this) == attribute
