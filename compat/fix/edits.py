"""Edits of the consumer's source, made with LibCST so that everything they do not touch keeps its formatting.

Each edit is found by what it expects at a place (a call of ``callee`` on ``line``, an import of ``names``
from ``module``), never by the line alone; when that is not there, it raises ``EditNotFound`` naming the file,
the line and the pattern, unless the change is already made (every edit is idempotent: applying it to its own
output changes nothing).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from compat.errors import CompatError


class EditNotFound(CompatError):
    """The code an edit was planned for is not where it should be (the consumer differs from the audit)."""


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _squeeze(text: str) -> str:
    """Code as Python reads it: without its layout (indentation, line breaks) and comments."""
    try:
        return ast.dump(ast.parse(textwrap.dedent(text).strip()))
    except SyntaxError:
        return " ".join(text.split())


def _dotted(node: cst.BaseExpression | None) -> str:
    """``a.b.c`` for a Name/Attribute chain, '' for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def _expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


@dataclass(frozen=True)
class Edit:
    """One change to one file of the consumer."""

    file: str
    line: int
    pattern: str
    """What the edit expects to find (shown when it is not there)."""

    def apply(self, module: cst.Module) -> cst.Module:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.file}:{self.line}: {self.pattern}"

    def missing(self, detail: str) -> EditNotFound:
        return EditNotFound(f"{self.file}:{self.line}: expected {self.pattern!r} ({detail}); the consumer's code "
                            "is not what the fix was planned for")


class _AtLine(cst.CSTTransformer):
    """Transforms the nodes of a kind that start on one line; counts how many it changed or found done."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.changed = 0
        self.done = 0

    def at_line(self, node: cst.CSTNode) -> bool:
        return self.get_metadata(PositionProvider, node).start.line == self.line


def _run(module: cst.Module, transformer: _AtLine) -> cst.Module:
    return MetadataWrapper(module, unsafe_skip_copy=True).visit(transformer)


class _InBody(_AtLine):
    """Looks at each block of statements (a module's or an indented block's) that holds a statement starting
    on the line, and lets ``change`` rewrite that block."""

    def change(self, statements: list[cst.BaseStatement], index: int) -> list[cst.BaseStatement] | None:
        """The block with the statement at ``index`` edited, or None to leave it."""
        raise NotImplementedError

    def _in(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        body = getattr(updated, "body", None)
        if not isinstance(body, Sequence) or isinstance(body, cst.BaseSuite):
            return updated
        for index, stmt in enumerate(getattr(original, "body", ())):
            if isinstance(stmt, cst.BaseStatement) and self.at_line(stmt):
                changed = self.change(list(body), index)
                if changed is not None:
                    return updated.with_changes(body=changed)
        return updated

    def leave_IndentedBlock(self, original, updated):
        return self._in(original, updated)

    def leave_Module(self, original, updated):
        return self._in(original, updated)


@dataclass(frozen=True)
class RouteImport(Edit):
    """``from module import a, b`` on ``line``: the ``names`` are imported from the shim module instead."""

    module: str = ""
    names: tuple[str, ...] = ()
    shim: str = ""
    """The shim's dotted module name."""

    def apply(self, module: cst.Module) -> cst.Module:
        edit = self

        class Route(_AtLine):
            def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                          updated: cst.SimpleStatementLine):
                stmt = updated.body[0] if len(updated.body) == 1 else None
                if not isinstance(stmt, cst.ImportFrom) or isinstance(stmt.names, cst.ImportStar):
                    return updated
                source = _dotted(stmt.module)
                imported = {_dotted(a.name) for a in stmt.names}
                if source == edit.shim and set(edit.names) <= imported:
                    self.done += 1
                if source != edit.module or not self.at_line(original) or not set(edit.names) & imported:
                    return updated
                self.changed += 1
                kept = [a for a in stmt.names if _dotted(a.name) not in edit.names]
                names = edit.names[0] if len(edit.names) == 1 else "(\n" + "".join(
                    f"    {n},\n" for n in edit.names) + ")"
                routed = cst.parse_statement(f"from {edit.shim} import {names}\n")
                if not kept:
                    return cst.FlattenSentinel([routed])
                kept[-1] = kept[-1].with_changes(comma=stmt.names[-1].comma)
                return cst.FlattenSentinel([updated.with_changes(body=[stmt.with_changes(names=kept)]), routed])

        route = Route(self.line)
        result = _run(module, route)
        if not route.changed and not route.done:
            raise self.missing(f"an import of {', '.join(self.names)} from {self.module}")
        return result


