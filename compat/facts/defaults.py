"""The defaults of a config class: what each field is when the caller leaves it out, and who reads it.

A consumer that builds vLLM's configs by hand (speculators 0.3.0: ``SchedulerConfig(max_num_seqs=...,
max_model_len=..., max_num_batched_tokens=...)``) gets the build's default for every field it does not pass. In
vLLM 0.11.0 ``SchedulerConfig.enable_chunked_prefill`` is declared ``None`` (falsy: a prompt is never split), from
0.11.1 ``True``: the same call now splits prompts across steps. For each constructor parameter this fact reads:

- the declared default (``compat.facts.reading.declared``: factories rendered as what they make);
- the rewrites vLLM's own code makes of it while the config is built: ``self.<field> = <value>`` in the class's
  ``__post_init__`` and pydantic ``model_validator`` methods (and the methods they call on ``self``), and
  ``self.<attribute>.<field> = <value>`` in ``VllmConfig.__post_init__`` (``self.scheduler_config.async_scheduling
  = True`` in vLLM 0.32.0), each with the ``if`` tests it sits under and whether those hold for the declared
  default (``if self.max_num_seqs is None: self.max_num_seqs = 128`` always applies to a default of None);
- the places in the build that read it: ``<receiver>.<field>`` where the receiver's name ends with the name vLLM
  holds the config under (``self.scheduler_config.enable_chunked_prefill``, ``vllm_config.cache_config.
  enable_prefix_caching``), and ``self.<field>`` in the class's own methods. A field the caller cannot pass that
  is made from this one (vLLM 0.11.0's ``__post_init__`` copies ``enable_chunked_prefill`` into
  ``chunked_prefill_enabled``, which the scheduler reads; a one-line property later) carries its reads over.

Pydantic ``field_validator`` methods are not rewrites of a default: pydantic does not validate defaults unless
asked (``validate_default``). The reads are found in one pass over the modules whose text names the config's
attribute followed by one of its fields, parsed through the surface's own index.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from compat.facts import Fact
from compat.facts.reading import Code, declared, loc, method
from compat.signature import ParamKind, Signature
from compat.syntax import FunctionNode, module_name
from compat.vllm.definitions import ClassModel, definition
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind

VLLM_CONFIG = "vllm.config.VllmConfig"
ALL = "*"
_MAX_CALL_DEPTH = 4
_PROPERTIES = ("property", "cached_property")
_UNKNOWN = object()
_COMPARE = {ast.Is: operator.is_, ast.IsNot: operator.is_not, ast.Eq: operator.eq, ast.NotEq: operator.ne,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def short(path: str) -> str:
    """A dotted path as messages name it: ``Scheduler.schedule`` for ``vllm.v1.core.sched.scheduler.Scheduler.
    schedule``."""
    return ".".join(path.split(".")[-2:])


@dataclass(frozen=True)
class Rewrite:
    """``<receiver>.<field> = <value>`` in the code that builds the config."""

    value: str
    at: str | None
    by: str
    """The method that assigns it (dotted path: ``vllm.config.vllm.VllmConfig.__post_init__``)."""
    condition: str = ""
    """The ``if`` tests it sits under, rendered (``not (test)`` for an ``else``); "" when none."""
    applies: bool | None = None
    """Whether it happens to a field left to its declared default: True (no test, or every test is about the field
    and holds for the default), False (such a test fails for it), None (it depends on something else)."""
    replaces: bool = True
    """False when the value is made from the field itself (``self.load_format = self.load_format.lower()``): the
    default is transformed, not replaced, so it stays the default that is compared."""

    def render(self) -> str:
        return f"{short(self.by)} sets {self.value}" + (f" if {self.condition}" if self.condition else "") + \
            f" ({self.at})"


@dataclass(frozen=True)
class Read:
    function: str
    """The dotted path of the function or method that reads it (nested defs count as the one around them)."""
    at: str
    through: str = ""
    """The field actually read, when it is made from this one (``chunked_prefill_enabled``)."""

    def render(self) -> str:
        via = f" (as {self.through})" if self.through else ""
        return f"{short(self.function)}{via} ({self.at})"


@dataclass(frozen=True)
class FieldDefault:
    name: str
    default: str | None
    """The declared default as source text; None when the parameter has none."""
    declared_at: str | None
    rewrites: tuple[Rewrite, ...] = ()
    """In the order they run: the class's own construction first, then ``VllmConfig``'s."""
    reads: tuple[Read, ...] = ()
    copies: tuple[str, ...] = ()
    """Fields the caller cannot pass (and one-line properties) that the build makes from this one."""

    @property
    def effective(self) -> str | None:
        """What a caller that leaves the field out ends up with: the last rewrite that always applies to the
        default and replaces it, else the declared default."""
        applied = [r.value for r in self.rewrites if r.applies is True and r.replaces]
        return applied[-1] if applied else self.default

    def describe(self) -> str:
        """The effective default, and how it came about when the declaration does not say it (``0 (declared None;
        ModelConfig.__post_init__ sets it)``)."""
        if self.effective == self.default:
            return str(self.default)
        setters = dict.fromkeys(short(r.by) for r in self.rewrites if r.applies is True and r.replaces)
        return f"{self.effective} (declared {self.default}; {', '.join(setters)} sets it)"

    def may_become(self) -> str:
        """What the build's construction may set it to under conditions of its own (``False (SchedulerConfig.
        __post_init__, VllmConfig.__post_init__)``); "" when nothing may."""
        values: dict[str, dict[str, None]] = {}
        for r in self.rewrites:
            if r.applies is None and r.replaces:
                values.setdefault(r.value, {})[short(r.by)] = None
        return "; ".join(f"{value} ({', '.join(by)})" for value, by in values.items())


@dataclass(frozen=True)
class ConfigDefaults:
    config: str
    attribute: str
    """The name vLLM's code holds an instance under (``scheduler_config``; ``vllm_config``, ``engine_args``)."""
    at: str | None
    constructor: tuple[str, ...] = ()
    """What building one runs besides the generated ``__init__``: ``__post_init__``, model validators and the
    methods they call on ``self``, as dotted paths (readers there run when the consumer builds the config)."""
    fields: tuple[FieldDefault, ...] = ()

    def get(self, name: str) -> FieldDefault | None:
        return next((f for f in self.fields if f.name == name), None)


