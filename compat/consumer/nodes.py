"""Pure helpers over ``ast`` nodes for the consumer walk (``compat.consumer.visitor``): what a node is or says,
with no state of the walk."""

from __future__ import annotations

import ast
from typing import TypeGuard

RPC_METHODS = ("collective_rpc",)
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
TYPING_GENERICS = frozenset({"Generic", "Protocol", "Type", "type", "Optional", "Union", "List", "Dict", "Tuple",
                             "Sequence", "Mapping", "Iterable", "Callable"})
CONSTRUCTION = frozenset({"__init__", "__new__", "__init_subclass__", "__class_getitem__", "__post_init__"})


def conjuncts(test: ast.expr) -> list[ast.expr]:
    """``a and b and c`` -> [a, b, c]; anything else -> [test]."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [part for value in test.values for part in conjuncts(value)]
    return [test]


def catches_by_name(handler: ast.ExceptHandler, name: str) -> bool:
    """The handler catches ``name`` by name (bare ``except`` and ``Exception`` hide more than a check would)."""
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id == name or isinstance(t, ast.Attribute) and t.attr == name
               for t in types if t is not None)


def last_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def catches_import_error(handler: ast.ExceptHandler) -> bool:
    """The handler catches an import failure (bare ``except`` and ``Exception`` included)."""
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((isinstance(n, ast.Name) and n.id in IMPORT_ERRORS) or (
        isinstance(n, ast.Attribute) and n.attr in IMPORT_ERRORS) for n in names)


def is_class_like(path: str) -> bool:
    """Attribute access on a vLLM name is a member access when the name is not a module path."""
    last = path.rsplit(".", 1)[-1]
    return bool(last) and (last[0].isupper() or last.startswith("_") and last[1:2].isupper())

def is_super(node: ast.expr) -> TypeGuard[ast.Call]:
    """``super()`` (or ``super(Cls, self)``)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def none_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def checked_attribute(check: ast.expr) -> tuple[ast.expr, str] | None:
    """``(x, "a")`` for ``hasattr(x, "a")``, ``getattr(x, "a", d)``, ``getattr(x, "a", None) is not None`` and
    ``callable(getattr(x, "a", None))``; None for any other test."""
    if isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], (ast.IsNot, ast.NotEq)) \
            and isinstance(check.comparators[0], ast.Constant) and check.comparators[0].value is None:
        check = check.left
    if isinstance(check, ast.Call) and isinstance(check.func, ast.Name) and check.func.id == "callable" and \
            len(check.args) == 1:
        check = check.args[0]
    if not (isinstance(check, ast.Call) and isinstance(check.func, ast.Name) and len(check.args) >= 2
            and isinstance(check.args[1], ast.Constant) and isinstance(check.args[1].value, str)):
        return None
    if (check.func.id, len(check.args)) in (("hasattr", 2), ("getattr", 3)):
        return check.args[0], check.args[1].value
    return None


def annotation_target(annotation: ast.expr) -> ast.expr | None:
    """What an annotation names: a string annotation parsed, ``X | None`` and ``Optional[X]`` as ``X``; None for a
    string that is not an expression."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [s for s in (annotation.left, annotation.right)
                 if not (isinstance(s, ast.Constant) and s.value is None)]
        annotation = sides[0] if len(sides) == 1 else annotation
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, (ast.Name, ast.Attribute)):
        head = annotation.value.id if isinstance(annotation.value, ast.Name) else annotation.value.attr
        if head == "Optional":
            annotation = annotation.slice
    return annotation


def rpc_method(node: ast.Call) -> tuple[str, str | None] | None:
    """The method a ``collective_rpc(...)`` call names, and a note when the name is computed (``?``); None when a
    callable is sent to the workers (nothing named to check)."""
    method_node = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "method"), None)
    if isinstance(method_node, ast.Constant) and isinstance(method_node.value, str):
        return method_node.value, None
    if isinstance(method_node, (ast.JoinedStr, ast.Name)):
        return "?", f"method name is computed ({ast.unparse(method_node)}), not a literal"
    return None