@dataclass(frozen=True)
class RouteCall(Edit):
    """A call of ``callee`` (dotted, as written) starting on ``line`` becomes a call of the shim's ``function``.

    ``receiver``: the callee is ``<receiver>.<method>``, and the receiver becomes the first argument
    (``self.executor.execute_model(x)`` -> ``vllm_compat.execute_model(self.executor, x)``); ``callee`` is
    then the method name. ``extra_args`` are prepended as they are written.
    """

    callee: str = ""
    function: str = ""
    receiver: bool = False
    extra_args: tuple[str, ...] = ()

    def apply(self, module: cst.Module) -> cst.Module:
        edit = self

        class Route(_AtLine):
            def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
                if not self.at_line(original):
                    return updated
                name = _dotted(updated.func)
                if name == edit.function:
                    self.done += 1
                    return updated
                if edit.receiver:
                    if not (isinstance(updated.func, cst.Attribute) and updated.func.attr.value == edit.callee):
                        return updated
                    first = [cst.Arg(updated.func.value)]
                elif name != edit.callee:
                    return updated
                else:
                    first = []
                self.changed += 1
                new = first + [cst.Arg(_expr(a)) for a in edit.extra_args]
                if updated.args:
                    new = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in new]
                else:
                    new = new[:-1] + [new[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)] if new else new
                return updated.with_changes(func=_expr(edit.function), args=new + list(updated.args))

        route = Route(self.line)
        result = _run(module, route)
        if not route.changed and not route.done:
            raise self.missing(f"a call of {self.callee}")
        return result


@dataclass(frozen=True)
class AddKeyword(Edit):
    """The call of ``callee`` starting on ``line`` gets ``keyword=value``.

    When ``value`` names an argument of the enclosing call (``VllmConfig(model_config=ModelConfig(...),
    scheduler_config=SchedulerConfig(...))``) that is not a plain name, that argument is first bound to a
    local variable before the statement, so both calls share one object.
    """

    callee: str = ""
    keyword: str = ""
    value: str = ""

    def apply(self, module: cst.Module) -> cst.Module:
        edit = self
        hoisted: list[cst.BaseExpression] = []
        columns: list[int] = []

        class Add(_AtLine):
            def __init__(self, line: int) -> None:
                super().__init__(line)
                self.stack: list[cst.Call] = []

            def visit_Call(self, node: cst.Call) -> None:
                self.stack.append(node)

            def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
                self.stack.pop()
                if _dotted(updated.func) != edit.callee or not self.at_line(original):
                    if hoisted and any(_is_hoisted(a, edit.value, hoisted[0]) for a in updated.args):
                        args = [a.with_changes(value=cst.Name(edit.value)) if _is_hoisted(a, edit.value, hoisted[0])
                                else a for a in updated.args]
                        return updated.with_changes(args=args)
                    return updated
                if any(a.keyword and a.keyword.value == edit.keyword for a in updated.args):
                    self.done += 1
                    return updated
                self.changed += 1
                enclosing = self.stack[-1] if self.stack else None
                sibling = next((a for a in enclosing.args if a.keyword and a.keyword.value == edit.value),
                               None) if enclosing is not None else None
                if sibling is not None and not isinstance(sibling.value, cst.Name):
                    hoisted.append(sibling.value)
                    columns.append(self.get_metadata(PositionProvider, sibling).start.column)
                return updated.with_changes(args=_append(list(updated.args), cst.Arg(
                    _expr(edit.value), keyword=cst.Name(edit.keyword),
                    equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                          whitespace_after=cst.SimpleWhitespace("")))))

        add = Add(self.line)
        result = _run(module, add)
        if not add.changed and not add.done:
            raise self.missing(f"a call of {self.callee}")
        if hoisted:
            result = _bind_before(result, self.line, self.value, hoisted[0], columns[0])
        return result


def _is_hoisted(arg: cst.Arg, name: str, value: cst.BaseExpression) -> bool:
    return bool(arg.keyword and arg.keyword.value == name and arg.value.deep_equals(value))


def _append(args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """``args`` and ``new`` last, laid out as the call lays out its arguments (one per line stays so)."""
    if not args:
        return [new]
    between = args[-2].comma if len(args) > 1 else cst.MaybeSentinel.DEFAULT
    if not isinstance(between, cst.Comma):
        between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    trailing = args[-1].comma
    return args[:-1] + [args[-1].with_changes(comma=between), new.with_changes(comma=trailing)]


def _bind_before(module: cst.Module, line: int, name: str, value: cst.BaseExpression, column: int) -> cst.Module:
    """Put ``name = value`` before the statement that holds ``line`` (the value was moved out of it, from an
    argument at ``column``: its continuation lines move left by as much as the statement sits left of it)."""

    class Bind(_AtLine):
        def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine):
            pos = self.get_metadata(PositionProvider, original)
            if self.changed or not pos.start.line <= self.line <= pos.end.line:
                return updated
            self.changed += 1
            shift = max(column - pos.start.column, 0)
            lines = _code(value).split("\n")
            text = "\n".join(lines[:1] + [ln[shift:] if ln[:shift].isspace() else ln for ln in lines[1:]])
            assign = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], _expr(text))],
                                             leading_lines=updated.leading_lines)
            return cst.FlattenSentinel([assign, updated.with_changes(leading_lines=[])])

    return _run(module, Bind(line))