@dataclass(frozen=True)
class _Test:
    """One enclosing test: its node (None for a loop or handler, which is never known to run) and the branch."""

    node: ast.expr | None
    holds: bool
    text: str

    def render(self) -> str:
        if not self.holds:
            return f"not ({self.text})"
        return f"({self.text})" if isinstance(self.node, (ast.BoolOp, ast.IfExp, ast.NamedExpr)) else self.text


@dataclass(frozen=True)
class _Store:
    """An assignment met while building the config: ``<prefix>.<name> = value`` under ``tests``."""

    name: str
    value: ast.expr
    stmt: ast.stmt
    tests: tuple[_Test, ...]
    code: Code
    prefix: str


def _statements(body: list[ast.stmt], tests: tuple[_Test, ...]) -> Iterator[tuple[ast.stmt, tuple[_Test, ...]]]:
    """Every statement of a body with the tests it sits under (nested defs and classes left out)."""
    for stmt in body:
        yield stmt, tests
        if isinstance(stmt, (ast.If, ast.While)):
            text = ast.unparse(stmt.test)
            yield from _statements(stmt.body, tests + (_Test(stmt.test, True, text),))
            yield from _statements(stmt.orelse, tests + (_Test(stmt.test, False, text),))
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            loop = _Test(None, True, f"for {ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}")
            yield from _statements(stmt.body, tests + (loop,))
            yield from _statements(stmt.orelse, tests)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from _statements(stmt.body, tests)
        elif isinstance(stmt, ast.Try):
            yield from _statements(stmt.body + stmt.orelse + stmt.finalbody, tests)
            for handler in stmt.handlers:
                caught = f"except {ast.unparse(handler.type)}" if handler.type is not None else "except"
                yield from _statements(handler.body, tests + (_Test(None, True, caught),))
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                yield from _statements(case.body, tests + (_Test(None, True, f"case {ast.unparse(case.pattern)}"),))


