"""The walk over one consumer module: imports, guards, classes, functions, assignments, and the value of each
expression in them (see ``compat.consumer.scan``).

One walk returns a ``ModuleRecord``. The tree scan walks every module more than once, so that ``self.x``
assigned in one method (or module) is known in all; each walk records afresh, and the last one counts.
``ModuleVisitor`` is the walk: its state (scopes, guards in force, the enclosing classes), the statements and the
expressions; what needs no state of the walk is a pure function of ``compat.consumer.nodes``.
"""

from __future__ import annotations

import ast
import traceback
from enum import StrEnum
from typing import cast

from compat.consumer.conditions import ConditionReader
from compat.consumer.guards import All, GuardExpr, Imports, Not, VersionForm, involves_target, render, simplify
from compat.consumer.index import ConsumerIndex, ConsumerModule, IndexedClass
from compat.consumer.names import INDIRECT_CALLERS, Spread, binds_anywhere, literal_spread, read_function
from compat.consumer.nodes import (
    CONSTRUCTION,
    RPC_METHODS,
    TYPING_GENERICS,
    annotation_target,
    catches_by_name,
    catches_import_error,
    checked_attribute,
    conjuncts,
    is_class_like,
    is_super,
    last_name,
    none_literal,
    rpc_method,
)
from compat.consumer.record import ForwardReplacement, ModuleRecord
from compat.consumer.result import (
    Alias,
    ClassPatch,
    Fallback,
    Guard,
    HeldStore,
    ImportGate,
    Kind,
    PatchKind,
    Ref,
    RefKind,
    Replacement,
    ReplyUse,
    ReplyUseKind,
    TouchPoint,
)
from compat.consumer.values import (
    UNTYPED,
    ClassAttributes,
    Either,
    Lit,
    Local,
    Obj,
    Reply,
    Scope,
    ScopeKind,
    SelfOf,
    Sym,
    Value,
    VersionValue,
)
from compat.consumer.version_helpers import HelperRun, Unknown
from compat.location import Location
from compat.signature import CallShape
from compat.syntax import absolute_module, call_shape, called_name, from_def, is_type_checking


class BaseOrigin(StrEnum):
    """Whose class a base of a consumer class is, as ``super()`` searches the bases (``ModuleVisitor.base_entry``)."""

    LOCAL = "local"
    """The consumer's own class (by qualname)."""
    VLLM = "vllm"
    """A class of the target (vLLM), by path."""
    TYPING = "typing"
    """A typing generic, ``object`` or ``ABC``: defines nothing ``super()`` could reach."""
    OTHER = "other"
    """Another library's class, which may define the name: the search stops there."""


def walk_module(index: ConsumerIndex, known: ClassAttributes, source: ConsumerModule, target: str) -> ModuleRecord:
    """Walk one module once; ``known``: class attributes learnt so far (read, never changed)."""
    visitor = ModuleVisitor(index, known, source, target)
    visitor.visit_block(source.tree.body, top=True)
    return visitor.found


NOT_DYNAMIC = object()
"""``ModuleVisitor.dynamic_access``: the call is not one of the spellings it reads."""


