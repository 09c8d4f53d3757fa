"""Small readings of Python syntax that both sides need: the consumer scan and the static reading of vLLM."""

from __future__ import annotations

import ast
import gc
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from compat.signature import CallShape, Parameter, ParamKind, Signature

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def parse_source(source: str | bytes, filename: str) -> ast.Module:
    """Parse someone else's source without printing its warnings (an invalid escape sequence in a consumer's
    string is a SyntaxWarning the audit has no use for); syntax errors still raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(source, filename=filename)


_paused = threading.Lock()
_pausing = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while parse trees are built and read (back on, if it was, when the
    last of nested or concurrent users leaves). A cold audit parses some 160 modules of two builds into about
    900,000 objects that live until it ends; the collector walks every one of them each time their number grows
    by a quarter: 8 full passes, 2.5 s of a 7 s audit, freeing little. What does form cycles (a build's surface and
    its readers hold each other, and its parse trees) is collected once, when the last user leaves: without that,
    the matrix over 35 builds from an empty memo peaked at 3.5 GB (217 MB before the pause; 441 MB with the
    collection, over 5 builds). That collection looks only at what was made inside: what lived before is frozen
    (``gc.freeze``) on entry and put back after it. A full collection of the whole heap, which would walk everything
    a long process holds (a test session's many builds: 30 s a collection, were it once per audit), follows only
    when the process has grown by half since the last one (what an audit drops after leaving, a matrix's build
    opened before it, is freed then): its cost stays in proportion to what was allocated."""
    global _pausing, _was_enabled
    with _paused:
        if _pausing == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
            if _was_enabled:
                gc.freeze()
        _pausing += 1
    try:
        yield
    finally:
        with _paused:
            _pausing -= 1
            if _pausing == 0 and _was_enabled:
                gc.collect()  # what the pause made and dropped: a matrix's 35 audits would otherwise pile it up
                gc.unfreeze()
                _collect_if_grown()
                gc.enable()


_GROWTH = 1.5
_after_full = 0
"""The process's resident bytes after the last full collection (0: none yet)."""


def _collect_if_grown() -> None:
    """A full collection where the process has grown by ``_GROWTH`` since the last (always where its resident size
    cannot be read)."""
    global _after_full
    size = _resident()
    if size is None or size >= _GROWTH * _after_full:
        gc.collect()
        _after_full = _resident() or 0


def _resident() -> int | None:
    """This process's resident set in bytes (Linux's ``/proc``), or None."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def module_name(root: Path, path: Path) -> str:
    """The dotted module a file under ``root`` is imported as (``pkg/sub/__init__.py`` is ``pkg.sub``); a file
    outside ``root`` is named by its stem."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return path.stem
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or path.stem


def is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:`` (names under it do not exist at run time)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def absolute_module(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The module a relative import (``from ..x import y`` has level 2, name ``x``) names, seen from ``module``."""
    if not level:
        return name or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _opaque(_mapping: ast.expr) -> Sequence[str] | None:
    return None


def call_shape(node: ast.Call, spread: Callable[[ast.expr], Sequence[str] | None] = _opaque) -> CallShape:
    """How a call passes its arguments: positional count, keyword names, ``*args``, ``**kwargs``.

    ``spread`` gives the keys a ``**mapping`` argument passes when the caller can see every one of them (None when
    it cannot): they bind like keywords written out, so a key a build no longer accepts is reported where it is
    built; ``star_kwargs`` stays for a mapping that remains opaque, so a missing parameter is not claimed."""
    keywords: list[str] = []
    opaque = False
    for keyword in node.keywords:
        keys = [keyword.arg] if keyword.arg is not None else spread(keyword.value)
        if keys is None:
            opaque = True
            continue
        keywords += [key for key in keys if key not in keywords]
    return CallShape(positional=sum(1 for a in node.args if not isinstance(a, ast.Starred)),
                     keywords=tuple(keywords), star_args=any(isinstance(a, ast.Starred) for a in node.args),
                     star_kwargs=opaque)


def called_name(node: ast.Call) -> str:
    """The last name of what a call calls: ``f`` for ``f(x)`` and ``a.b.f(x)``, "" for ``g()(x)``."""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def annotation_text(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ast.unparse(node)


def from_def(node: FunctionNode) -> Signature:
    """The parameters a def declares, in ``inspect`` order and kinds."""
    args = node.args
    params: list[Parameter] = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for index, (arg, default) in enumerate(zip(positional, defaults)):
        kind = ParamKind.POSITIONAL_ONLY if index < len(args.posonlyargs) else ParamKind.POSITIONAL_OR_KEYWORD
        params.append(_param(arg, kind, default))
    if args.vararg:
        params.append(_param(args.vararg, ParamKind.VAR_POSITIONAL, None))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        params.append(_param(arg, ParamKind.KEYWORD_ONLY, default))
    if args.kwarg:
        params.append(_param(args.kwarg, ParamKind.VAR_KEYWORD, None))
    returns = annotation_text(node.returns) if node.returns is not None else None
    return Signature(tuple(params), returns)


def _param(arg: ast.arg, kind: ParamKind, default: ast.expr | None) -> Parameter:
    annotation = annotation_text(arg.annotation) if arg.annotation is not None else None
    return Parameter(arg.arg, kind, default is not None, ast.unparse(default) if default is not None else None,
                     annotation)


def walk_shallow(node: ast.AST) -> Iterator[ast.AST]:
    """Like ast.walk, without descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        current = stack.pop()
        yield current
        if not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(current))
