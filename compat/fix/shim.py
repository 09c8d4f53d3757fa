"""The shim module: the names the patched consumer imports in place of vLLM's, the helpers every piece may use,
and the fixers' pieces, each with why it is there.

The shim must be safe wherever the consumer imports it, including modules that guard their vLLM use
(``if is_vllm_available():``) and run where vLLM is absent or older than the range. So it imports nothing of
vLLM at import: every vLLM name it uses is imported inside the function that needs it (a loader, or the
function itself, where the static reader of the audit sees the import as well), the names the consumer
imports from it are resolved by the module's ``__getattr__`` where the consumer's ``from ... import`` runs (so
under the consumer's own guards), and the range check runs at the first call that hands work to vLLM.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

from packaging.version import Version

from compat import __version__
from compat.errors import CompatError
from compat.fix.context import AuditedBuild, FixContext, span
from compat.fix.plan import FixerPlan, ShimPiece
from compat.vllm.surface import Found, Surface, relocated

LOADER_PREFIX = "_load_"
"""Module-level functions of the shim named so import vLLM's objects into the shim's globals at their first use
(``exports`` reads what each tries)."""

RUNTIME = '''
_LOADERS = {}
"""Name this module binds to one of vLLM's objects -> the function importing it from the running build."""
_EXPORTS = {}
"""Name the consumer imports from here -> the name (in ``_LOADERS``) of vLLM's object it is."""
_WRAPPED = {}
"""Name the consumer imports from here -> (vLLM's object, its adjustments' names, the context keywords)."""
_IN_RANGE = []


def _check_range():
    """Refuse a vLLM outside the audited builds: once per process, at the first call that hands work to vLLM,
    never at import (a consumer module that guards its vLLM use imports this module beside any vLLM, or none,
    and must keep importing). Only 1, true or yes in OUT_OF_RANGE_ENV turn the refusal into a warning."""
    if _IN_RANGE:
        return
    import vllm
    from packaging.version import Version

    try:
        running = Version(vllm.__version__).release
    except Exception as exc:  # noqa: BLE001 - an unreadable version is out of range too
        running, reason = None, f"its version {getattr(vllm, '__version__', None)!r} cannot be read ({exc})"
    else:
        reason = (f"vLLM {vllm.__version__} is outside the builds it re-audited clean "
                  f"{GENERATED_FOR[0]}..{GENERATED_FOR[-1]}" if GENERATED_FOR
                  else f"no build it was generated for ({', '.join(AUDITED)}) re-audited clean")
    known = [Version(v).release for v in GENERATED_FOR]
    left = next((why for v, why in NOT_CLEAN.items() if Version(v).release == running), None)
    if left is not None:
        reason = f"vLLM {vllm.__version__} was audited, but its re-audit with this shim is not clean: {left}"
    elif running is not None and known and min(known) <= running <= max(known):
        _IN_RANGE.append(True)
        return
    message = (f"{__name__}: {reason}; this shim was generated for {', '.join(GENERATED_FOR) or 'no build'}. "
               "Run `python -m compat.fix` against this vLLM before trusting its output.")
    if os.environ.get(OUT_OF_RANGE_ENV, "").strip().lower() in ALLOW_OUT_OF_RANGE:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        _IN_RANGE.append(True)
        return
    raise RuntimeError(f"{message} (set {OUT_OF_RANGE_ENV}=1, true or yes to run anyway; any other value, "
                       "0, false, no and empty included, keeps this refusal)")


def _vllm(name):
    """vLLM's object this module binds to ``name``, imported from the running build at its first use."""
    if name not in globals():
        _LOADERS[name]()
    return globals()[name]


