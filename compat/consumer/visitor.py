"""The walk over one consumer module: imports, guards, classes, functions, assignments (see ``compat.consumer.scan``).

One walk returns a ``ModuleRecord``. The tree scan walks every module more than once, so that ``self.x``
assigned in one method (or module) is known in all; each walk records afresh, and the last one counts.
"""

from __future__ import annotations

import ast
import traceback

from compat.consumer.expressions import ExpressionReader, is_class_like
from compat.consumer.guards import GuardExpr, Imports, Not, involves_target
from compat.consumer.index import ConsumerIndex, ConsumerModule
from compat.consumer.model import ClassPatch, Fallback, Guard, Kind, Ref, Replacement, TouchPoint
from compat.consumer.names import read_function
from compat.consumer.record import ForwardReplacement, ModuleRecord
from compat.consumer.values import (
    ClassAttributes,
    Either,
    Lit,
    Local,
    Obj,
    Reply,
    Scope,
    SelfOf,
    Sym,
    Value,
    VersionValue,
)
from compat.syntax import absolute_module, called_name, from_def, is_type_checking

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


_TYPING_GENERICS = frozenset({"Generic", "Protocol", "Type", "type", "Optional", "Union", "List", "Dict", "Tuple",
                              "Sequence", "Mapping", "Iterable", "Callable"})


def _conjuncts(test: ast.expr) -> list[ast.expr]:
    """``a and b and c`` -> [a, b, c]; anything else -> [test]."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [part for value in test.values for part in _conjuncts(value)]
    return [test]


_CONSTRUCTION = frozenset({"__init__", "__new__", "__init_subclass__", "__class_getitem__", "__post_init__"})


def _catches(handler: ast.ExceptHandler, name: str) -> bool:
    """The handler catches ``name`` by name (bare ``except`` and ``Exception`` hide more than a check would)."""
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id == name or isinstance(t, ast.Attribute) and t.attr == name
               for t in types if t is not None)


def _last_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def walk_module(index: ConsumerIndex, known: ClassAttributes, source: ConsumerModule, target: str) -> ModuleRecord:
    """Walk one module once; ``known``: class attributes learnt so far (read, never changed)."""
    visitor = ModuleVisitor(index, known, source, target)
    visitor.visit_block(source.tree.body, top=True)
    return visitor.found


class ModuleVisitor(ExpressionReader, ast.NodeVisitor):
    """The statements of one module; ``ExpressionReader`` reads the expressions in them."""

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
                value = VersionValue("tuple" if alias.name.endswith("tuple__") else "string")
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
        for check in _conjuncts(test):
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

    def visit_Try(self, node: ast.Try) -> None:
        catches = [h for h in node.handlers if self._catches_import_error(h)]
        primary = self._imported_symbols(node.body)
        if not (catches and primary):
            guarded = [h for h in node.handlers if _catches(h, "AttributeError")]
            if guarded:
                self.narrowing.append((None, "", f"try/except AttributeError at {self.loc(guarded[0])}"))
            self.visit_block(node.body)
            if guarded:
                self.narrowing.pop()
            for h in node.handlers:
                self.visit_block(h.body)
            self.visit_block(node.orelse)
            self.visit_block(node.finalbody)
            return
        handler = catches[0]
        provided = tuple(sorted({a.asname or a.name for s in ast.walk(ast.Module(handler.body, []))
                                 if isinstance(s, (ast.Import, ast.ImportFrom)) for a in s.names}))
        outer = self.fallback
        self.fallback = Fallback(self.loc(handler), provided, self.code(handler))
        self.visit_block(node.body)
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
        return tuple(found)

    visit_TryStar = visit_Try

    @staticmethod
    def _catches_import_error(handler: ast.ExceptHandler) -> bool:
        if handler.type is None:
            return True
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return any((isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS) or (
            isinstance(n, ast.Attribute) and n.attr in _IMPORT_ERRORS) for n in names)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for deco in node.decorator_list:
            self.visit_expr(deco)
        for base in node.bases:
            self.visit_expr(base)
        qualname = f"{self.context()}.{node.name}"
        info = self.index.classes.get(qualname)
        target, kind, others = self.patched_target(node), "patch", ()
        if target is None:
            bases = self.vllm_bases(node)
            target, kind, others = (bases[0] if bases else None), "subclass", tuple(bases[1:])
        if info is not None:
            self.super_order[qualname] = tuple(self.base_entry(base) for base in node.bases)
        if target is not None and info is not None:
            self.class_bases[qualname] = target
            names = info.own_names() if kind == "patch" else self.index.declared_names(info)
            self.found.class_patches.append(ClassPatch(target, qualname, tuple(sorted(names)), self.loc(node), kind,
                                                       others))
            for name, method in info.methods.items():
                if kind == "subclass" and name in _CONSTRUCTION:
                    continue  # the consumer builds its subclass itself, with its own arguments
                self.replacement_touch(method, target, name, Replacement(f"{qualname}.{name}", kind, from_def(method)))
        self.bind(node.name, Local(qualname))
        if info is not None:
            self.class_stack.append(info)
        self.scopes.append(Scope(kind="class", qualname=qualname))
        self.visit_block(node.body)
        self.scopes.pop()
        if info is not None:
            self.class_stack.pop()

    def base_entry(self, base: ast.expr) -> tuple[str, str]:
        """One base as ``super()`` sees it: ("local", qualname), ("vllm", path), ("typing", name) or ("other", text)."""
        generic = base.value if isinstance(base, ast.Subscript) else base
        value = self.eval(generic, record=False)
        if isinstance(value, Local):
            return "local", value.qualname
        if isinstance(value, Sym) and is_class_like(value.path):
            return "vllm", value.path
        name = _last_name(generic)
        return ("typing" if name in _TYPING_GENERICS or name in ("object", "ABC") else "other"), name

    def patched_target(self, node: ast.ClassDef) -> str | None:
        """``class P(Patcher[vllm_thing])`` with ``Patcher`` not vLLM's (the consumer's, or a patching library's)
        and not typing's: the vLLM path patched."""
        for base in node.bases:
            if isinstance(base, ast.Subscript) and not isinstance(self.eval(base.value, record=False), Sym) and \
                    _last_name(base.value) not in _TYPING_GENERICS:
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
            elif not isinstance(value, Local) and _last_name(base) not in _TYPING_GENERICS:
                return []
        return found

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit_expr(deco)
        qualname = f"{self.context()}.{node.name}"
        self.bind(node.name, Local(qualname))
        scope = Scope(kind="function", qualname=qualname, local=read_function(node, self.dict_builtin))
        params = node.args.posonlyargs + node.args.args
        in_class = self.scopes[-1].kind == "class" and self.class_stack
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
            self.reply_use(value, "unpack", ast.unparse(node.targets[0]), node)
        if value is None:
            value = self.condition_value(node.value)
        for target in node.targets:
            self.assign(target, value, node.value)

    def condition_value(self, node: ast.expr) -> Value:
        """Names bound to the build's version, to a version test, or to a literal."""
        value = self.conditions.value(node, {})
        if isinstance(value, GuardExpr) and not involves_target(value):
            return None
        return value if isinstance(value, (VersionValue, Lit, GuardExpr)) else None

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
            self.reply_use(iterated, "iterate", f"for {ast.unparse(node.target)} in ...", node)
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
