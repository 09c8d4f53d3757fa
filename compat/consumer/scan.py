"""Consumer scan: every place a consumer's source touches vLLM, found with ``ast`` (never imported).

The scan knows nothing about any vLLM build. It records what the consumer does (imports, calls
with their argument shapes, attribute reads and method calls on objects whose vLLM origin it can
trace, worker methods asked for by name) and the conditions that code runs under; the probes
judge each one against a build.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from compat.consumer.model import (
    ConsumerClass,
    Kind,
    Ref,
    ReplyUse,
    Scan,
    ScanProblem,
    TouchPoint,
)
from compat.consumer.patches import model_patch
from compat.consumer.values import Local, Value, _ClassInfo
from compat.consumer.visitor import EXTENSION_KEYWORDS, _FileScanner
from compat.location import Location
from compat.sources import SourceTree

_PASSES = 3


class _TreeScanner:
    """Scans every file of a consumer; shares class facts across files."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.touchpoints: list[TouchPoint] = []
        self.problems: list[ScanProblem] = []
        self.classes: dict[str, _ClassInfo] = {}
        self.return_annotations: dict[str, ast.expr] = {}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.extensions: list[tuple[str, Location]] = []
        self.reply_uses: dict[Location, list[ReplyUse]] = {}
        self.patches: list[tuple[str, Location, Ref | None, str]] = []
        self.function_files: dict[str, str] = {}
        self.modules: dict[str, tuple[ast.Module, list[str], str]] = {}

    def consumer_value(self, module: str, name: str) -> Value:
        qualname = f"{module}.{name}"
        known = qualname in self.classes or qualname in self.functions
        return Local(qualname) if known else None

    def is_class_like(self, path: str) -> bool:
        """Attribute access on a vLLM name is a member access when the name is not a module path."""
        last = path.rsplit(".", 1)[-1]
        return bool(last) and (last[0].isupper() or last.startswith("_") and last[1:2].isupper())

    def is_worker_extension(self, info: _ClassInfo) -> bool:
        names = {name for name, _ in self.extensions}
        return info.qualname in names or any(b in names for b in info.bases)

    def find_method(self, info: _ClassInfo, name: str) -> tuple[_ClassInfo, ast.AST] | None:
        seen: set[str] = set()
        stack = [info]
        while stack:
            current = stack.pop(0)
            if current.qualname in seen:
                continue
            seen.add(current.qualname)
            if name in current.methods:
                return current, current.methods[name]
            stack.extend(self.classes[b] for b in current.bases if b in self.classes)
        return None

    def defined_attrs(self, info: _ClassInfo) -> set[str]:
        names: set[str] = set()
        stack, seen = [info], set()
        while stack:
            current = stack.pop()
            if current.qualname in seen:
                continue
            seen.add(current.qualname)
            names.update(current.methods)
            names.update(current.attrs)
            for stmt in current.node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                        if isinstance(t, ast.Name):
                            names.add(t.id)
            for method in current.methods.values():
                for sub in ast.walk(method):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and isinstance(
                            sub.value, ast.Name) and sub.value.id in ("self", "cls"):
                        names.add(sub.attr)
            stack.extend(self.classes[b] for b in current.bases if b in self.classes)
        return names

    def index_module(self, module: str, relpath: str, tree: ast.Module) -> None:
        """First pass: the consumer's own classes, methods and return annotations."""

        def walk(body: list[ast.stmt], prefix: str, owner: _ClassInfo | None) -> None:
            for stmt in body:
                if isinstance(stmt, ast.ClassDef):
                    qualname = f"{prefix}.{stmt.name}"
                    bases = []
                    for base in stmt.bases:
                        if isinstance(base, ast.Name):
                            bases.append(f"{module}.{base.id}")
                    info = _ClassInfo(qualname, stmt, module, bases=tuple(bases))
                    self.classes[qualname] = info
                    walk(stmt.body, qualname, info)
                elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualname = f"{prefix}.{stmt.name}"
                    self.functions[qualname] = stmt
                    self.function_files[qualname] = relpath
                    if owner is not None:
                        owner.methods[stmt.name] = stmt
                    if stmt.returns is not None:
                        self.return_annotations[qualname] = stmt.returns
                elif isinstance(stmt, (ast.If, ast.Try)):
                    walk(stmt.body, prefix, owner)
                    walk(getattr(stmt, "orelse", []), prefix, owner)

        walk(tree.body, module, None)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg in EXTENSION_KEYWORDS and isinstance(kw.value, ast.Constant) and isinstance(
                            kw.value.value, str):
                        self.extensions.append((kw.value.value, Location(relpath, kw.value.lineno)))


def _module_name(root: Path, path: Path) -> str:
    try:
        rel = path.relative_to(root)
    except ValueError:
        return path.stem
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or path.stem


def _relpath(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def written_for(requires: tuple[str, ...], target: str) -> str | None:
    """The exact target version a consumer's metadata pins, e.g. 'vllm==0.11.0; extra == "datagen"'."""
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower() != target:
            continue
        pins = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if pins:
            return pins[0]
    return None


def iter_files(tree: SourceTree) -> Iterator[tuple[Path, str, str]]:
    for path in tree.python_files():
        yield path, _module_name(tree.root, path), _relpath(tree.root, path)


def scan_tree(tree: SourceTree, target: str = "vllm") -> Scan:
    """Scan a consumer's source tree for every touchpoint of ``target``."""
    scanner = _TreeScanner(target)
    parsed: list[tuple[str, str, ast.Module, list[str]]] = []
    count = 0
    for path, module, relpath in iter_files(tree):
        count += 1
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
            module_ast = ast.parse(text, filename=relpath)
        except SyntaxError as exc:
            scanner.problems.append(ScanProblem(Location(relpath, exc.lineno or 0),
                                                f"SyntaxError: {exc.msg} (file skipped, the rest audited)"))
            continue
        except (OSError, ValueError) as exc:
            scanner.problems.append(ScanProblem(Location(relpath, 0), f"{type(exc).__name__}: {exc}"))
            continue
        if target not in text:
            continue
        scanner.index_module(module, relpath, module_ast)
        parsed.append((module, relpath, module_ast, text.splitlines()))
    files = [_FileScanner(scanner, module, relpath, module_ast, lines) for module, relpath, module_ast, lines in parsed]
    for _ in range(_PASSES - 1):
        for file_scanner in files:
            file_scanner.run(emit=False)
    scanner.touchpoints.clear()
    for file_scanner in files:
        file_scanner.run(emit=True)
    touchpoints = [replace(tp, reply_uses=tuple(scanner.reply_uses.get(tp.location, ()))) if tp.kind == Kind.RPC
                   else tp for tp in scanner.touchpoints]
    patches = tuple(model_patch(scanner, *patch) for patch in scanner.patches)
    classes = tuple(
        ConsumerClass(info.qualname, Location(_module_relpath(parsed, info.module), info.node.lineno),
                      tuple(sorted(info.methods)), info.bases)
        for info in scanner.classes.values())
    extensions = tuple(dict.fromkeys(scanner.extensions))
    return Scan(name=tree.name, version=tree.version, origin=tree.origin, target=target,
                touchpoints=tuple(touchpoints), problems=tuple(scanner.problems), classes=classes,
                worker_extensions=extensions, written_for=written_for(tree.requires, target), files=count,
                root=str(tree.root), model_patches=patches)


def _module_relpath(parsed: list[tuple[str, str, ast.Module, list[str]]], module: str) -> str:
    return next((rel for mod, rel, _, _ in parsed if mod == module), module)