def _uses_vllm(*names):
    """For a function here that names vLLM's objects: its first call checks the running vLLM and imports them
    (the module's import does neither)."""

    def wrap(function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            _check_range()
            for name in names:
                _vllm(name)
            return function(*args, **kwargs)

        return call

    return wrap


def __getattr__(name):
    """The names the consumer imports from here in place of vLLM's. ``from <shim> import X`` stands where the
    consumer imported X from vLLM, under the same guards: X is imported from the running build then (an
    ImportError is the one the consumer's own import would raise), and nothing is checked until it is used."""
    if name in _WRAPPED:
        raw, adjustments, context = _WRAPPED[name]
        value = _adjusted(name, _vllm(raw), tuple(globals()[a] for a in adjustments), context)
    elif name in _EXPORTS:
        value = _vllm(_EXPORTS[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_WRAPPED))


def _adjusted(name, target, adjustments, context):
    """The running build's ``target`` whose arguments each of ``adjustments`` adjusts in turn before it runs.

    A function stays a function. A class stays a class (``_subclass``): ``X(...)`` and the classmethods that
    construct through ``cls(...)`` adjust, then build the build's own class, so the objects are vLLM's own (they
    pickle, compare and ``type()`` as vLLM's); ``isinstance``/``issubclass`` answer as for the build's class;
    attributes, classmethods and static methods are the build's; a consumer's subclass that keeps the
    build's constructor is adjusted too."""

    def adjust(args, kwargs):
        _check_range()
        params = _parameters(target)
        taken = {n: kwargs.pop(n) for n in context if n in kwargs and n not in params}
        for adjustment in adjustments:
            args, kwargs = adjustment(target, params, args, kwargs, taken)
        return args, kwargs

    @functools.wraps(target)
    def call(*args, **kwargs):
        args, kwargs = adjust(args, kwargs)
        return target(*args, **kwargs)

    if not isinstance(target, type):
        return call
    try:
        return _subclass(name, target, adjust)
    except TypeError as exc:  # a class that refuses subclasses: the adjusted call is the best left
        warnings.warn(f"{__name__}: {name} is adjusted by a function, not a subclass ({exc})", RuntimeWarning,
                      stacklevel=3)
        return call


def _subclass(name, target, adjust):
    """``class name(target)`` whose construction runs ``adjust`` first (see ``_adjusted``). Its metaclass derives
    from the build's (from ABCMeta for a plain class, so that ``class Y(X, SomeABC)`` has no metaclass
    conflict)."""
    made = []

    def mine(cls):
        return bool(made) and cls is made[0]

    class Adjusting(abc.ABCMeta if type(target) is type else type(target)):
        def __call__(cls, *args, **kwargs):
            if mine(cls):
                args, kwargs = adjust(args, kwargs)
                return target(*args, **kwargs)
            if made and _keeps_constructor(cls, made[0]):
                args, kwargs = adjust(args, kwargs)
            return super().__call__(*args, **kwargs)

        def __instancecheck__(cls, obj):
            return isinstance(obj, target) if mine(cls) else super().__instancecheck__(obj)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, target) if mine(cls) else super().__subclasscheck__(sub)

        @property
        def __signature__(cls):
            try:
                if made and _keeps_constructor(cls, made[0]):
                    return inspect.signature(target)
                init = inspect.signature(cls.__init__)
                return init.replace(parameters=tuple(init.parameters.values())[1:])
            except (TypeError, ValueError):
                return None

    made.append(Adjusting(name, (target,), {"__module__": __name__, "__qualname__": name,
                                            "__doc__": target.__doc__}))
    return made[0]


def _keeps_constructor(cls, adjusted):
    """``cls`` (``adjusted`` or a subclass of it) is built by the build's own ``__init__`` and ``__new__``."""
    for klass in cls.__mro__:
        if klass is adjusted:
            return True
        if "__init__" in vars(klass) or "__new__" in vars(klass):
            return False
    return False
'''

HELPERS = '''
def _parameters(obj):
    """The parameters ``obj`` accepts, as the running build defines them (cached)."""
    key = id(obj)
    if key not in _PARAMETERS:
        _PARAMETERS[key] = inspect.signature(obj).parameters
    return _PARAMETERS[key]


_PARAMETERS = {}


