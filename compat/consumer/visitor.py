"""The walk over one consumer module: imports, guards, classes, functions, assignments (see ``compat.consumer.scan``).

One walk returns a ``ModuleRecord``. The tree scan walks every module more than once, so that ``self.x``
assigned in one method (or module) is known in all; each walk records afresh, and the last one counts.
"""

from __future__ import annotations

import ast

from compat.consumer.conditions import ConditionReader
from compat.consumer.guards import GuardExpr, Imports, Not, involves_target
from compat.consumer.index import ConsumerIndex, ConsumerModule, IndexedClass
from compat.consumer.model import Fallback, Guard, Kind, Ref, ReplyUse, TouchPoint
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
from compat.location import Location
from compat.signature import CallShape
from compat.syntax import absolute_module, call_shape, is_type_checking

RPC_METHODS = ("collective_rpc",)


def is_class_like(path: str) -> bool:
    """Attribute access on a vLLM name is a member access when the name is not a module path."""
    last = path.rsplit(".", 1)[-1]
    return bool(last) and (last[0].isupper() or last.startswith("_") and last[1:2].isupper())


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def walk_module(index: ConsumerIndex, known: ClassAttributes, source: ConsumerModule, target: str) -> ModuleRecord:
    """Walk one module once; ``known``: class attributes learnt so far (read, never changed)."""
    visitor = ModuleVisitor(index, known, source, target)
    visitor.visit_block(source.tree.body)
    return visitor.found


