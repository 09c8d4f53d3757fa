"""Whether a class of the build is an interface: a ``Protocol``, an ``ABC``, a class with abstract methods (or
methods that only raise ``NotImplementedError``), a mixin, or a marker base that declares nothing
(``class AttentionMetadata: pass``).

The consumer often holds an object by its declared type (``layer: AttentionLayer``, ``self.waiting:
RequestQueue``) while the object at runtime is one of the classes implementing it, which may well have an
attribute the interface does not declare (``FCFSRequestQueue`` is a ``deque``, so it has ``popleft``). A name
missing from an interface is therefore not a broken API but an unknown: the runtime class decides.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from compat.facts import Fact
from compat.facts.lineage import class_order
from compat.vllm.static import StaticSurface

_INTERFACE_BASES = frozenset({"Protocol", "ABC", "Generic"})


@dataclass(frozen=True)
class Interface:
    path: str
    interface: bool
    why: str = ""


def _read(surface: StaticSurface, path: str) -> Interface:
    order = class_order(surface, path)
    if not order:
        return Interface(path, False)
    model = order[0]
    if model.found.path.endswith("Mixin"):
        return Interface(path, True, f"{path} is a mixin: the class it is mixed into provides the rest")
    if all(isinstance(stmt, ast.Pass) or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
           for stmt in model.node.body):
        return Interface(path, True, f"{path} declares nothing: a base its subclasses fill in")
    for cls in order:
        node = cls.node
        for base in node.bases:
            name = ast.unparse(base.value if isinstance(base, ast.Subscript) else base).rsplit(".", 1)[-1]
            if name in ("Protocol", "ABC"):
                return Interface(path, True, f"{cls.found.path} is a {name}")
        for keyword in node.keywords:
            if keyword.arg == "metaclass" and ast.unparse(keyword.value).endswith("ABCMeta"):
                return Interface(path, True, f"{cls.found.path} has metaclass ABCMeta")
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    ast.unparse(d).endswith("abstractmethod") for d in stmt.decorator_list):
                return Interface(path, True, f"{cls.found.path}.{stmt.name} is abstract")
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _not_implemented(stmt):
                return Interface(path, True, f"{cls.found.path}.{stmt.name} raises NotImplementedError: its "
                                 "subclasses implement it")
    return Interface(path, False)


def _not_implemented(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The body is ``raise NotImplementedError`` (after a docstring): a base class's method left to subclasses."""
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


FACT = Fact("interface", _read)


@dataclass(frozen=True)
class AbstractMethods:
    """The abstract methods a class of the build leaves unimplemented, when ``ABCMeta`` enforces them (a
    subclass that does not define them cannot be instantiated: ``TypeError: Can't instantiate abstract
    class``); empty for a class that is not an ``ABC``."""

    path: str
    methods: tuple[str, ...] = ()


def _read_abstract(surface: StaticSurface, path: str) -> AbstractMethods:
    order = class_order(surface, path)
    if not order:
        return AbstractMethods(path)
    enforced = any(ast.unparse(b).rsplit(".", 1)[-1] == "ABC" for cls in order for b in cls.node.bases) or any(
        k.arg == "metaclass" and ast.unparse(k.value).endswith("ABCMeta") for cls in order for k in cls.node.keywords)
    if not enforced:
        return AbstractMethods(path)
    return AbstractMethods(path, tuple(sorted(_left_open(order, _abstract))))


def _abstract(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d).endswith("abstractmethod") for d in function.decorator_list)


def _left_open(order: list, test) -> set[str]:
    """The names whose most derived definition along ``order`` (a method resolution order) is a def that passes
    ``test``, as Python resolves them."""
    found: set[str] = set()
    for cls in reversed(order):
        for stmt in cls.node.body:
            names = [stmt.name] if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
                [t.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]) if isinstance(t, ast.Name)]
            for name in names:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and test(stmt):
                    found.add(name)
                else:
                    found.discard(name)
    return found


ABSTRACT_METHODS = Fact("abstract-methods", _read_abstract)


@dataclass(frozen=True)
class Hooks:
    """The methods a class of the build leaves to its subclasses without ``ABCMeta`` enforcing it: the most
    derived definition only raises ``NotImplementedError``, or is ``@abstractmethod`` on a class that is not an
    ``ABC`` (calling it on a subclass that does not define it fails then, not at construction)."""

    path: str
    methods: tuple[str, ...] = ()


def _read_hooks(surface: StaticSurface, path: str) -> Hooks:
    order = class_order(surface, path)
    if not order:
        return Hooks(path)
    hooks = _left_open(order, lambda f: _not_implemented(f) or _abstract(f))
    return Hooks(path, tuple(sorted(hooks - set(_read_abstract(surface, path).methods))))


HOOKS = Fact("hooks", _read_hooks)