def _required(obj, name):
    """Whether the running build's ``obj`` requires ``name`` (a parameter without a default)."""
    param = _parameters(obj).get(name)
    return param is not None and param.default is inspect.Parameter.empty and param.kind not in (
        inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _passed(obj, args, kwargs):
    """What a call of ``obj`` with ``args`` and ``kwargs`` passes, by parameter name."""
    try:
        return dict(inspect.signature(obj).bind_partial(*args, **kwargs).arguments)
    except TypeError:
        return dict(kwargs)


def _lookup(path):
    """The object at dotted ``path`` in the running build, or None when it has none there."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
'''

BASE_IMPORTS = ("import abc", "import functools", "import importlib", "import inspect", "import os",
                "import warnings")
USES_VLLM = "_lookup"
"""A helper that imports vLLM's modules: a function calling it hands work to vLLM, as one naming vLLM's objects."""


def raw_name(name: str) -> str:
    return f"_vllm_{name}"


def home(build: AuditedBuild, symbol: str) -> str | None:
    """The module ``build`` defines the name at ``symbol`` in (where the shim imports it from on that build)."""
    if isinstance(build.surface.lookup(symbol), Found):
        return symbol.rpartition(".")[0]
    moved = relocated(build.surface, symbol)
    return moved[0].rpartition(".")[0] if moved else None


def homes(builds: Sequence[AuditedBuild], symbol: str) -> list[tuple[str, list[str]]]:
    """Where each build defines the name at ``symbol`` (its module), newest home first, with the builds."""
    by_module: dict[str, list[str]] = {}
    name = symbol.rpartition(".")[2]
    for build in builds:
        module = home(build, symbol)
        if module is None:
            raise CompatError(f"{name} is not defined anywhere in vLLM {build.version}")
        by_module.setdefault(module, []).append(build.version)
    return sorted(by_module.items(), key=lambda item: max(Version(v) for v in item[1]), reverse=True)


def _loader(bound: Sequence[str], statements: Sequence[str]) -> str:
    """A loader: ``statements`` (imports of vLLM's objects, binding ``bound``) run at the first use, not at
    import; registered in ``_LOADERS`` under each name it binds."""
    function = f"{LOADER_PREFIX}{bound[0]}"
    lines = [f"def {function}():", f"    global {', '.join(bound)}"] + [f"    {s}" for s in statements]
    return "\n".join(lines) + "\n\n\n" + "\n".join(f"_LOADERS[{n!r}] = {function}" for n in bound)


def raw_import(ctx: FixContext, symbol: str) -> ShimPiece:
    """``_vllm_<name>``: the build's object at ``symbol``, imported (at its first use) from wherever the running
    build has it (an ``except ImportError`` chain over the modules the audited builds define it in, newest
    first)."""
    name = symbol.rpartition(".")[2]
    found = homes(ctx.builds, symbol)
    lines: list[str] = []
    for depth, (module, versions) in enumerate(found):
        indent = "    " * depth
        where = span([b for b in ctx.builds if b.version in versions])
        statement = f"from {module} import {name} as {raw_name(name)}  # {where}"
        if depth < len(found) - 1:
            lines += [f"{indent}try:", f"{indent}    {statement}", f"{indent}except ImportError:"]
        else:
            lines.append(f"{indent}{statement}")
    why = f"{symbol} lives in {', '.join(m for m, _ in found)} across the audited builds"
    return ShimPiece(f"raw:{name}", _loader([raw_name(name)], lines), why)


def export(name: str) -> ShimPiece:
    """``name`` itself, for a consumer that imports it from the shim unchanged (resolved where it is imported)."""
    return ShimPiece(f"export:{name}", f"_EXPORTS[{name!r}] = {raw_name(name)!r}",
                     f"{name} as the running build has it", weight=0)


def adjustment_name(name: str, fixer: str) -> str:
    return f"_adjust_{name}_{fixer}"


def _wrappers(plans: Sequence[FixerPlan]) -> list[ShimPiece]:
    """``name`` as the build's callable whose arguments every fixer's adjustment adjusts in turn (in fixer order):
    a subclass of a class, a function for a function (see ``_adjusted`` in the shim)."""
    adjusted: dict[str, list[tuple[str, ShimPiece]]] = {}
    for plan in plans:
        for piece in plan.pieces:
            if piece.wraps:
                adjusted.setdefault(piece.wraps, []).append((plan.fixer, piece))
    out = []
    for name, pieces in adjusted.items():
        context = tuple(dict.fromkeys(c for _, p in pieces for c in p.context))
        names = tuple(adjustment_name(name, fixer) for fixer, _ in pieces)
        code = f"_WRAPPED[{name!r}] = ({raw_name(name)!r}, {names!r}, {context!r})"
        out.append(ShimPiece(f"export:{name}", code, f"{name} as the running vLLM takes it, adjusted by: "
                                                     f"{', '.join(f for f, _ in pieces)} (see above)", weight=2))
    return out


def _merge(plans: Sequence[FixerPlan]) -> list[ShimPiece]:
    chosen: dict[str, ShimPiece] = {}
    for plan in plans:
        for piece in plan.pieces:
            old = chosen.get(piece.key)
            if old is None or piece.weight > old.weight:
                chosen[piece.key] = piece
            elif piece.weight == old.weight and piece.code != old.code:
                raise CompatError(f"two fixers disagree on the shim's {piece.key}")
    for piece in _wrappers(plans):
        chosen[piece.key] = piece
    order = {"raw": 0, "helper": 1, "export": 3}
    return sorted(chosen.values(), key=lambda p: order.get(p.key.split(":")[0], 2))


def _is_target(node: ast.stmt, target: str) -> TypeGuard[ast.Import | ast.ImportFrom]:
    """An import statement of ``target``'s modules (``from vllm.config import X``, ``import vllm.envs as e``)."""
    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [
        a.name for a in node.names] if isinstance(node, ast.Import) else []
    return bool(modules) and all(m == target or m.startswith(target + ".") for m in modules)


def _split_imports(lines: set[str], target: str) -> tuple[list[str], dict[str, str]]:
    """The pieces' import lines: those of other packages, which stay at the top, and those of vLLM, by the name
    each binds (imported inside the functions that use them, ``_localised``)."""
    eager, lazy = [], {}
    for line in sorted(lines):
        node = ast.parse(line).body[0]
        if not _is_target(node, target):
            eager.append(line)
            continue
        for alias in node.names:
            lazy[alias.asname or alias.name.split(".")[0]] = line
    return eager, lazy


def _bound_by_loaders(pieces: Sequence[ShimPiece]) -> set[str]:
    """Every name a loader of ``pieces`` binds (vLLM's objects this module imports at their first use)."""
    names: set[str] = set()
    for piece in pieces:
        for node in ast.parse(piece.code).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith(LOADER_PREFIX):
                names |= {n for g in node.body if isinstance(g, ast.Global) for n in g.names}
    return names


def _localised(piece: ShimPiece, loaded: set[str], imported: dict[str, str]) -> str:
    """The piece's code made safe to import: each function that uses vLLM's objects imports the pieces' vLLM
    names it uses in its own body (where the static reader sees them too) and is wrapped by ``_uses_vllm``, so
    its first call checks the running vLLM and imports the loaded names (``loaded``) it uses. Module-level code
    may use none of them (it would run at import)."""
    lines = piece.code.strip().split("\n")
    wraps: list[str] = []
    for node in reversed(ast.parse("\n".join(lines)).body):
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        local = sorted({imported[n] for n in used & set(imported)})
        uses_vllm = used & (loaded | set(imported) | {USES_VLLM})
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith(LOADER_PREFIX) or not uses_vllm:
                continue
            first = node.body[0]
            docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                first.value.value, str)
            at = (first.end_lineno or first.lineno) if docstring and len(node.body) > 1 else first.lineno - 1
            indent = " " * (node.body[-1].col_offset)
            lines[at:at] = [indent + line for line in local]
            names = ", ".join(repr(n) for n in sorted(used & loaded))
            wraps.insert(0, f"{node.name} = _uses_vllm({names})({node.name})")
        elif uses_vllm - {USES_VLLM} and not _registers_loader(node):
            raise CompatError(f"the shim's {piece.key} uses {', '.join(sorted(uses_vllm))} at import; vLLM's "
                              "objects may be used only inside functions")
    return "\n".join(lines) + ("\n\n\n" + "\n".join(wraps) if wraps else "")


def _type_checking(imported: dict[str, str]) -> str:
    """The pieces' vLLM imports under ``if TYPE_CHECKING:`` (what the functions import when they run), so that
    annotations naming them mean vLLM's classes to readers and type checkers; '' without any."""
    if not imported:
        return ""
    lines = "\n".join(f"    {line}" for line in sorted(set(imported.values())))
    head = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:  # imported by the functions that use them"
    return f"{head}\n{lines}\n"


def _registers_loader(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).startswith("_LOADERS[")


def assemble(ctx: FixContext, plans: Sequence[FixerPlan]) -> str:
    """The shim module's source."""
    pieces = _merge(plans)
    eager, imported = _split_imports({line for p in pieces for line in p.imports}, ctx.scan.target)
    loaded = _bound_by_loaders(pieces)
    versions = [b.version for b in ctx.builds]
    imports = sorted(set(BASE_IMPORTS) | set(eager))
    notes = [f"- {plan.fixer}: {note}" for plan in plans for note in plan.notes]
    consumer = f"{ctx.scan.name} {ctx.scan.version or ''}".strip()
    head = f'''"""vLLM compatibility shim for {consumer}, generated by compat {__version__}.

Generated for {span(ctx.builds)}: {", ".join(versions)}. It adapts to the vLLM it meets by feature detection
(signatures, attributes, module locations). Importing it imports nothing of vLLM: the names the consumer
imports from it are imported from the running build where the consumer imports them (under its own guards),
and the first call that hands work to vLLM checks that this vLLM is within what it was generated for.
Regenerate with ``python -m compat.fix`` rather than editing it.

{chr(10).join(notes)}
"""

from __future__ import annotations

{chr(10).join(imports)}
{_type_checking(imported)}
{range_lines(versions, versions, {})}
OUT_OF_RANGE_ENV = "VLLM_COMPAT_ALLOW_OUT_OF_RANGE"
ALLOW_OUT_OF_RANGE = ("1", "true", "yes")
"""The values of OUT_OF_RANGE_ENV (any case) that turn the out-of-range refusal into a warning."""
'''
    body = [textwrap.dedent(RUNTIME).strip(), textwrap.dedent(HELPERS).strip()]
    for piece in pieces:
        body.append(f"# {piece.why}\n{_localised(piece, loaded, imported)}")
    return head + "\n\n" + "\n\n\n".join(body) + "\n"


def range_lines(audited: Sequence[str], clean: Sequence[str], not_clean: dict[str, str]) -> str:
    """The shim's record of the builds it was made for: every build audited, those whose re-audit with the shim
    is clean (the only ones it runs on, with the patch releases between them) and why each other one is not."""
    def listed(versions: Sequence[str]) -> str:
        return "(" + "".join(f"{v!r}, " for v in versions).rstrip(" ") + ")"

    return (f"AUDITED = {listed(audited)}\nGENERATED_FOR = {listed(clean)}\n"
            f"NOT_CLEAN = {{{', '.join(f'{v!r}: {why!r}' for v, why in not_clean.items())}}}")


def restrict(text: str, audited: Sequence[str], not_clean: dict[str, str]) -> str:
    """A generated shim's source with its builds restricted to those whose re-audit is clean."""
    lines = text.split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("AUDITED = "))
    clean = [v for v in audited if v not in not_clean]
    lines[first:first + 3] = range_lines(audited, clean, not_clean).split("\n")
    return "\n".join(lines)