class ModuleVisitor(ast.NodeVisitor):
    """One walk of one module: its state, the statements it visits and the value of each expression."""


    def __init__(self, index: ConsumerIndex, known: ClassAttributes, source: ConsumerModule, target: str) -> None:
        self.index = index
        self.known = known
        """Class attributes learnt before this walk (other modules, earlier passes); read only."""
        self.source = source
        self.target = target
        self.found = ModuleRecord()
        """What this walk found (``walk_module`` returns it)."""
        self.scopes: list[Scope] = [Scope(kind=ScopeKind.MODULE, qualname=source.module)]
        self.catching = 0
        """How many ``try`` statements with handlers the walk is inside."""
        self.guards: list[Guard] = []
        self.fallback: Fallback | None = None
        self.class_stack: list[IndexedClass] = []
        self.narrowing: list[tuple[str | None, str, str]] = []
        """Active checks for attributes: (receiver source or None for any, attribute, how it is checked)."""
        self.narrowed_refs: dict[Ref, str] = {}
        """Objects reached through an attribute the consumer checked with ``hasattr``: checked wherever they flow."""
        self.type_names: dict[str, Sym] = {}
        """vLLM names imported under ``if TYPE_CHECKING:``: not there at run time, but what annotations mean."""
        self.class_bases: dict[str, str] = {}
        """Consumer class -> the vLLM class it extends or patches (see ``SelfOf.base``)."""
        self.super_order: dict[str, tuple[tuple[BaseOrigin, str], ...]] = {}
        """Consumer class of this module -> its bases as written, read (see ``super_target``)."""
        self.conditions = ConditionReader(target, index, lambda node: self.eval(node, record=False))
        self.dict_builtin = not binds_anywhere(source.tree, "dict")
        """The module never binds ``dict``: ``dict(a=1)`` is the builtin's mapping (see ``spread``)."""

    # ---- bookkeeping -------------------------------------------------------------------
    def loc(self, node: ast.AST) -> Location:
        return Location(self.source.relpath, getattr(node, "lineno", 0))

    def code(self, node: ast.AST) -> str:
        line = getattr(node, "lineno", 0)
        lines = self.source.lines
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""

    def context(self) -> str:
        return self.scopes[-1].qualname

    def add(self, tp: TouchPoint) -> None:
        self.found.touchpoints.append(tp)

    def bind(self, name: str, value: Value) -> None:
        self.scopes[-1].names[name] = value

    def scope_of(self, name: str) -> Scope | None:
        """The scope whose binding of ``name`` the code here sees (a class body is not seen from its methods)."""
        for scope in reversed(self.scopes):
            if scope.kind == ScopeKind.CLASS and scope is not self.scopes[-1]:
                continue
            if name in scope.names:
                return scope
        return None

    def lookup(self, name: str) -> Value:
        scope = self.scope_of(name)
        return scope.names[name] if scope is not None else None

    def is_target(self, module: str) -> bool:
        return module == self.target or module.startswith(self.target + ".")

    # ---- class attributes ----------------------------------------------------------------
    def has_attribute(self, qualname: str, name: str) -> bool:
        return self.found.attributes.has(qualname, name) or self.known.has(qualname, name)

    def attribute(self, qualname: str, name: str) -> Value:
        learnt = self.found.attributes
        return learnt.get(qualname, name) if learnt.has(qualname, name) else self.known.get(qualname, name)

    def is_defined(self, info: IndexedClass, name: str) -> bool:
        """The class (or a base) defines ``name`` in its source, or the walk has seen it assigned."""
        return name in self.index.declared_names(info) or any(
            self.has_attribute(c.qualname, name) for c in self.index.lineage(info))

    def assign(self, target: ast.expr, value: Value, source: ast.expr | None = None) -> None:
        """Bind ``target`` to ``value``; ``source``: the expression assigned, when there is one (an attribute of
        ``self`` given something the walk cannot type is then known to be untyped, not left as it was)."""
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value)
            # ``Cls.m = wrap(Cls.m)``: made from vLLM's own, which may still run
            wraps = isinstance(base, Sym) and isinstance(source, ast.Call) and any(
                self.eval(arg, record=False) == Sym(f"{base.path}.{target.attr}") for arg in source.args)
            if isinstance(base, Sym) and isinstance(value, Local):
                # `vllm.mod.f = my_f`, `VllmClass.__init__ = my_init`: the consumer's code runs where vLLM's did.
                self.found.class_patches.append(ClassPatch(base.path, value.qualname, (target.attr,),
                                                           self.loc(target), PatchKind.REPLACE, wraps=wraps))
                function = self.index.functions.get(value.qualname)
                self.replacement_touch(target, base.path, target.attr, Replacement(
                    value.qualname, PatchKind.REPLACE, from_def(function) if function is not None else None))
            elif isinstance(base, Sym) and source is not None:
                # ``vllm.config.current_platform = my_platform``: a value, not code, set on a vLLM module or class;
                # the name is the consumer's where vLLM lacks it (an import of it then finds it).
                self.found.class_patches.append(ClassPatch(base.path, ast.unparse(source)[:80], (target.attr,),
                                                           self.loc(target), PatchKind.PATCH, wraps=wraps))
            if isinstance(base, SelfOf):
                info = self.index.classes.get(base.qualname)
                if info is not None and value is not None:
                    self.found.attributes.set(info.qualname, target.attr, value)
                elif info is not None and source is not None and not none_literal(source):
                    self.found.attributes.set(info.qualname, target.attr, UNTYPED)
                if base.worker and info is not None and not self.is_defined(info, target.attr):
                    self.attribute_touch(target, Ref(RefKind.WORKER), target.attr, store=True)
            elif isinstance(base, Obj):
                self.attribute_touch(target, base.ref, target.attr, store=True)
            elif isinstance(target.value, ast.Attribute) and not isinstance(base, (Sym, SelfOf)):
                self.found.held_stores.append(HeldStore(target.value.attr, target.attr, self.loc(target)))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.assign(element.value if isinstance(element, ast.Starred) else element, None)
        else:
            self.visit_expr(target, store=True)

    # ---- statements -----------------------------------------------------------------------

    def consumer_value(self, module: str, name: str) -> Value:
        qualname = self.index.definition(module, name)
        return Local(qualname) if qualname is not None else None

    def visit_block(self, body: list[ast.stmt], top: bool = False) -> None:
        """Walk a block. ``top``: the module's own statements, each walked on its own, so that one the walk
        cannot read (a scan bug) is a failure on record and the rest of the module is still walked."""
        pushed = 0
        for stmt in body:
            if not top:
                self.visit(stmt)
            else:
                try:
                    self.visit(stmt)
                except Exception as exc:  # noqa: BLE001 - reported as the scan's error finding, with its traceback
                    self.found.failures.append((self.loc(stmt), f"{type(exc).__name__}: {exc}",
                                                traceback.format_exc()))
            # `if not new_enough: return` guards everything after it in the block.
            if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(
                    stmt.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                expr = self.conditions.read(stmt.test)
                if involves_target(expr):
                    self.guards.append(Guard(expr, False, ast.unparse(stmt.test), self.loc(stmt)))
                    pushed += 1
        if pushed:
            del self.guards[-pushed:]

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self.is_target(alias.name):
                continue
            self.add(TouchPoint(Kind.IMPORT, alias.name, self.loc(node), self.code(node),
                                guards=tuple(self.guards), fallback=self.fallback, context=self.context()))
            if alias.asname:
                self.bind(alias.asname, Sym(alias.name))
            else:
                top = alias.name.split(".")[0]
                self.bind(top, Sym(top))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = self._absolute(node)
        if module is None:
            return
        if not self.is_target(module):
            for alias in node.names:
                self.bind(alias.asname or alias.name, self.consumer_value(module, alias.name))
            return
        for alias in node.names:
            if alias.name == "*":
                self.add(TouchPoint(Kind.IMPORT, f"{module}.*", self.loc(node), self.code(node),
                                    guards=tuple(self.guards), fallback=self.fallback, context=self.context(),
                                    note="star import: the names it brings in cannot be listed statically"))
                continue
            path = f"{module}.{alias.name}"
            self.add(TouchPoint(Kind.IMPORT, path, self.loc(node), self.code(node), guards=tuple(self.guards),
                                fallback=self.fallback, context=self.context()))
            value: Value = Sym(path)
            if alias.name in ("__version__", "__version_tuple__"):
                value = VersionValue(VersionForm.TUPLE if alias.name.endswith("tuple__") else VersionForm.STRING)
            self.bind(alias.asname or alias.name, value)

    def _absolute(self, node: ast.ImportFrom) -> str | None:
        if not node.level:
            return node.module
        source = self.source
        return absolute_module(source.module, source.relpath.endswith("__init__.py"), node.level, node.module)

    def visit_If(self, node: ast.If) -> None:
        expr = self.conditions.read(node.test)
        self.visit_expr(node.test)
        if involves_target(expr):
            text = ast.unparse(node.test)
            names = self.scopes[-1].names
            before = dict(names)
            self.guards.append(Guard(expr, True, text, self.loc(node)))
            self.visit_narrowed(node.test, node.body)
            taken = dict(names)
            self.guards[-1] = Guard(expr, False, text, self.loc(node))
            self.visit_block(node.orelse)
            self.guards.pop()
            # A name the two branches bind to two vLLM names (an import that moved) is one or the other.
            for name, value in list(names.items()):
                other = taken.get(name)
                if isinstance(value, Sym) and isinstance(other, Sym) and value != other and (
                        other is not before.get(name)):
                    names[name] = Either(((other, expr, text), (value, Not(expr), f"not ({text})")), self.loc(node))
        elif is_type_checking(node.test):
            self.note_type_imports(node.body)
            self.visit_block(node.orelse)
        else:
            self.visit_narrowed(node.test, node.body)
            self.visit_block(node.orelse)

    def note_type_imports(self, body: list[ast.stmt]) -> None:
        """``if TYPE_CHECKING: from vllm.config import VllmConfig``: annotations naming it mean vLLM's class."""
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom):
                module = self._absolute(stmt)
                if module is not None and self.is_target(module):
                    for alias in stmt.names:
                        self.type_names[alias.asname or alias.name] = Sym(f"{module}.{alias.name}")

    def visit_narrowed(self, test: ast.expr, body: list[ast.stmt]) -> None:
        """``body`` under ``test``'s narrowing: ``hasattr(x, "a")`` (the consumer checks before it uses ``x.a``)
        and ``isinstance(x, VllmClass)`` (``x`` is of that class here)."""
        pushed, rebound = 0, []
        for check in conjuncts(test):
            if self.narrow(check):
                pushed += 1
                continue
            if not (isinstance(check, ast.Call) and not check.keywords and len(check.args) == 2
                    and isinstance(check.func, ast.Name)):
                continue
            subject, what = check.args
            if check.func.id == "isinstance" and isinstance(subject, ast.Name):
                cls = self.eval(what, record=False)
                if isinstance(cls, Sym) and is_class_like(cls.path):
                    rebound.append((subject.id, self.lookup(subject.id)))
                    self.bind(subject.id, Obj(Ref.of_symbol(cls.path).called()))
        self.visit_block(body)
        for name, value in reversed(rebound):
            self.bind(name, value)
        del self.narrowing[len(self.narrowing) - pushed:]

    def visit_Try(self, node: ast.Try | ast.TryStar) -> None:
        catches = [h for h in node.handlers if catches_import_error(h)]
        primary = self._imported_symbols(node.body)
        if not (catches and primary):
            guarded = [h for h in node.handlers if catches_by_name(h, "AttributeError")]
            if guarded:
                self.narrowing.append((None, "", f"try/except AttributeError at {self.loc(guarded[0])}"))
            self.catching += bool(node.handlers)
            unbound = dict(self.scopes[-1].names)
            try:
                self.visit_block(node.body)
            finally:
                self.catching -= bool(node.handlers)
            if guarded:
                self.narrowing.pop()
            tests = {name: bound for name, bound in self.scopes[-1].names.items()
                     if isinstance(bound, (GuardExpr, VersionValue)) and bound is not unbound.get(name)}
            for h in node.handlers:
                self.visit_block(h.body)
            # ``try: HAS = find_spec("vllm.x") is not None`` / ``except ModuleNotFoundError: HAS = False``: a test
            # of the build bound in the body keeps its value after the handlers, which run only where the test
            # itself raised (a missing parent package): the build decides the name, not the fallback.
            self.scopes[-1].names.update(tests)
            self.visit_block(node.orelse)
            self.visit_block(node.finalbody)
            return
        handler = catches[0]
        provided = tuple(sorted({a.asname or a.name for s in ast.walk(ast.Module(handler.body, []))
                                 if isinstance(s, (ast.Import, ast.ImportFrom)) for a in s.names}))
        outer = self.fallback
        self.fallback = Fallback(self.loc(handler), provided, self.code(handler))
        self.catching += 1
        try:
            self.visit_block(node.body)
        finally:
            self.catching -= 1
        self.fallback = outer
        taken = Imports(primary)
        first = dict(self.scopes[-1].names)
        for h in node.handlers:
            if h not in catches:
                self.visit_block(h.body)
                continue
            self.guards.append(Guard(Not(taken), True, f"import of {', '.join(primary)} fails", self.loc(h)))
            self.visit_block(h.body)
            self.guards.pop()
        # A name bound both by the import and by its fallback is one or the other, depending on the build.
        names = self.scopes[-1].names
        for name, value in list(names.items()):
            before = first.get(name)
            if before is not None and value is not before and isinstance(value, Sym) and isinstance(before, Sym):
                names[name] = Either(((before, taken, f"import of {', '.join(primary)} succeeds"),
                                      (value, Not(taken), f"import of {', '.join(primary)} fails")),
                                     self.loc(handler))
        self.visit_block(node.orelse)
        self.visit_block(node.finalbody)

    def _imported_symbols(self, body: list[ast.stmt]) -> tuple[str, ...]:
        found: list[str] = []
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom):
                module = self._absolute(stmt)
                if module and self.is_target(module):
                    found += [f"{module}.{a.name}" for a in stmt.names if a.name != "*"]
            elif isinstance(stmt, ast.Import):
                found += [a.name for a in stmt.names if self.is_target(a.name)]
            elif isinstance(stmt, (ast.Expr, ast.Assign)) and isinstance(stmt.value, ast.Call) and \
                    called_name(stmt.value) == "import_module" and len(stmt.value.args) == 1 and \
                    isinstance(stmt.value.args[0], ast.Constant) and isinstance(stmt.value.args[0].value, str) \
                    and self.is_target(stmt.value.args[0].value):
                found.append(stmt.value.args[0].value)  # ``importlib.import_module("vllm.x")``
        return tuple(found)

    def visit_TryStar(self, node: ast.TryStar) -> None:
        self.visit_Try(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for deco in node.decorator_list:
            self.visit_expr(deco)
        for base in node.bases:
            self.visit_expr(base)
        qualname = f"{self.context()}.{node.name}"
        info = self.index.classes.get(qualname)
        others: tuple[str, ...] = ()
        target, kind = self.patched_target(node), PatchKind.PATCH
        if target is None:
            bases = self.vllm_bases(node)
            target, kind, others = (bases[0] if bases else None), PatchKind.SUBCLASS, tuple(bases[1:])
        if info is not None:
            self.super_order[qualname] = tuple(self.base_entry(base) for base in node.bases)
        if target is not None and info is not None:
            self.class_bases[qualname] = target
            names = info.own_names() if kind == PatchKind.PATCH else self.index.declared_names(info)
            self.found.class_patches.append(ClassPatch(target, qualname, tuple(sorted(names)), self.loc(node), kind,
                                                       others))
            for name, method in info.methods.items():
                if kind == PatchKind.SUBCLASS and name in CONSTRUCTION:
                    continue  # the consumer builds its subclass itself, with its own arguments
                self.replacement_touch(method, target, name, Replacement(f"{qualname}.{name}", kind, from_def(method)))
        self.bind(node.name, Local(qualname))
        if info is not None:
            self.class_stack.append(info)
        self.scopes.append(Scope(kind=ScopeKind.CLASS, qualname=qualname))
        self.visit_block(node.body)
        self.scopes.pop()
        if info is not None:
            self.class_stack.pop()

    def base_entry(self, base: ast.expr) -> tuple[BaseOrigin, str]:
        """One base as ``super()`` sees it: the consumer's class by qualname, vLLM's by path, a typing generic or
        ``object`` by name, or another library's by its text."""
        generic = base.value if isinstance(base, ast.Subscript) else base
        value = self.eval(generic, record=False)
        if isinstance(value, Local):
            return BaseOrigin.LOCAL, value.qualname
        if isinstance(value, Sym) and is_class_like(value.path):
            return BaseOrigin.VLLM, value.path
        name = last_name(generic)
        return (BaseOrigin.TYPING if name in TYPING_GENERICS or name in ("object", "ABC") else BaseOrigin.OTHER), name

    def patched_target(self, node: ast.ClassDef) -> str | None:
        """``class P(Patcher[vllm_thing])`` with ``Patcher`` not vLLM's (the consumer's, or a patching library's)
        and not typing's: the vLLM path patched."""
        for base in node.bases:
            if isinstance(base, ast.Subscript) and not isinstance(self.eval(base.value, record=False), Sym) and \
                    last_name(base.value) not in TYPING_GENERICS:
                target = self.eval(base.slice, record=False)
                if isinstance(target, Sym):
                    return target.path
        return None

    def vllm_bases(self, node: ast.ClassDef) -> list[str]:
        """The vLLM classes ``node`` extends (``class MyRunner(GPUModelRunner)``), when its other bases are the
        consumer's own: with another library's base too (``nn.Module``), what ``self`` lacks may come from there,
        so none."""
        found: list[str] = []
        for base in node.bases:
            generic = base.value if isinstance(base, ast.Subscript) else base  # MLAAttentionImpl[Metadata]
            value = self.eval(generic, record=False)
            if isinstance(value, Sym) and is_class_like(value.path):
                found.append(value.path)
            elif not isinstance(value, Local) and last_name(base) not in TYPING_GENERICS:
                return []
        return found

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit_expr(deco)
        qualname = f"{self.context()}.{node.name}"
        self.bind(node.name, Local(qualname))
        scope = Scope(kind=ScopeKind.FUNCTION, qualname=qualname, local=read_function(node, self.dict_builtin))
        params = node.args.posonlyargs + node.args.args
        in_class = self.scopes[-1].kind == ScopeKind.CLASS and self.class_stack
        is_static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        for index, arg in enumerate(params + node.args.kwonlyargs):
            if index == 0 and in_class and not is_static and arg in params:
                cls = self.class_stack[-1]
                scope.names[arg.arg] = SelfOf(cls.qualname, self.index.is_worker_extension(cls),
                                              self.class_bases.get(cls.qualname))
                continue
            scope.names[arg.arg] = self.annotation_value(arg.annotation)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit_expr(default)
        self.scopes.append(scope)
        self.visit_block(node.body)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self.visit_expr(node.value)
        self.note_model_patch(node)
        if isinstance(value, Reply) and any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets):
            self.reply_use(value, ReplyUseKind.UNPACK, ast.unparse(node.targets[0]), node)
        if value is None:
            value = self.condition_value(node.value)
        for target in node.targets:
            self.assign(target, value, node.value)
        self.note_gate_call(node.value)

    def condition_value(self, node: ast.expr) -> Value:
        """Names bound to the build's version, to a version test, or to a literal."""
        value = self.conditions.value(node, {})
        if isinstance(value, GuardExpr) and not involves_target(value):
            return None
        return value if isinstance(value, (VersionValue, Lit, GuardExpr)) else None

    def visit_Raise(self, node: ast.Raise) -> None:
        """A ``raise`` met while the module is imported (its own top level, under a test of the build)."""
        self.generic_visit(node)
        if self.at_import() and any(involves_target(g.expr) for g in self.guards):
            condition = All(tuple(g.expr if g.branch else Not(g.expr) for g in self.guards))
            text = " and ".join(g.text if g.branch else f"not ({g.text})" for g in self.guards)
            self.found.gates.append(ImportGate(self.loc(node), self.source.module, self.code(node), condition, text))

    def visit_Assert(self, node: ast.Assert) -> None:
        """``assert Version(version("vllm")) < Version("0.31.0"), "..."`` met while the module is imported: it
        raises (AssertionError) where its test of the build is False, as a ``raise`` under ``if not (...)`` does
        (vllm-rbln 0.12.0's harmony patch; vLLM is not run with ``python -O``, which would drop it)."""
        self.generic_visit(node)
        expr = self.conditions.read(node.test)
        if self.at_import() and involves_target(expr):
            guards = [*self.guards, Guard(expr, False, ast.unparse(node.test), self.loc(node))]
            condition = All(tuple(g.expr if g.branch else Not(g.expr) for g in guards))
            text = " and ".join(g.text if g.branch else f"not ({g.text})" for g in guards)
            self.found.gates.append(ImportGate(self.loc(node), self.source.module, self.code(node), condition, text))

    def visit_Expr(self, node: ast.Expr) -> None:
        self.generic_visit(node)
        self.note_gate_call(node.value)

    def at_import(self) -> bool:
        """The walk is in the module's own statements (run when it is imported), not in a def or class body, nor
        in a ``try`` whose handlers may catch what it raises."""
        return len(self.scopes) == 1 and not self.catching

    def note_gate_call(self, value: ast.expr | None) -> None:
        """A consumer helper called at the module's top level (``SCHEDULE = _select_schedule(vllm.__version__)``),
        run for the build with the call's arguments: each ``raise`` it reaches under a test of the build."""
        if not self.at_import() or not isinstance(value, ast.Call):
            return
        target = self.eval(value.func, record=False)
        helper = self.index.functions.get(target.qualname) if isinstance(target, Local) else None
        if helper is None or not isinstance(target, Local):
            return
        args = [self.conditions.value(a, {}) for a in value.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: self.conditions.value(k.value, {}) for k in value.keywords if k.arg}
        found = HelperRun(self.conditions, 1).raises(helper, target.qualname, args, kwargs)
        if isinstance(found, Unknown):
            return
        outer = [g.expr if g.branch else Not(g.expr) for g in self.guards]
        for cond, stmt in found:
            if not involves_target(cond):
                continue
            module = self.index.function_modules.get(target.qualname, "")
            text = " and ".join([g.text if g.branch else f"not ({g.text})" for g in self.guards] +
                                [render(cond)])
            self.found.gates.append(ImportGate(self.loc(value), self.source.module, ast.unparse(stmt)[:200],
                                               simplify(All(tuple(outer) + (cond,))), text,
                                               f"{target.qualname} ({module})"))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        value = self.visit_expr(node.value) if node.value is not None else None
        if value is None and node.value is not None:
            value = self.condition_value(node.value)
        if value is None:
            value = self.annotation_value(node.annotation)
        self.assign(node.target, value, node.value if value is None else None)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit_expr(node.value)
        self.visit_expr(node.target, store=True)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        iterated = self.visit_expr(node.iter)
        if isinstance(iterated, Reply):
            self.reply_use(iterated, ReplyUseKind.ITERATE, f"for {ast.unparse(node.target)} in ...", node)
        self.assign(node.target, None)
        self.visit_block(node.body)
        self.visit_block(node.orelse)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit_expr(item.context_expr)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, None)
        self.visit_block(node.body)

    visit_AsyncWith = visit_With

    def visit_While(self, node: ast.While) -> None:
        self.visit_expr(node.test)
        self.visit_block(node.body)
        self.visit_block(node.orelse)

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.expr):
            self.visit_expr(node)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.visit_expr(child)
            elif isinstance(child, ast.stmt):
                self.visit(child)
            elif isinstance(child, (ast.excepthandler, ast.match_case)):
                for grand in ast.iter_child_nodes(child):
                    if isinstance(grand, ast.stmt):
                        self.visit(grand)
                    elif isinstance(grand, ast.expr):
                        self.visit_expr(grand)

    def note_model_patch(self, node: ast.Assign) -> None:
        """``x.forward = types.MethodType(f, x)`` (or ``f.__get__(x)``, ``partial(f, x)``)."""
        target = node.targets[0] if len(node.targets) == 1 else None
        value = node.value
        if not (isinstance(target, ast.Attribute) and target.attr == "forward" and isinstance(value, ast.Call)):
            return
        name = called_name(value)
        function_node: ast.expr | None = None
        if name in ("MethodType", "partial") and value.args:
            function_node = value.args[0]
        elif name == "__get__" and isinstance(value.func, ast.Attribute):
            function_node = value.func.value
        function = self.eval(function_node, record=False) if function_node is not None else None
        if not isinstance(function, Local):
            return
        owner = self.eval(target.value, record=False)
        ref = owner.ref if isinstance(owner, Obj) else None
        self.found.forwards.append(ForwardReplacement(function.qualname, self.loc(node), ref, self.code(node)))

    # ---- expressions ---------------------------------------------------------------------
    def visit_expr(self, node: ast.expr | None, store: bool = False) -> Value:
        if node is None:
            return None
        return self.eval(node, record=True, store=store)

    def eval(self, node: ast.expr, record: bool = True, store: bool = False) -> Value:
        """The value of an expression as far as the scan can trace it; records touchpoints."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            return self.eval_attribute(node, record, store)
        if isinstance(node, ast.Call):
            return self.eval_call(node, record)
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, record)
            self.bind(node.target.id, value)
            return value
        if isinstance(node, ast.Lambda):
            return None
        if isinstance(node, ast.Await):
            # `await engine.collective_rpc(...)` is the reply itself (AsyncLLM's collective_rpc is a coroutine).
            return self.eval(node.value, record)
        if isinstance(node, ast.IfExp):
            # `x.a if hasattr(x, "a") else d`: the body runs checked.
            self.eval(node.test, record)
            pushed = self.narrow(node.test)
            self.eval(node.body, record)
            if pushed:
                self.narrowing.pop()
            self.eval(node.orelse, record)
            return None
        if isinstance(node, ast.BoolOp):
            # `hasattr(x, "a") and x.a`, `not hasattr(x, "a") or x.a`: the later operands run checked.
            checked = 0
            for operand in node.values:
                self.eval(operand, record)
                check = operand.operand if isinstance(node.op, ast.Or) and isinstance(operand, ast.UnaryOp) and \
                    isinstance(operand.op, ast.Not) else operand if isinstance(node.op, ast.And) else None
                if check is not None and self.narrow(check):
                    checked += 1
            del self.narrowing[len(self.narrowing) - checked:]
            return None
        if isinstance(node, ast.Subscript):
            base = self.eval(node.value, record)
            self.eval(node.slice, record)
            if isinstance(base, Reply):
                self.reply_use(base, ReplyUseKind.INDEX, f"[{ast.unparse(node.slice)}]", node)
            return None
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            self.scopes.append(Scope(kind=ScopeKind.FUNCTION, qualname=self.context()))
            for gen in node.generators:
                iterated = self.eval(gen.iter, record)
                if isinstance(iterated, Reply):
                    self.reply_use(iterated, ReplyUseKind.ITERATE, f"for {ast.unparse(gen.target)} in ...", node)
                self.assign(gen.target, None)
                for cond in gen.ifs:
                    self.eval(cond, record)
            for part in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
                self.eval(part, record)
            self.scopes.pop()
            return None
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.eval(child, record)
            elif isinstance(child, ast.keyword):
                self.eval(child.value, record)
        return None

    def eval_attribute(self, node: ast.Attribute, record: bool, store: bool = False) -> Value:
        base = self.eval(node.value, record)
        if isinstance(base, Sym):
            if node.attr in ("__version__", "__version_tuple__") and base.path in (
                    self.target, f"{self.target}.version"):
                return VersionValue(VersionForm.TUPLE if node.attr.endswith("tuple__") else VersionForm.STRING)
            if record and is_class_like(base.path):
                self.attribute_touch(node, Ref.of_symbol(base.path), node.attr, store=store)
            return Sym(f"{base.path}.{node.attr}")
        if isinstance(base, Obj):
            if record:
                self.attribute_touch(node, base.ref, node.attr, store=store)
            return Obj(base.ref.attr(node.attr))
        if isinstance(base, SelfOf):
            info = self.index.classes.get(base.qualname)
            if info is None:
                return None
            if self.has_attribute(info.qualname, node.attr):
                return self.attribute(info.qualname, node.attr)
            method = self.index.find_method(info, node.attr)
            if method is not None:
                return Local(f"{method[0].qualname}.{node.attr}")
            inherited = self.inherited(base)
            if inherited is not None and not self.is_defined(info, node.attr):
                if record:
                    self.attribute_touch(node, inherited, node.attr, store=store)
                return Obj(inherited.attr(node.attr))
        return None

    @staticmethod
    def inherited(value: SelfOf) -> Ref | None:
        """Where ``self``'s members that its consumer class does not define come from: vLLM's worker for a worker
        extension, else the vLLM class the consumer class extends or patches."""
        if value.worker:
            return Ref(RefKind.WORKER)
        return Ref(RefKind.SELF, symbol=value.base) if value.base else None

    def attribute_touch(self, node: ast.expr, receiver: Ref, name: str, call: CallShape | None = None,
                        store: bool = False, alias: Alias | None = None, via_super: bool = False) -> None:
        self.add(TouchPoint(Kind.ATTRIBUTE, f"{receiver.render()}.{name}", self.loc(node), self.code(node),
                            call=call, receiver=receiver, attribute=name, store=store,
                            guards=tuple(self.guards), context=self.context(),
                            narrowed=self.narrowed_by(node, receiver, name), alias=alias, via_super=via_super))

    def narrow(self, check: ast.expr) -> bool:
        """Start the narrowing ``check`` makes if it is ``hasattr(x, "a")`` or ``getattr(x, "a", default)`` (as
        is, ``is not None`` or under ``callable``); the object ``x.a`` stays known as checked wherever its value
        flows (``narrowed_refs``)."""
        checked = checked_attribute(check)
        if checked is None:
            return False
        subject, name = checked
        how = f"{ast.unparse(check)} at {self.loc(check)}"
        self.narrowing.append((ast.unparse(subject), name, how))
        value = self.eval(subject, record=False)
        if isinstance(value, Obj):
            self.narrowed_refs[value.ref.attr(name)] = how
        return True

    def narrowed_by(self, node: ast.expr, receiver: Ref | None = None, name: str | None = None) -> str:
        """The active check that covers ``node`` (an attribute use), if any: ``hasattr(x, "a")`` covers ``x.a``
        and everything reached through it; ``try: ... except AttributeError`` covers every attribute."""
        ref = receiver.attr(name) if receiver is not None and name else None
        while ref is not None:
            if ref in self.narrowed_refs:
                return self.narrowed_refs[ref]
            ref = ref.base
        if not self.narrowing:
            return ""
        text = ast.unparse(node)
        for subject, attribute, how in reversed(self.narrowing):
            if subject is None or text == f"{subject}.{attribute}" or text.startswith(f"{subject}.{attribute}."):
                return how
        return ""

    def spread(self, node: ast.expr) -> Spread | None:
        """What ``f(**node)`` passes when the scan sees every key: a mapping written out in the call, or a local
        mapping of the enclosing function whose every change the scan follows (``compat.consumer.names``)."""
        if isinstance(node, ast.Name):
            local = next((scope.local for scope in reversed(self.scopes) if scope.local is not None), None)
            return local.spreads.get(node) if local is not None else None
        return literal_spread(node, self.dict_builtin)

    def spread_keys(self, node: ast.expr) -> tuple[str, ...] | None:
        spread = self.spread(node)
        return spread.keys if spread is not None else None

    def call_literals(self, node: ast.Call) -> tuple[tuple[str, str], ...]:
        """The keywords a call passes as literals, written out or in a ``**mapping`` the scan sees."""
        literals: list[tuple[str, str]] = []
        for keyword in node.keywords:
            if keyword.arg is not None and isinstance(keyword.value, ast.Constant):
                literals.append((keyword.arg, ast.unparse(keyword.value)))
            elif keyword.arg is None and (spread := self.spread(keyword.value)) is not None:
                literals += spread.literals
        return tuple(literals)

    def eval_call(self, node: ast.Call, record: bool) -> Value:
        func = node.func
        spelled = self.dynamic_access(node, record)
        if spelled is not NOT_DYNAMIC:
            return cast(Value, spelled)
        shape = call_shape(node, self.spread_keys)
        result: Value = None
        if isinstance(func, ast.Attribute):
            base = self.eval(func.value, record)
            receiver: Ref | None = None
            if is_super(func.value):
                base = self.super_target(func.attr, func.value)
                if func.attr == "__init__" and isinstance(base, Obj) and base.ref.symbol:
                    # `super().__init__(...)` builds vLLM's class with these arguments, as `Base(...)` would.
                    if record:
                        self.add(TouchPoint(Kind.CALL, base.ref.symbol, self.loc(node), self.code(node), call=shape,
                                            guards=tuple(self.guards), context=self.context(),
                                            literals=self.call_literals(node)))
                    base = None
            if isinstance(base, Local):
                result = self.local_call_result(Local(f"{base.qualname}.{func.attr}"))
            elif isinstance(base, Obj):
                receiver = base.ref
            elif isinstance(base, Sym) and is_class_like(base.path):
                receiver = Ref.of_symbol(base.path)
            elif isinstance(base, SelfOf) and self.inherited(base) is not None:
                info = self.index.classes.get(base.qualname)
                if info is not None and self.index.find_method(info, func.attr) is None \
                        and not self.has_attribute(info.qualname, func.attr) and not self.is_defined(info, func.attr):
                    receiver = self.inherited(base)
            if receiver is not None:
                result = self.method_call(node, func, receiver, func.attr, shape, record,
                                          via_super=is_super(func.value))
            elif isinstance(base, Sym):
                path = f"{base.path}.{func.attr}"
                if record:
                    self.add(TouchPoint(Kind.CALL, path, self.loc(node), self.code(node), call=shape,
                                        guards=tuple(self.guards), context=self.context()))
                result = Obj(Ref.of_symbol(path).called())
            elif not isinstance(base, Local):
                value = self.eval_attribute(func, record=False) if isinstance(base, SelfOf) else None
                result = self.local_call_result(value)
                if record and isinstance(value, Local):
                    self.found.helper_calls.append((value.qualname, tuple(self.guards)))
        else:
            value = self.eval(func, record)
            if isinstance(value, Either):
                for option, expr, text in value.options:
                    self.guards.append(Guard(expr, True, text, value.location))
                    if record:
                        self.add(TouchPoint(Kind.CALL, option.path, self.loc(node), self.code(node), call=shape,
                                            guards=tuple(self.guards), context=self.context()))
                    self.guards.pop()
                result = None
            elif isinstance(value, Sym):
                if record:
                    self.add(TouchPoint(Kind.CALL, value.path, self.loc(node), self.code(node), call=shape,
                                        guards=tuple(self.guards), context=self.context(),
                                        literals=self.call_literals(node)))
                result = Obj(Ref.of_symbol(value.path).called())
            elif isinstance(value, Obj) and isinstance(func, ast.Name) and value.ref.kind == RefKind.ATTRIBUTE and \
                    value.ref.base is not None and value.ref.name:
                # `step = self.executor.execute_model` ... `step(out)`: the call of the attribute, made here.
                result = self.method_call(node, func, value.ref.base, value.ref.name, shape, record,
                                          self.alias(func.id, value.ref))
            elif isinstance(value, Obj):
                result = Obj(value.ref.called())
            else:
                result = self.local_call_result(value)
                if record and isinstance(value, Local):
                    self.found.helper_calls.append((value.qualname, tuple(self.guards)))
            if isinstance(func, ast.Name) and func.id == "len" and node.args:
                measured = self.eval(node.args[0], record=False)
                if isinstance(measured, Reply):
                    self.reply_use(measured, ReplyUseKind.LEN, "len(...)", node)
        for arg in node.args:
            self.eval(arg.value if isinstance(arg, ast.Starred) else arg, record)
        for kw in node.keywords:
            self.eval(kw.value, record)
        if record and called_name(node) in INDIRECT_CALLERS:
            self.indirect_call(node)
        return result

    def dynamic_access(self, node: ast.Call, record: bool) -> Value | object:
        """The spellings that name vLLM's objects at run time: ``importlib.import_module("vllm.x")`` is the module
        ``vllm.x``, ``getattr(<vLLM module or class>, "name"[, default])`` its member, and
        ``setattr(<vLLM module or class>, "name", value)`` the assignment ``<...>.name = value`` (a patch, judged as
        written out). ``NOT_DYNAMIC`` for any other call."""
        name = called_name(node)
        args = node.args
        if name not in ("import_module", "getattr", "setattr") or node.keywords or \
                any(isinstance(a, ast.Starred) for a in args):
            return NOT_DYNAMIC
        constant = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in args]
        if name == "import_module" and len(args) == 1 and constant[0] and self.is_target(constant[0]):
            return Sym(constant[0])
        if name in ("getattr", "setattr") and len(args) >= 2 and constant[1]:
            owner = self.eval(args[0], record)
            if not isinstance(owner, Sym):
                return NOT_DYNAMIC
            if name == "getattr" and len(args) in (2, 3):
                for extra in args[2:]:
                    self.eval(extra, record)
                return Sym(f"{owner.path}.{constant[1]}")
            if name == "setattr" and len(args) == 3:
                value = self.visit_expr(args[2])
                target = ast.copy_location(ast.Attribute(value=args[0], attr=constant[1], ctx=ast.Store()), node)
                self.assign(target, value, args[2])
                return None
        return NOT_DYNAMIC

    def indirect_call(self, node: ast.Call) -> None:
        """``Process(target=f, args=(...), kwargs={...})`` (``Thread`` too): ``f`` is called with those arguments in
        the process (or thread) started, a call the consumer makes as surely as one written out."""
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        target = keywords.get("target")
        value = self.eval(target, record=False) if target is not None else None
        if not isinstance(value, Sym):
            return
        args, kwargs = keywords.get("args"), keywords.get("kwargs")
        literal = args.elts if isinstance(args, (ast.Tuple, ast.List)) and \
            not any(isinstance(a, ast.Starred) for a in args.elts) else None
        keys = () if kwargs is None else self.spread_keys(kwargs)
        shape = CallShape(positional=len(literal) if literal is not None else 0, keywords=tuple(keys or ()),
                          star_args=args is not None and literal is None, star_kwargs=keys is None)
        self.add(TouchPoint(Kind.CALL, value.path, self.loc(node), self.code(node), call=shape,
                            guards=tuple(self.guards), context=self.context()))

    def super_target(self, name: str, call: ast.Call) -> Value:
        """What ``super().name(...)`` in a method of the class being walked reaches: the consumer's own base class
        that defines ``name`` (a ``Local``), else ``Obj`` of the vLLM class the nearest base is, which the call
        then touches like ``self.name(...)``; None when a base of another library comes first (it may define it).
        The bases are searched breadth first, the method resolution order of simple hierarchies."""
        if not self.class_stack or len(self.scopes) < 2 or self.scopes[-1].kind != ScopeKind.FUNCTION or \
                self.scopes[-2].kind != ScopeKind.CLASS or self.scopes[-2].qualname != self.class_stack[-1].qualname:
            return None  # not directly in a method of an indexed class (a class made inside a function is not one)
        info = self.class_stack[-1]
        if call.args and not (isinstance(call.args[0], ast.Name) and call.args[0].id == info.node.name):
            return None  # super(Other, self): the search starts past another class, whose bases are not read here
        queue = list(self.super_order.get(info.qualname, ()))
        seen: set[str] = set()
        while queue:
            kind, path = queue.pop(0)
            if kind == BaseOrigin.VLLM:
                return Obj(Ref(RefKind.SELF, symbol=path))
            if kind == BaseOrigin.OTHER:
                return None
            if kind != BaseOrigin.LOCAL or path in seen or path not in self.index.classes:
                continue
            seen.add(path)
            current = self.index.classes[path]
            if name in current.methods:
                return Local(path)
            queue.extend(self.indexed_base(b) for b in current.bases)
        return None

    def indexed_base(self, qualname: str) -> tuple[BaseOrigin, str]:
        """A base of a class from the index (resolved through imports): the consumer's, vLLM's or another's."""
        if qualname in self.index.classes:
            return BaseOrigin.LOCAL, qualname
        if self.is_target(qualname) and is_class_like(qualname):
            return BaseOrigin.VLLM, qualname
        return BaseOrigin.OTHER, qualname

    def method_call(self, node: ast.Call, func: ast.expr, receiver: Ref, name: str, shape: CallShape, record: bool,
                    alias: Alias | None = None, via_super: bool = False) -> Value:
        """A call of ``receiver.name``, an attribute of a vLLM object, written out or through the local name
        ``alias`` bound to it: the same touchpoints either way, at the call."""
        if record:
            self.attribute_touch(func, receiver, name, call=shape, alias=alias, via_super=via_super)
            if name in RPC_METHODS:
                self.rpc_touch(node, receiver)
        return Reply(self.loc(node)) if name in RPC_METHODS else Obj(receiver.attr(name).called())

    def alias(self, name: str, ref: Ref) -> Alias:
        """How a call of the local ``name``, bound to ``ref`` (an attribute of a vLLM object), can name the
        receiver again: the function's own reading of the name (``compat.consumer.names``), when the name is the
        calling function's and its receiver, evaluated here, is still ``ref``'s."""
        scope = self.scope_of(name)
        if scope is None or scope.local is None or scope.qualname != self.context():
            return Alias(name, why=f"{name} is bound outside the function that calls it")
        bound = scope.local.aliases.get(name)
        if bound is None:
            return Alias(name, why=f"{name} is not bound to an attribute written out in the function")
        if bound.alias.receiver and (bound.node.attr != ref.name or self.receiver_of(
                self.eval(bound.node.value, record=False)) != ref.base):
            return Alias(name, why=f"{name} = {ast.unparse(bound.node)} stands for {ref.render()}, whose receiver "
                                   f"the scan does not reach through {bound.alias.receiver}")
        return bound.alias

    def receiver_of(self, value: Value) -> Ref | None:
        """The vLLM object whose attributes ``value``'s are (see ``eval_attribute``)."""
        if isinstance(value, Obj):
            return value.ref
        return self.inherited(value) if isinstance(value, SelfOf) else None

    def replacement_touch(self, node: ast.AST, target: str, name: str, replacement: Replacement) -> None:
        """The consumer's code in place of vLLM's ``target.name`` (see ``Replacement``)."""
        self.add(TouchPoint(Kind.PATCH, f"{target}.{name}", self.loc(node), self.code(node),
                            receiver=Ref.of_symbol(target), attribute=name, guards=tuple(self.guards),
                            context=self.context(), replacement=replacement))

    def reply_use(self, reply: Reply, kind: ReplyUseKind, detail: str, node: ast.AST) -> None:
        self.found.reply_uses.setdefault(reply.location, []).append(
            ReplyUse(kind, detail, self.loc(node), self.code(node)))

    def rpc_touch(self, node: ast.Call, receiver: Ref) -> None:
        named = rpc_method(node)
        if named is None:
            return  # a callable is sent to the workers: nothing named to check
        name, note = named
        self.add(TouchPoint(Kind.RPC, name, self.loc(node), self.code(node), receiver=receiver,
                            rpc_method=name, call=call_shape(node, self.spread_keys), guards=tuple(self.guards),
                            context=self.context(), note=note))

    def local_call_result(self, value: Value) -> Value:
        """Calling a consumer function whose return annotation names a vLLM class."""
        if isinstance(value, Local):
            returns = self.index.return_annotations.get(value.qualname)
            if returns is not None:
                return self.annotation_value(returns)
        return None

    def annotation_value(self, annotation: ast.expr | None) -> Value:
        """A parameter annotated with a vLLM class is an instance of it."""
        if annotation is None:
            return None
        annotation = annotation_target(annotation)
        if annotation is None:
            return None
        value = self.eval(annotation, record=False)
        if not isinstance(value, Sym) and isinstance(annotation, ast.Name) and annotation.id in self.type_names:
            return Obj(Ref(RefKind.SYMBOL, symbol=self.type_names[annotation.id].path, typing=True).called())
        if isinstance(value, Sym):
            return Obj(Ref.of_symbol(value.path).called())
        return None