def _headers(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of a statement that run where it stands (a compound statement's test, not its body)."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Match):
        return [stmt.subject]
    if isinstance(stmt, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    return [stmt]


def _self_name(node: FunctionNode) -> str | None:
    params = node.args.posonlyargs + node.args.args
    return params[0].arg if params else None


def _own_calls(stmt: ast.stmt, self_name: str) -> list[str]:
    """Methods a statement calls on ``self`` (``self._set_cudagraph_sizes()``)."""
    return [n.func.attr for header in _headers(stmt) for n in ast.walk(header)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == self_name]


def _validators(surface: StaticSurface, model: ClassModel) -> list[str]:
    """Names of the pydantic ``model_validator`` methods along the MRO (they run on every construction)."""
    names: list[str] = []
    for cls in reversed(surface.mro(model)[0]):
        for stmt in cls.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name not in names and any(
                    ast.unparse(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1] == "model_validator"
                    for d in stmt.decorator_list):
                names.append(stmt.name)
    return names


def _construction(surface: StaticSurface, owner: Found) -> list[Code]:
    """The methods building ``owner`` starts, in order: ``__init__`` (when written out), ``__post_init__``, the
    model validators (``_stores`` follows the methods they call on ``self``)."""
    model = surface.class_model(owner)
    names = ["__init__", "__post_init__", *(_validators(surface, model) if model is not None else [])]
    return [code for code in (method(surface, owner, n) for n in names) if code is not None]


@dataclass(frozen=True)
class _Built:
    """What building a class does: each assignment to an attribute of ``self`` (``through`` "") or of one of
    ``self``'s attributes (``through``: ``scheduler_config`` for ``self.scheduler_config.<name> = ...``), in the
    order they run, and the dotted paths of the methods that run. Read once per class: every config class asks
    for ``VllmConfig``'s."""

    stores: tuple[tuple[str, _Store], ...] = ()
    ran: tuple[str, ...] = ()


def _build(surface: StaticSurface, class_path: str) -> _Built:
    owner = surface.lookup(class_path)
    if not isinstance(owner, Found) or owner.kind != FoundKind.CLASS:
        return _Built()
    stores: list[tuple[str, _Store]] = []
    ran: list[str] = []

    def visit(code: Code, tests: tuple[_Test, ...], depth: int) -> None:
        ran.append(code.found.path)
        self_name = _self_name(code.node)
        if self_name is None:
            return
        for stmt, inner in _statements(code.node.body, tests):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    through = _through(target, self_name)
                    if isinstance(target, ast.Attribute) and through is not None:
                        prefix = f"{self_name}.{through}" if through else self_name
                        stores.append((through, _Store(target.attr, stmt.value, stmt, inner, code, prefix)))
            for name in _own_calls(stmt, self_name):
                callee = method(surface, owner, name)
                if callee is not None and callee.found.path not in ran and depth < _MAX_CALL_DEPTH:
                    visit(callee, inner, depth + 1)

    for code in _construction(surface, owner):
        if code.found.path not in ran:
            visit(code, (), 0)
    return _Built(tuple(stores), tuple(ran))


_BUILT = Fact("construction", _build, kept=False)
"""Kept in this process only: it holds parse trees, and the facts made from it are what the memo keeps."""


def _through(target: ast.expr, self_name: str) -> str | None:
    """"" for a target ``<self>.<name>``, the attribute for ``<self>.<attribute>.<name>``, else None."""
    receiver = target.value if isinstance(target, ast.Attribute) else None
    if isinstance(receiver, ast.Name) and receiver.id == self_name:
        return ""
    if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) and \
            receiver.value.id == self_name:
        return receiver.attr
    return None


def _stores(surface: StaticSurface, owner: Found, attribute: str | None) -> tuple[list[_Store], list[str]]:
    """The assignments to ``self.<name>`` (``attribute`` None) or ``self.<attribute>.<name>`` made while ``owner``
    is built, in the order they run, and the dotted paths of the methods that run."""
    built = surface.fact(_BUILT, owner.path)
    return [store for through, store in built.stores if through == (attribute or "")], list(built.ran)


def _literal(text: str | None) -> object:
    try:
        return ast.literal_eval(text) if text is not None else _UNKNOWN
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _UNKNOWN


ENVS = "vllm.envs"
_CONVERSIONS: dict[str, Callable[[Any], object]] = {"bool": bool, "int": int, "float": float, "str": str}


def _env_value(node: ast.expr) -> object:
    """The value of an ``environment_variables`` entry of ``vllm/envs.py`` when nothing is set: ``os.getenv(n,
    "1")`` is its default, through ``bool(int(...))``, ``.lower()`` and comparisons; ``_UNKNOWN`` otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Call):
        func = ast.unparse(node.func)
        if func in ("os.getenv", "os.environ.get", "getenv") and node.args:
            return _env_value(node.args[1]) if len(node.args) > 1 else None
        if func in _CONVERSIONS and len(node.args) == 1:
            inner = _env_value(node.args[0])
            try:
                return _UNKNOWN if inner is _UNKNOWN else _CONVERSIONS[func](inner)
            except (TypeError, ValueError):
                return _UNKNOWN
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("lower", "upper", "strip") and not node.args:
            inner = _env_value(node.func.value)
            return getattr(inner, node.func.attr)() if isinstance(inner, str) else _UNKNOWN
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _env_value(node.left), _env_value(node.comparators[0])
        compare = _COMPARE.get(type(node.ops[0]))
        if compare is None or _UNKNOWN in (left, right):
            return _UNKNOWN
        try:
            return bool(compare(left, right))
        except TypeError:
            return _UNKNOWN
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_env_value(e) for e in node.elts]
        return _UNKNOWN if _UNKNOWN in items else tuple(items)
    return _UNKNOWN


def env_defaults(surface: StaticSurface) -> dict[str, object]:
    """``envs.<NAME>`` -> what it is when the variable is not set, for the entries of the build's
    ``environment_variables`` table whose default can be read (vLLM 0.11.0: ``envs.VLLM_USE_V1`` is True)."""
    info = surface.index.module(ENVS)
    values: dict[str, object] = {}
    for stmt in info.tree.body if info is not None else []:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(value, ast.Dict):
            continue
        for key, entry in zip(value.keys, value.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(entry, ast.Lambda):
                found = _env_value(entry.body)
                if found is not _UNKNOWN:
                    values[f"envs.{key.value}"] = found
    return values


_ENV = Fact("environment-defaults", env_defaults, kept=False)
"""Read once per build, for every config class (kept in this process only, as what is made from it is kept)."""


def _truth(node: ast.expr, subject: str, value: object, env: dict[str, object] | None = None) -> bool | None:
    """Whether ``node`` is true when ``subject`` (``self.max_num_seqs``) holds ``value`` and the environment is
    unset (``env``: ``envs.VLLM_USE_V1`` -> True); None when it tests anything else or the value is not known."""
    env = env or {}
    if ast.unparse(node) in env:
        return bool(env[ast.unparse(node)])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _truth(node.operand, subject, value, env)
        return None if inner is None else not inner
    if isinstance(node, ast.BoolOp):
        parts = [_truth(v, subject, value, env) for v in node.values]
        decisive = isinstance(node.op, ast.Or)
        if decisive in parts:
            return decisive
        return None if None in parts else not decisive
    if value is _UNKNOWN:
        return None
    if ast.unparse(node) == subject:
        return bool(value)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and ast.unparse(node.left) == subject:
        other = _literal(ast.unparse(node.comparators[0]))
        if other is _UNKNOWN:
            return None
        compare = _COMPARE.get(type(node.ops[0]))
        try:
            return bool(compare(value, other)) if compare is not None else None
        except TypeError:
            return None
    return None


def _applies(store: _Store, default: str | None, env: dict[str, object]) -> bool | None:
    subject, value = f"{store.prefix}.{store.name}", _literal(default)
    verdicts = [None if t.node is None else _truth(t.node, subject, value, env) for t in store.tests]
    holds = [None if v is None else v is t.holds for v, t in zip(verdicts, store.tests)]
    return False if False in holds else (None if None in holds else True)


def _value_text(surface: StaticSurface, code: Code, value: ast.expr) -> str:
    """A value as the signature would show it (a name bound to a literal reads as the literal)."""
    defined = definition(code.found)
    return surface.callables.constant_text(defined.owner if defined is not None else None, value, code.module)


def _reads_self(node: ast.AST, prefix: str) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
            and ast.unparse(n.value) == prefix}


def _one_line_properties(surface: StaticSurface, model: ClassModel) -> Iterator[tuple[str, ast.expr]]:
    """(name, returned expression) of the properties along the MRO whose body is one ``return``."""
    for cls in surface.mro(model)[0]:
        for stmt in cls.node.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or not any(
                    ast.unparse(d).rsplit(".", 1)[-1] in _PROPERTIES for d in stmt.decorator_list):
                continue
            body = [s for s in stmt.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                yield stmt.name, body[0].value


def _attribute(surface: StaticSurface, owner: Found) -> str:
    """The name vLLM's code holds an instance of ``owner`` under: ``VllmConfig``'s field of that type, else the
    class name in snake case (``VllmConfig`` is ``vllm_config``, ``EngineArgs`` ``engine_args``)."""
    name = owner.path.rsplit(".", 1)[-1]
    top = surface.lookup(VLLM_CONFIG)
    sig = surface.signature(top) if isinstance(top, Found) and top.path != owner.path else None
    for param in sig.parameters if isinstance(sig, Signature) else ():
        options = re.split(r"[\s|\[\],]+", (param.annotation or "").replace('"', "").replace("'", ""))
        if name in {o.rsplit(".", 1)[-1] for o in options}:
            return param.name
    return re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", name).lower()


def _reads_in(node: ast.AST, scope: str, attribute: str, names: set[str],
              lines: set[int]) -> Iterator[tuple[str, str, int]]:
    """(function, name, line) of each read of ``<receiver>.<name>`` whose receiver's name ends with ``attribute``,
    under ``node``; the function is the outermost def under a module or class (a closure's reads count as its
    function's). Only the statements spanning one of ``lines`` (where the text matched) are looked into."""
    for child in ast.iter_child_nodes(node):
        end = getattr(child, "end_lineno", None)
        start = min([getattr(child, "lineno", 0)] + [d.lineno for d in getattr(child, "decorator_list", [])])
        if end is not None and not any(start <= line <= end for line in lines):
            continue
        if isinstance(child, ast.ClassDef):
            yield from _reads_in(child, f"{scope}.{child.name}", attribute, names, lines)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from ((f"{scope}.{child.name}", n.attr, n.lineno) for n in ast.walk(child)
                        if _reads_field(n, attribute, names))
        else:
            if isinstance(child, ast.Attribute) and _reads_field(child, attribute, names):
                yield scope, child.attr, child.lineno
            yield from _reads_in(child, scope, attribute, names, lines)


def _reads_field(node: ast.AST, attribute: str, names: set[str]) -> TypeGuard[ast.Attribute]:
    if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load) or node.attr not in names:
        return False
    receiver = node.value
    last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
    return last.endswith(attribute)


def _build_reads(surface: StaticSurface, attribute: str, names: set[str]) -> list[tuple[str, str, str]]:
    """(function, name read, file:line) for every read of the config's fields through its attribute name."""
    if not names:
        return []
    pattern = re.compile(re.escape(attribute.encode()) + rb"\s*\.\s*(?:" +
                         b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b")
    root, needle = surface.index.root, attribute.encode()
    found: list[tuple[str, str, str]] = []
    for path, data in surface.index.texts():
        lines = _lines(pattern, data) if needle in data else set()
        info = surface.index.module(module_name(root, path)) if lines and "__pycache__" not in path.parts else None
        if info is not None:
            found += [(function, name, f"{info.relpath}:{line}")
                      for function, name, line in _reads_in(info.tree, info.name, attribute, names, lines)]
    return found


def _lines(pattern: re.Pattern[bytes], data: bytes) -> set[int]:
    """The lines where ``pattern`` matches (lines counted from one match to the next, not from the start)."""
    lines: set[int] = set()
    line, counted = 1, 0
    for match in pattern.finditer(data):
        line += data.count(b"\n", counted, match.start())
        counted = match.start()
        lines.add(line)
    return lines


def _own_reads(surface: StaticSurface, model: ClassModel, names: set[str]) -> list[tuple[str, str, str]]:
    """``self.<name>`` read in the methods of the class and its bases."""
    found: list[tuple[str, str, str]] = []
    for cls in surface.mro(model)[0]:
        for stmt in cls.node.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or (self_name := _self_name(stmt)) is None:
                continue
            for node in ast.walk(stmt):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in names \
                        and isinstance(node.value, ast.Name) and node.value.id == self_name:
                    found.append((f"{cls.found.path}.{stmt.name}", node.attr, loc(cls.module, node) or ""))
    return found


def _rewrites(surface: StaticSurface, stores: list[_Store], name: str, default: str | None,
              env: dict[str, object]) -> tuple[Rewrite, ...]:
    return tuple(Rewrite(_value_text(surface, s.code, s.value), loc(s.code.module, s.stmt), s.code.found.path,
                         " and ".join(t.render() for t in s.tests), _applies(s, default, env),
                         name not in _reads_self(s.value, s.prefix))
                 for s in stores if s.name == name)


def _copies(stores: list[_Store], properties: list[tuple[str, ast.expr]], params: set[str]) -> dict[str, list[str]]:
    """For each parameter, the fields the caller cannot pass and one-line properties the build makes from it."""
    made: dict[str, list[str]] = {}
    sources = [(s.name, s.value, s.prefix) for s in stores] + [(n, v, "self") for n, v in properties]
    for target, value, prefix in sources:
        if target in params:
            continue
        for read in sorted(_reads_self(value, prefix) & params):
            if target not in made.setdefault(read, []):
                made[read].append(target)
    return made


def read(surface: StaticSurface, class_path: str, readers: str = ALL) -> ConfigDefaults:
    """The defaults of the config class at ``class_path``; ``readers`` names the fields whose reads are looked for
    (comma-separated; ``*`` every field, "" none). The walk over the build is the costly part: a probe that
    compares two builds asks for the defaults without readers first, then for the readers of what changed (the
    defaults themselves are read once: the answer without readers is the start of every other)."""
    if readers:
        return _with_reads(surface, class_path, surface.fact(FACT, class_path, ""), readers)
    owner = surface.lookup(class_path)
    model = surface.class_model(owner) if isinstance(owner, Found) and owner.kind == FoundKind.CLASS else None
    sig = surface.signature(owner) if model is not None and isinstance(owner, Found) else None
    if model is None or not isinstance(owner, Found) or not isinstance(sig, Signature):
        return ConfigDefaults(class_path, "", loc(owner) if isinstance(owner, Found) else None)
    attribute = _attribute(surface, owner)
    params = [p for p in sig.parameters if p.kind not in (ParamKind.VAR_POSITIONAL, ParamKind.VAR_KEYWORD)]
    stores, ran = _stores(surface, owner, None)
    top = surface.lookup(VLLM_CONFIG)
    if isinstance(top, Found) and top.kind == FoundKind.CLASS and top.path != owner.path:
        stores += _stores(surface, top, attribute)[0]
    copies = _copies(stores, list(_one_line_properties(surface, model)), {p.name for p in params})
    fields = []
    env = surface.fact(_ENV)
    for param in params:
        decl = declared(surface, owner, param.name)
        fields.append(FieldDefault(param.name, decl.default, decl.at,
                                   _rewrites(surface, stores, param.name, decl.default, env),
                                   copies=tuple(copies.get(param.name, []))))
    return ConfigDefaults(owner.path, attribute, loc(owner), tuple(ran), tuple(fields))


def _with_reads(surface: StaticSurface, class_path: str, config: ConfigDefaults, readers: str) -> ConfigDefaults:
    """``config`` with the reads of the fields ``readers`` names (and of the fields made from them)."""
    owner = surface.lookup(class_path)
    model = surface.class_model(owner) if isinstance(owner, Found) and owner.kind == FoundKind.CLASS else None
    if model is None or not config.fields:
        return config
    names = {f.name for f in config.fields}
    copies = {f.name: f.copies for f in config.fields}
    looked = names if readers == ALL else set(filter(None, readers.split(","))) & names
    wanted = looked | {c for n in looked for c in copies[n]}
    reads: dict[str, dict[str, str]] = {}
    for function, name, at in _own_reads(surface, model, wanted) + _build_reads(surface, config.attribute, wanted):
        reads.setdefault(name, {}).setdefault(function, at)
    fields = []
    for field in config.fields:
        seen = [Read(f, at) for f, at in reads.get(field.name, {}).items()]
        seen += [Read(f, at, copy) for copy in field.copies for f, at in reads.get(copy, {}).items()]
        fields.append(replace(field, reads=tuple(sorted(seen, key=lambda r: (r.function, r.at)))))
    return replace(config, fields=tuple(fields))


FACT = Fact("defaults", read)