@dataclass(frozen=True)
class Export:
    """A name the consumer imports from the shim in place of vLLM's, as the shim's source defines it."""

    name: str
    candidates: tuple[str, ...]
    """The vLLM paths the shim's loader tries, in order: the first a build has is what the shim gives there."""
    wrapped: bool
    """A call of it is the shim's adjusted call (a wrapped callable), not a plain call of vLLM's object."""

    def on(self, surface: Surface) -> str | None:
        """The vLLM path the shim gives for the name on the build ``surface`` reads (None: it has none)."""
        return next((c for c in self.candidates if isinstance(surface.lookup(c), Found)), None)


def exports(text: str) -> tuple[Export, ...]:
    """The names a generated shim's source serves in place of vLLM's (``_EXPORTS``, ``_WRAPPED``), each with
    the imports its loader tries: read from the shim itself, so a tree patched by an earlier run reads the same."""
    tree = ast.parse(text)
    loaded: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith(LOADER_PREFIX):
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                    for alias in sub.names:
                        key = alias.asname or alias.name
                        loaded[key] = loaded.get(key, ()) + (f"{sub.module}.{alias.name}",)
    found = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)):
            continue
        registry, slot = ast.unparse(node.targets[0].value), node.targets[0].slice
        if registry not in ("_EXPORTS", "_WRAPPED") or not isinstance(slot, ast.Constant):
            continue
        raw = node.value.elts[0] if isinstance(node.value, ast.Tuple) else node.value
        if isinstance(raw, ast.Constant) and raw.value in loaded:
            found.append(Export(str(slot.value), loaded[raw.value], registry == "_WRAPPED"))
    return tuple(found)


PINNED_PREFIX = "_PINNED_"
"""The defaults fixer's table of switches a wrapped config keeps as the consumer was written against them
(``_PINNED_CacheConfig = {'enable_extensible_kv_cache': False}``), which the wrapper passes where the build's
class has the field and the caller passes none."""


def pinned(text: str) -> dict[str, dict[str, str]]:
    """A generated shim's pinned defaults, read from the shim itself: {config class name: {field: literal}}."""
    found: dict[str, dict[str, str]] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id.startswith(PINNED_PREFIX) and isinstance(node.value, ast.Dict):
            config = node.targets[0].id.removeprefix(PINNED_PREFIX)
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    found.setdefault(config, {})[key.value] = ast.unparse(value)
    return found

