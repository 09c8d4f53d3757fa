"""A consumer function installed as a model's forward: what it does with the model, read from its body."""

from __future__ import annotations

import ast

from compat.consumer.index import ConsumerIndex
from compat.consumer.record import ForwardReplacement
from compat.consumer.result import Captured, ModelPatch, SelfUse
from compat.location import Location
from compat.syntax import call_shape


def model_patch(index: ConsumerIndex, replacement: ForwardReplacement) -> ModelPatch:
    """What a replacement forward does with the model it is bound to, read from its body."""
    node = index.functions[replacement.function]
    relpath = index.function_files[replacement.function]
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    self_name = params[0] if params else "self"
    uses: list[SelfUse] = []
    layer_names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.For, ast.comprehension)) and any(
                isinstance(n, ast.Attribute) and n.attr == "layers" and isinstance(n.value, ast.Name)
                and n.value.id == self_name for n in ast.walk(sub.iter)):
            target_node = sub.target
            if isinstance(target_node, ast.Tuple) and target_node.elts:
                target_node = target_node.elts[-1]
            if isinstance(target_node, ast.Name):
                layer_names.add(target_node.id)
    called = set()
    layer_calls: list[SelfUse] = []
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        func = sub.func
        shape = call_shape(sub)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == self_name:
            uses.append(SelfUse(func.attr, Location(relpath, sub.lineno), shape))
            called.add(id(func))
        elif isinstance(func, ast.Name) and func.id in layer_names:
            layer_calls.append(SelfUse(func.id, Location(relpath, sub.lineno), shape))
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == self_name
                and id(sub) not in called and isinstance(sub.ctx, ast.Load)):
            uses.append(SelfUse(sub.attr, Location(relpath, sub.lineno)))
    uses.sort(key=lambda u: (u.location.line, u.name))
    return ModelPatch(replacement.function, replacement.location, replacement.target, Location(relpath, node.lineno),
                      tuple(params[1:]), node.args.kwarg is not None, len(node.args.defaults), tuple(uses),
                      tuple(layer_calls), replacement.code, _captures(node, layer_names, relpath),
                      node.args.vararg is not None)


SAME_VALUES = frozenset({"clone", "detach", "contiguous", "float", "to", "cpu"})
"""Methods a kept value may be wrapped in without changing what it holds."""


def summed_outputs(value: ast.expr, outputs: list[str]) -> tuple[int, ...] | None:
    """Which of ``outputs`` (the names a layer call's result is unpacked into) ``value`` adds up, or None when it is
    not such a sum (``(hidden_states + residual).clone()`` is ``(0, 1)``)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in SAME_VALUES:
        value = value.func.value
    if isinstance(value, ast.Name) and value.id in outputs:
        return (outputs.index(value.id),)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        left, right = summed_outputs(value.left, outputs), summed_outputs(value.right, outputs)
        if left is not None and right is not None and not set(left) & set(right):
            return tuple(sorted(left + right))
    return None


def _captures(node: ast.FunctionDef | ast.AsyncFunctionDef, layer_names: set[str], relpath: str) -> tuple[
        Captured, ...]:
    """``a, b = layer(...)`` in a loop over the layers, and each ``<list>.append(<value>)`` in that loop."""
    out = []
    for loop in ast.walk(node):
        if not isinstance(loop, ast.For):
            continue
        unpacked = next((n.targets[0] for n in ast.walk(loop) if isinstance(n, ast.Assign)
                         and isinstance(n.targets[0], ast.Tuple) and isinstance(n.value, ast.Call)
                         and isinstance(n.value.func, ast.Name) and n.value.func.id in layer_names), None)
        if not isinstance(unpacked, ast.Tuple):
            continue
        names = [ast.unparse(e) for e in unpacked.elts]
        for call in ast.walk(loop):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
                    and len(call.args) == 1:
                out.append(Captured(ast.unparse(call.args[0]), tuple(names), summed_outputs(call.args[0], names),
                                    Location(relpath, call.lineno)))
    return tuple(out)
