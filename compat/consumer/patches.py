"""A consumer function installed as a model's forward: what it does with the model, read from its body."""

from __future__ import annotations

import ast

from compat.consumer.index import ConsumerIndex
from compat.consumer.record import ForwardReplacement
from compat.consumer.result import ModelPatch, SelfUse
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
                      tuple(layer_calls), replacement.code)