class ModuleVisitor(ast.NodeVisitor):
    """Walks one module: its statements, and the value of each expression in them."""

    def __init__(self, index: ConsumerIndex, known: ClassAttributes, source: ConsumerModule, target: str) -> None:
        self.index = index
        self.known = known
        """Class attributes learnt before this walk (other modules, earlier passes); read only."""
        self.source = source
        self.target = target
        self.found = ModuleRecord()
        """What this walk found (``walk_module`` returns it)."""
        self.scopes: list[Scope] = [Scope(kind="module", qualname=source.module)]
        self.guards: list[Guard] = []
        self.fallback: Fallback | None = None
        self.class_stack: list[IndexedClass] = []
        self.conditions = ConditionReader(target, index.functions, lambda node: self.eval(node, record=False))

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

    def lookup(self, name: str) -> Value:
        for scope in reversed(self.scopes):
            if scope.kind == "class" and scope is not self.scopes[-1]:
                continue
            if name in scope.names:
                return scope.names[name]
        return None

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

    def assign(self, target: ast.expr, value: Value) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value)
            if isinstance(base, SelfOf):
                info = self.index.classes.get(base.qualname)
                if info is not None and value is not None:
                    self.found.attributes.set(info.qualname, target.attr, value)
                if base.worker and info is not None and not self.is_defined(info, target.attr):
                    self.attribute_touch(target, Ref("worker"), target.attr, store=True)
            elif isinstance(base, Obj):
                self.attribute_touch(target, base.ref, target.attr, store=True)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.assign(element.value if isinstance(element, ast.Starred) else element, None)
        else:
            self.visit_expr(target, store=True)

    # ---- statements ----------------------------------------------------------------------
    def consumer_value(self, module: str, name: str) -> Value:
        qualname = self.index.definition(module, name)
        return Local(qualname) if qualname is not None else None

    def visit_block(self, body: list[ast.stmt]) -> None:
        pushed = 0
        for stmt in body:
            self.visit(stmt)
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
            self.guards.append(Guard(expr, True, text, self.loc(node)))
            self.visit_block(node.body)
            self.guards[-1] = Guard(expr, False, text, self.loc(node))
            self.visit_block(node.orelse)
            self.guards.pop()
        elif is_type_checking(node.test):
            self.visit_block(node.orelse)
        else:
            self.visit_block(node.body)
            self.visit_block(node.orelse)

    def visit_Try(self, node: ast.Try) -> None:
        catches = [h for h in node.handlers if self._catches_import_error(h)]
        primary = self._imported_symbols(node.body)
        if not (catches and primary):
            self.visit_block(node.body)
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
        self.bind(node.name, Local(qualname))
        if info is not None:
            self.class_stack.append(info)
        self.scopes.append(Scope(kind="class", qualname=qualname))
        self.visit_block(node.body)
        self.scopes.pop()
        if info is not None:
            self.class_stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit_expr(deco)
        qualname = f"{self.context()}.{node.name}"
        self.bind(node.name, Local(qualname))
        scope = Scope(kind="function", qualname=qualname)
        params = node.args.posonlyargs + node.args.args
        in_class = self.scopes[-1].kind == "class" and self.class_stack
        is_static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        for index, arg in enumerate(params + node.args.kwonlyargs):
            if index == 0 and in_class and not is_static and arg in params:
                cls = self.class_stack[-1]
                scope.names[arg.arg] = SelfOf(cls.qualname, self.index.is_worker_extension(cls))
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
            self.assign(target, value)

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
        self.assign(node.target, value)

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
        name = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
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
        if isinstance(node, ast.Subscript):
            base = self.eval(node.value, record)
            self.eval(node.slice, record)
            if isinstance(base, Reply):
                self.reply_use(base, "index", f"[{ast.unparse(node.slice)}]", node)
            return None
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            self.scopes.append(Scope(kind="function", qualname=self.context()))
            for gen in node.generators:
                self.eval(gen.iter, record)
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
                return VersionValue("tuple" if node.attr.endswith("tuple__") else "string")
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
            if base.worker and not self.is_defined(info, node.attr):
                if record:
                    self.attribute_touch(node, Ref("worker"), node.attr, store=store)
                return Obj(Ref("worker").attr(node.attr))
        return None

    def attribute_touch(self, node: ast.expr, receiver: Ref, name: str, call: CallShape | None = None,
                        store: bool = False) -> None:
        self.add(TouchPoint(Kind.ATTRIBUTE, f"{receiver.render()}.{name}", self.loc(node), self.code(node),
                            call=call, receiver=receiver, attribute=name, store=store,
                            guards=tuple(self.guards), context=self.context()))

    def eval_call(self, node: ast.Call, record: bool) -> Value:
        func = node.func
        shape = call_shape(node)
        result: Value = None
        if isinstance(func, ast.Attribute):
            base = self.eval(func.value, record)
            receiver: Ref | None = None
            if isinstance(base, Obj):
                receiver = base.ref
            elif isinstance(base, Sym) and is_class_like(base.path):
                receiver = Ref.of_symbol(base.path)
            elif isinstance(base, SelfOf) and base.worker:
                info = self.index.classes.get(base.qualname)
                if info is not None and self.index.find_method(info, func.attr) is None \
                        and not self.has_attribute(info.qualname, func.attr):
                    receiver = Ref("worker")
            if receiver is not None:
                if record:
                    self.attribute_touch(func, receiver, func.attr, call=shape)
                    if func.attr in RPC_METHODS:
                        self.rpc_touch(node, receiver)
                result = Obj(receiver.attr(func.attr).called())
                if func.attr in RPC_METHODS:
                    result = Reply(self.loc(node))
            elif isinstance(base, Sym):
                path = f"{base.path}.{func.attr}"
                if record:
                    self.add(TouchPoint(Kind.CALL, path, self.loc(node), self.code(node), call=shape,
                                        guards=tuple(self.guards), context=self.context()))
                result = Obj(Ref.of_symbol(path).called())
            else:
                value = self.eval_attribute(func, record=False) if isinstance(base, SelfOf) else None
                result = self.local_call_result(value)
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
                    literals = tuple((k.arg, ast.unparse(k.value)) for k in node.keywords
                                     if k.arg and isinstance(k.value, ast.Constant))
                    self.add(TouchPoint(Kind.CALL, value.path, self.loc(node), self.code(node), call=shape,
                                        guards=tuple(self.guards), context=self.context(), literals=literals))
                result = Obj(Ref.of_symbol(value.path).called())
            elif isinstance(value, Obj):
                result = Obj(value.ref.called())
            else:
                result = self.local_call_result(value)
            if isinstance(func, ast.Name) and func.id == "len" and node.args:
                measured = self.eval(node.args[0], record=False)
                if isinstance(measured, Reply):
                    self.reply_use(measured, "len", "len(...)", node)
        for arg in node.args:
            self.eval(arg.value if isinstance(arg, ast.Starred) else arg, record)
        for kw in node.keywords:
            self.eval(kw.value, record)
        return result

    def reply_use(self, reply: Reply, kind: str, detail: str, node: ast.AST) -> None:
        self.found.reply_uses.setdefault(reply.location, []).append(
            ReplyUse(kind, detail, self.loc(node), self.code(node)))

    def rpc_touch(self, node: ast.Call, receiver: Ref) -> None:
        method_node = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "method"), None)
        if isinstance(method_node, ast.Constant) and isinstance(method_node.value, str):
            name, note = method_node.value, None
        elif isinstance(method_node, ast.JoinedStr) or isinstance(method_node, ast.Name):
            name, note = "?", f"method name is computed ({ast.unparse(method_node)}), not a literal"
        else:
            return  # a callable is sent to the workers: nothing named to check
        self.add(TouchPoint(Kind.RPC, name, self.loc(node), self.code(node), receiver=receiver,
                            rpc_method=name, call=call_shape(node), guards=tuple(self.guards),
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
        value = self.eval(annotation, record=False)
        if isinstance(value, Sym):
            return Obj(Ref.of_symbol(value.path).called())
        return None
