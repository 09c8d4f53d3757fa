"""Reads the conditions consumer code runs under into guard expressions (see ``compat.consumer.guards``).

Understands the forms downstream projects use to guard vLLM code: ``Version(vllm.__version__)``
comparisons (``packaging``, ``importlib.metadata.version("vllm")``, ``vllm.__version_tuple__``,
string ``startswith``), helpers the consumer defines for them (``def vllm_is_at_least(v): return
...``, inlined with the call's literal arguments), constants bound to such a test, and
``hasattr`` on a vLLM module or class.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from compat.consumer.guards import All, Any_, Const, GuardExpr, HasAttr, Not, Opaque, VersionCmp
from compat.consumer.values import Lit, Local, Sym, Value, VersionValue
from compat.syntax import FunctionNode, called_name

_PARSERS = {"Version", "parse", "parse_version", "LooseVersion", "StrictVersion"}
_DIST_VERSION = {"version"}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_MAX_INLINE_DEPTH = 4


def _own_nodes(function: FunctionNode) -> list[ast.AST]:
    """The nodes of ``function``'s body, not those of functions or classes nested in it."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return out


class ConditionReader:
    """Reads a test into a guard expression; ``resolve`` gives a name's value where the test is read."""

    def __init__(self, target: str, functions: Mapping[str, FunctionNode],
                 resolve: Callable[[ast.expr], Value]) -> None:
        self.target = target
        self.functions = functions
        self.resolve = resolve

    def read(self, node: ast.expr, env: dict[str, Any] | None = None, depth: int = 0) -> GuardExpr:
        value = self.value(node, env or {}, depth)
        if isinstance(value, GuardExpr):
            return value
        if isinstance(value, Lit) and isinstance(value.value, bool):
            return Const(value.value)
        return Opaque(ast.unparse(node))

    def value(self, node: ast.expr, env: dict[str, Any], depth: int = 0) -> Any:
        if isinstance(node, ast.Constant):
            return Lit(node.value)
        if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts):
            return Lit(tuple(e.value for e in node.elts))
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.Attribute) and node.attr in ("__version__", "__version_tuple__") and isinstance(
                node.value, ast.Name) and node.value.id == self.target:
            return VersionValue("tuple" if node.attr.endswith("tuple__") else "string")
        if isinstance(node, (ast.Name, ast.Attribute)):
            if isinstance(node, ast.Attribute) and node.attr == "version" and isinstance(node.value, ast.Call):
                inner = self._dist_call(node.value)
                if inner is not None:
                    return inner
            found = self.resolve(node)
            return found if isinstance(found, (VersionValue, GuardExpr, Lit)) else None
        if isinstance(node, ast.BoolOp):
            items = tuple(self.read(v, env, depth) for v in node.values)
            return All(items) if isinstance(node.op, ast.And) else Any_(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return Not(self.read(node.operand, env, depth))
        if isinstance(node, ast.Compare):
            return self._compare(node, env, depth)
        if isinstance(node, ast.Call):
            return self._call(node, env, depth)
        return None

    def _compare(self, node: ast.Compare, env: dict[str, Any], depth: int) -> GuardExpr:
        parts: list[GuardExpr] = []
        left = self.value(node.left, env, depth)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.value(right_node, env, depth)
            parts.append(self._pair(left, _OPS.get(type(op)), right, node))
            left = right
        return parts[0] if len(parts) == 1 else All(tuple(parts))

    def _pair(self, left: Any, op: str | None, right: Any, node: ast.expr) -> GuardExpr:
        if op is None:
            return Opaque(ast.unparse(node))
        if isinstance(right, VersionValue) and isinstance(left, Lit):
            left, right, op = right, left, _FLIP[op]
        if isinstance(left, VersionValue) and isinstance(right, Lit):
            other = right.value
            if left.form == "tuple" and isinstance(other, tuple):
                return VersionCmp(op, ".".join(str(p) for p in other), "tuple")
            if left.form == "string" and not right.parsed and isinstance(other, str):
                return VersionCmp(op, other, "string")
            if isinstance(other, str):
                return VersionCmp(op, other, "version")
        return Opaque(ast.unparse(node))

    def _dist_call(self, node: ast.Call) -> VersionValue | None:
        name = called_name(node)
        if name in ("get_distribution", "distribution") and node.args and isinstance(node.args[0], ast.Constant):
            if str(node.args[0].value).lower() == self.target:
                return VersionValue("string")
        return None

    def _call(self, node: ast.Call, env: dict[str, Any], depth: int) -> Any:
        func = node.func
        name = called_name(node)
        args = node.args
        if name in _PARSERS and len(args) == 1:
            inner = self.value(args[0], env, depth)
            if isinstance(inner, VersionValue):
                return VersionValue("version")
            if isinstance(inner, Lit) and isinstance(inner.value, str):
                return Lit(inner.value, parsed=True)
            return None
        if name in _DIST_VERSION and len(args) == 1 and isinstance(args[0], ast.Constant):
            if str(args[0].value).lower() == self.target:
                return VersionValue("string")
        if name == "startswith" and isinstance(func, ast.Attribute) and len(args) == 1:
            base = self.value(func.value, env, depth)
            prefix = self.value(args[0], env, depth)
            if isinstance(base, VersionValue) and base.form == "string" and isinstance(prefix, Lit):
                return VersionCmp("==", str(prefix.value), "prefix")
            return None
        if name == "hasattr" and isinstance(func, ast.Name) and len(args) == 2:
            owner = self.resolve(args[0])
            attr = self.value(args[1], env, depth)
            if isinstance(owner, Sym) and isinstance(attr, Lit) and isinstance(attr.value, str):
                return HasAttr(owner.path, attr.value)
            return None
        return self._inline_helper(node, env, depth)

    def _inline_helper(self, node: ast.Call, env: dict[str, Any], depth: int) -> Any:
        """A consumer helper whose body is one ``return <test>``, read with the call's arguments."""
        if depth >= _MAX_INLINE_DEPTH:
            return None
        target = self.resolve(node.func)
        if not isinstance(target, Local):
            return None
        helper = self.functions.get(target.qualname)
        if helper is None:
            return None
        body = [s for s in helper.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
        defaults = helper.args.defaults
        inner_env: dict[str, Any] = {}
        for index, param in enumerate(params):
            default_index = index - (len(params) - len(defaults))
            if default_index >= 0:
                inner_env[param] = self.value(defaults[default_index], env, depth)
        for param, arg in zip(params, node.args):
            inner_env[param] = self.value(arg, env, depth)
        for kw in node.keywords:
            if kw.arg:
                inner_env[kw.arg] = self.value(kw.value, env, depth)
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            return self.value(body[0].value, inner_env, depth + 1)
        return self._helper_body(helper, inner_env, depth + 1)

    def _helper_body(self, helper: FunctionNode, env: dict[str, Any], depth: int) -> Any:
        """A helper of several statements (``vllm_version_is``: an environment override, then ``try: return
        Version(v) == Version(target)``), read for the build as it runs by default: a local that one of its
        assignments binds to the build's version is that version (overrides are not the default), and the
        helper's test is what its returns agree on. Anything else: not understood (None)."""
        nodes = [n for n in _own_nodes(helper)]
        for stmt in nodes:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                value = self.value(stmt.value, env, depth)
                if isinstance(value, VersionValue):
                    env[stmt.targets[0].id] = value
        returns = {self.read(s.value, dict(env), depth) for s in nodes if isinstance(s, ast.Return) and s.value}
        found = [r for r in returns if not isinstance(r, Opaque)]
        return found[0] if len(found) == 1 and len(returns) == 1 else None
