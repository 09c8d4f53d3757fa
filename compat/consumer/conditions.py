"""Reads the conditions consumer code runs under into guard expressions (see ``compat.consumer.guards``).

Understands the forms downstream projects use to guard vLLM code: ``Version(vllm.__version__)``
comparisons (``packaging``, ``importlib.metadata.version("vllm")``, ``vllm.__version_tuple__``,
string ``startswith``), helpers the consumer defines for them (``def vllm_is_at_least(v): return
...``, inlined with the call's literal arguments), constants bound to such a test, and
``hasattr`` on a vLLM module or class, ``find_spec`` of a vLLM module, and ``"name" in
inspect.signature(vllm_fn).parameters``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compat.consumer.guards import (
    All,
    Any_,
    Const,
    GuardExpr,
    HasAttr,
    HasParam,
    Imports,
    Not,
    Opaque,
    Unevaluated,
    VersionCmp,
    VersionForm,
)
from compat.consumer.result import RefKind
from compat.consumer.values import Lit, Local, Obj, SelfOf, Sym, Value, VersionValue
from compat.consumer.version_helpers import (
    Distributions,
    Function,
    HelperRun,
    Installed,
    Params,
    Spec,
    TargetModule,
    Tup,
    Unknown,
    truth,
)
from compat.syntax import FunctionNode, called_name

if TYPE_CHECKING:
    from compat.consumer.index import ConsumerIndex

_PARSERS = {"Version", "parse", "parse_version", "LooseVersion", "StrictVersion"}
_DIST_VERSION = {"version"}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_MAX_INLINE_DEPTH = 8
_STRING_METHODS = {"replace", "lower", "upper", "strip"}


class ConditionReader:
    """Reads a test into a guard expression; ``resolve`` gives a name's value where the test is read."""

    def __init__(self, target: str, index: ConsumerIndex, resolve: Callable[[ast.expr], Value]) -> None:
        self.target = target
        self.index = index
        self.resolve = resolve
        self._module_values: dict[tuple[str, str], Any] = {}

    def read(self, node: ast.expr, env: dict[str, Any] | None = None, depth: int = 0) -> GuardExpr:
        return truth(self.value(node, env or {}, depth), ast.unparse(node))

    def value(self, node: ast.expr, env: dict[str, Any], depth: int = 0) -> Any:
        if isinstance(node, ast.Constant):
            return Lit(node.value)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(e, ast.Constant) for e in node.elts):
            return Lit(tuple(e.value for e in node.elts if isinstance(e, ast.Constant)))
        if isinstance(node, ast.Dict) and node.keys and all(isinstance(k, ast.Constant) for k in node.keys):
            return Lit(tuple(k.value for k in node.keys if isinstance(k, ast.Constant)))  # what ``in`` tests
        if isinstance(node, ast.Tuple):
            return Tup(tuple(self.value(e, env, depth) for e in node.elts))
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.Attribute) and node.attr in ("__version__", "__version_tuple__") and isinstance(
                node.value, ast.Name) and node.value.id == self.target:
            return VersionValue(VersionForm.TUPLE if node.attr.endswith("tuple__") else VersionForm.STRING)
        module = env.get("__module__")
        if module is not None:
            return self._helper_value(node, env, module, depth)
        if isinstance(node, ast.Attribute) and node.attr == "parameters" and isinstance(node.value, ast.Call) and \
                called_name(node.value) == "signature" and len(node.value.args) == 1:
            owner = self.resolve(node.value.args[0])  # ``inspect.signature(vllm_fn).parameters``
            return Params(owner.path) if isinstance(owner, Sym) else None
        if isinstance(node, (ast.Name, ast.Attribute)):
            if isinstance(node, ast.Attribute) and node.attr == "version" and isinstance(node.value, ast.Call):
                inner = self._dist_call(node.value)
                if inner is not None:
                    return inner
            found = self.resolve(node)
            return found if isinstance(found, (VersionValue, GuardExpr, Lit)) else None
        return self._operation(node, env, depth)

    def _operation(self, node: ast.expr, env: dict[str, Any], depth: int) -> Any:
        """``and``/``or``/``not``, comparisons and calls, wherever they are read."""
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

    def _helper_value(self, node: ast.expr, env: dict[str, Any], module: str, depth: int) -> Any:
        """An expression inside a helper of ``module``: its names are the helper's locals, then its module's."""
        if isinstance(node, ast.Name):
            return self.module_value(module, node.id, depth)
        if isinstance(node, ast.Attribute):
            base = self.value(node.value, env, depth)
            if isinstance(base, TargetModule) and node.attr in ("__version__", "__version_tuple__"):
                return VersionValue(VersionForm.TUPLE if node.attr.endswith("tuple__") else VersionForm.STRING)
            if isinstance(base, VersionValue) and node.attr in ("base_version", "public"):
                return VersionValue(VersionForm.VERSION)  # compared as its public release anyway
            if isinstance(node.value, ast.Call) and node.attr == "version":
                return self._dist_call(node.value)
            return Unknown(f"`{ast.unparse(node)}` is not understood")
        if isinstance(node, ast.Subscript):
            base = self.value(node.value, env, depth)
            key = self.value(node.slice, env, depth)
            if isinstance(base, Distributions) and base.target is None and key == Lit(self.target):
                return Distributions(self.target)
            if isinstance(base, Distributions) and base.target is not None:
                return Lit(base.target)
            return Unknown(f"`{ast.unparse(node)}` is not understood")
        if isinstance(node, ast.IfExp):
            body, orelse = self.value(node.body, env, depth), self.value(node.orelse, env, depth)
            return body if body == orelse else Unknown(f"`{ast.unparse(node)}` differs by its test")
        found = self._operation(node, env, depth)
        return Unknown(f"`{ast.unparse(node)}` is not understood") if found is None else found

    def module_of(self, qualname: str) -> str:
        return self.index.function_modules.get(qualname, qualname.rpartition(".")[0])

    def module_value(self, module: str, name: str, depth: int) -> Any:
        """A module-level name of a consumer module, as the default run binds it (read once)."""
        key = (module, name)
        if key not in self._module_values:
            self._module_values[key] = Unknown(f"{module}.{name} refers to itself")
            self._module_values[key] = self._read_module_name(module, name, depth)
        return self._module_values[key]

    def _read_module_name(self, module: str, name: str, depth: int) -> Any:
        qualname = f"{module}.{name}"
        if qualname in self.index.functions:
            return Function(qualname)
        source = self.index.modules.get(module)
        if source is None:
            return Unknown(f"{name} is not defined in the consumer")
        found: Any = Unknown(f"{name} is not a module-level name of {module}")
        for stmt in source.tree.body + [s for t in source.tree.body if isinstance(t, ast.Try) for s in t.body]:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                found = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name \
                    and stmt.value is not None:
                found = stmt.value
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)) and any(
                    (a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                found = stmt
        if isinstance(found, ast.expr):
            return self.value(found, {"__module__": module}, depth + 1)
        if isinstance(found, (ast.Import, ast.ImportFrom)):
            env: dict[str, Any] = {"__module__": module}
            HelperRun(self, depth).bind_import(found, env)
            return env.get(name, Unknown(f"{name} is not understood"))
        return found

    def _compare(self, node: ast.Compare, env: dict[str, Any], depth: int) -> GuardExpr:
        parts: list[GuardExpr] = []
        left = self.value(node.left, env, depth)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.value(right_node, env, depth)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(left, VersionValue) and isinstance(right, Lit) \
                    and isinstance(right.value, tuple) and right.value and \
                    all(isinstance(v, str) for v in right.value) and left.form != VersionForm.TUPLE:
                # ``vllm.__version__ in SUPPORTED`` (a literal list, set, tuple or a dict's keys)
                mode = VersionForm.STRING if left.form == VersionForm.STRING else VersionForm.VERSION
                listed = Any_(tuple(VersionCmp("==", str(v), mode) for v in right.value))
                parts.append(listed if isinstance(op, ast.In) else Not(listed))
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, Params) and isinstance(left, Lit) and \
                    isinstance(left.value, str):
                # ``"name" in inspect.signature(vllm_fn).parameters``
                takes = HasParam(right.symbol, left.value)
                parts.append(takes if isinstance(op, ast.In) else Not(takes))
            elif isinstance(op, (ast.Is, ast.IsNot)) and right == Lit(None) and isinstance(left, (Spec, HasAttr)):
                # ``find_spec("vllm.x") is not None``, ``getattr(vllm_obj, "a", None) is None``
                present = Imports((left.module,)) if isinstance(left, Spec) else left
                parts.append(present if isinstance(op, ast.IsNot) else Not(present))
            elif isinstance(op, (ast.Is, ast.IsNot)) and right == Lit(None) and _is_known(left):
                parts.append(Const((left == Lit(None)) == isinstance(op, ast.Is)))
            else:
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
            if left.form == VersionForm.TUPLE and isinstance(other, tuple):
                return VersionCmp(op, ".".join(str(p) for p in other), VersionForm.TUPLE)
            if left.form == VersionForm.STRING and not right.parsed and isinstance(other, str):
                return VersionCmp(op, other, VersionForm.STRING)
            if isinstance(other, str):
                return VersionCmp(op, other, VersionForm.VERSION)
        return Opaque(ast.unparse(node))

    def _dist_call(self, node: ast.Call) -> VersionValue | None:
        name = called_name(node)
        if name in ("get_distribution", "distribution") and node.args and isinstance(node.args[0], ast.Constant):
            if str(node.args[0].value).lower() == self.target:
                return VersionValue(VersionForm.STRING)
        return None

    def _call(self, node: ast.Call, env: dict[str, Any], depth: int) -> Any:
        func = node.func
        name = called_name(node)
        args = node.args
        if name in _PARSERS and len(args) == 1:
            inner = self.value(args[0], env, depth)
            if isinstance(inner, VersionValue):
                return VersionValue(VersionForm.VERSION)
            if isinstance(inner, Lit) and isinstance(inner.value, str):
                return Lit(inner.value, parsed=True)
            return None
        if name in _DIST_VERSION and len(args) == 1:
            distribution = self.value(args[0], env, depth)
            if isinstance(distribution, Lit) and str(distribution.value).lower().replace("_", "-") == self.target:
                return VersionValue(VersionForm.STRING)
        if name == "find_spec" and len(args) == 1:
            module = self.value(args[0], env, depth)
            if module == Lit(self.target):
                return Installed()
            if isinstance(module, Lit) and isinstance(module.value, str) and \
                    module.value.startswith(self.target + "."):
                return Spec(module.value)
            return None
        if name == "packages_distributions" and not args:
            return Distributions()
        if name in _STRING_METHODS and isinstance(func, ast.Attribute):
            base = self.value(func.value, env, depth)
            values = [self.value(a, env, depth) for a in args]
            if isinstance(base, Lit) and isinstance(base.value, str) and all(isinstance(v, Lit) for v in values):
                try:
                    return Lit(getattr(base.value, name)(*(v.value for v in values)))
                except (TypeError, ValueError):
                    return None
        if name == "startswith" and isinstance(func, ast.Attribute) and len(args) == 1:
            base = self.value(func.value, env, depth)
            prefix = self.value(args[0], env, depth)
            if isinstance(base, VersionValue) and base.form == VersionForm.STRING and isinstance(prefix, Lit):
                return VersionCmp("==", str(prefix.value), VersionForm.PREFIX)
            return None
        if name in ("hasattr", "getattr") and isinstance(func, ast.Name) and len(args) in (2, 3) and \
                (name == "getattr") == (len(args) == 3):
            owner = self.resolve(args[0])
            attr = self.value(args[1], env, depth)
            if not (isinstance(attr, Lit) and isinstance(attr.value, str)):
                return None
            if name == "getattr" and self.value(args[2], env, depth) != Lit(None):
                return None
            not_none = name == "getattr"  # only ``getattr(x, "a", None)``, tested against None below
            if isinstance(owner, Sym):
                return HasAttr(owner.path, attr.value, not_none=not_none)
            if isinstance(owner, SelfOf) and f"{owner.qualname}.{attr.value}" in self.index.functions:
                return Const(True)  # the consumer class defines the method itself
            if isinstance(owner, SelfOf) and self._sets_itself(owner.qualname, attr.value):
                return None  # ``self.shift_model = ...`` on some path of the consumer's own: its state, not the build's
            if isinstance(owner, SelfOf) and owner.base:
                return HasAttr(owner.base, attr.value, instance=True, not_none=not_none)
            if isinstance(owner, Obj) and owner.ref.kind == RefKind.SELF and owner.ref.symbol:
                return HasAttr(owner.ref.symbol, attr.value, instance=True, not_none=not_none)
            return None
        return self._inline_helper(node, env, depth)

    def _sets_itself(self, qualname: str, name: str) -> bool:
        """The consumer class, a consumer base or a consumer subclass of it defines or stores ``name`` itself."""
        info = self.index.classes.get(qualname)
        if info is None:
            return False
        if name in self.index.declared_names(info):
            return True
        return any(name in c.own_names() for c in self.index.classes.values()
                   if c is not info and info in self.index.lineage(c))

    def _inline_helper(self, node: ast.Call, env: dict[str, Any], depth: int) -> Any:
        """A consumer helper, run for the default build with the call's arguments (``compat.consumer.version_helpers``).
        When the run cannot tell its result and the helper reads the target's version, the condition is
        ``Unevaluated``: code under it is then neither run nor skipped for certain."""
        if depth >= _MAX_INLINE_DEPTH:
            return None
        target = self.value(node.func, env, depth) if "__module__" in env else self.resolve(node.func)
        qualname = target.qualname if isinstance(target, (Local, Function)) else None
        helper = self.index.functions.get(qualname or "")
        if helper is None or qualname is None:
            return None
        args = [self.value(a, env, depth) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {kw.arg: self.value(kw.value, env, depth) for kw in node.keywords if kw.arg}
        result = HelperRun(self, depth + 1).call(helper, qualname, args, kwargs)
        if isinstance(result, Unknown) and "__module__" not in env and _reads_target(helper, qualname, self.target):
            return Unevaluated(ast.unparse(node), result.reason)
        return result


def _is_known(value: Any) -> bool:
    """A value the run knows to be None or not (an ``is None`` test of it is decided)."""
    return isinstance(value, (Lit, Tup, Installed, Distributions, TargetModule, Function, VersionValue))


def _reads_target(helper: FunctionNode, qualname: str, target: str) -> bool:
    """The helper is about the target: named for it, or naming it in its body (``"vllm"``, ``vllm.__version__``)."""
    if target in qualname.rpartition(".")[2].lower():
        return True
    return any(isinstance(n, ast.Constant) and n.value == target or isinstance(n, ast.Name) and n.id == target
               for n in ast.walk(helper))