@dataclass(frozen=True)
class ReplaceStatements(Edit):
    """The statements starting on ``line`` whose code is ``expected`` (one entry per statement, compared
    without surrounding whitespace) become ``replacement`` (statements, indented as the first one)."""

    expected: tuple[str, ...] = ()
    replacement: str = ""
    end_line: int = 0
    """The last line the replaced statements span, when other edits planned inside them are to be dropped (the
    replacement takes their place: ``supersedes``)."""

    def supersedes(self, other: Edit) -> bool:
        """Whether ``other`` edits code this replacement removes."""
        return other is not self and other.file == self.file and self.line <= other.line <= self.end_line

    def apply(self, module: cst.Module) -> cst.Module:
        edit = self

        class Replace(_InBody):
            def change(self, statements, index):
                window = statements[index:index + len(edit.expected)]
                if [_squeeze(_code(s)) for s in window] == [_squeeze(e) for e in edit.expected]:
                    self.changed += 1
                    new = list(cst.parse_module(edit.replacement).body)
                    new[0] = new[0].with_changes(leading_lines=statements[index].leading_lines)
                    return statements[:index] + new + statements[index + len(window):]
                if _squeeze(_code(statements[index])) == _squeeze(edit.replacement):
                    self.done += 1
                return None

        replace = Replace(self.line)
        result = _run(module, replace)
        if not replace.changed and not replace.done:
            raise self.missing("these statements: " + " / ".join(self.expected))
        return result


@dataclass(frozen=True)
class ImportShim(Edit):
    """``import_line`` (the shim, under its alias) after the module's last top-level import, once; in a module
    without one, after its docstring (which must stay the module's first statement).

    The import is unconditional even where the module guards its vLLM imports (``if is_vllm_available():``):
    the shim imports nothing of vLLM and checks nothing at import, and the module may call the shim outside the
    guard (a platform helper that runs with or without vLLM), where a guarded import would leave the alias
    unbound."""

    import_line: str = ""

    alias: str = ""

    def apply(self, module: cst.Module) -> cst.Module:
        if any(_code(stmt).strip() == self.import_line for stmt in module.body) or f"{self.alias}." not in module.code:
            return module
        body = list(module.body)
        last = max((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                    and isinstance(s.body[0], (cst.Import, cst.ImportFrom))), default=_docstring_end(body))
        body.insert(last + 1, cst.parse_statement(self.import_line + "\n"))
        return module.with_changes(body=body)


def _docstring_end(body: Sequence[cst.BaseStatement]) -> int:
    """The index of a module's docstring statement (-1 without one): what an insertion at the top goes after."""
    first = body[0] if body else None
    is_doc = isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr) and isinstance(
        first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    return 0 if is_doc else -1


def _assigns(statement: cst.BaseStatement, name: str) -> bool:
    """Whether ``statement`` is ``name = ...`` (one target)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    assign = statement.body[0]
    return isinstance(assign, cst.Assign) and len(assign.targets) == 1 and _dotted(assign.targets[0].target) == name


@dataclass(frozen=True)
class InsertAfter(Edit):
    """``code`` (one statement) right after the statement starting on ``line`` whose code is ``expected``, or,
    with ``assigns``, that assigns that name (whatever other edits make of its value)."""

    expected: str = ""
    code: str = ""
    assigns: str = ""

    def apply(self, module: cst.Module) -> cst.Module:
        edit = self
        new = cst.parse_statement(self.code if self.code.endswith("\n") else self.code + "\n")

        class Insert(_InBody):
            def change(self, statements, index):
                if edit.assigns:
                    if not _assigns(statements[index], edit.assigns):
                        return None
                elif _squeeze(_code(statements[index])) != _squeeze(edit.expected):
                    return None
                if index + 1 < len(statements) and _squeeze(_code(statements[index + 1])) == _squeeze(edit.code):
                    self.done += 1
                    return None
                self.changed += 1
                return statements[:index + 1] + [new] + statements[index + 1:]

        insert = Insert(self.line)
        result = _run(module, insert)
        if not insert.changed and not insert.done:
            raise self.missing(f"the statement `{self.expected or self.assigns + ' = ...'}`")
        return result


@dataclass(frozen=True)
class InsertBefore(Edit):
    """``code`` (one statement) right before the statement starting on ``line`` whose code holds ``contains``."""

    contains: str = ""
    code: str = ""

    def apply(self, module: cst.Module) -> cst.Module:
        edit = self
        new = cst.parse_statement(self.code if self.code.endswith("\n") else self.code + "\n")

        class Insert(_InBody):
            def change(self, statements, index):
                if edit.contains not in _code(statements[index]):
                    return None
                if index > 0 and _squeeze(_code(statements[index - 1])) == _squeeze(edit.code):
                    self.done += 1
                    return None
                self.changed += 1
                moved = new.with_changes(leading_lines=statements[index].leading_lines)
                return statements[:index] + [moved, statements[index].with_changes(leading_lines=[])] + \
                    statements[index + 1:]

        insert = Insert(self.line)
        result = _run(module, insert)
        if not insert.changed and not insert.done:
            raise self.missing(f"a statement holding `{self.contains}`")
        return result
