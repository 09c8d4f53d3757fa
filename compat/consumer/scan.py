"""Consumer scan: every place a consumer's source touches vLLM, found with ``ast`` (never imported).

The scan knows nothing about any vLLM build. It records what the consumer does (imports, calls
with their argument shapes, attribute reads and method calls on objects whose vLLM origin it can
trace, worker methods asked for by name) and the conditions that code runs under; the probes
judge each one against a build.
"""

from __future__ import annotations

import ast
import hashlib
import pickle
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from compat.consumer.guards import involves_target
from compat.consumer.index import ConsumerIndex, ConsumerModule
from compat.consumer.patches import model_patch
from compat.consumer.pins import choose_pin, written_for
from compat.consumer.record import ForwardReplacement, ModuleRecord
from compat.consumer.result import ConsumerClass, Guard, Kind, ReplyUse, Scan, ScanProblem, TouchPoint
from compat.consumer.state import class_state
from compat.consumer.steps import step_loops
from compat.consumer.values import ClassAttributes
from compat.consumer.visitor import walk_module
from compat.location import Location
from compat.sources import SourceTree
from compat.syntax import from_def, module_name, parse_source

_PASSES = 3
"""Walks over every module: ``self.x`` assigned in one may be read in another, before or after it."""
NOT_SHIPPED = frozenset({"tests", "test", "testing", "examples", "example", "docs", "doc", "benchmarks"})
"""Directories of a source tree that hold the consumer's tests, examples and docs, not what it ships and
imports: left out of the audit unless asked for (``scan_tree(..., everything=True)``, ``--all-files``)."""


def shipped(relpath: str) -> bool:
    """Whether a file of the tree is part of what the consumer ships (not under tests/, examples/...)."""
    parts = relpath.split("/")
    return not (NOT_SHIPPED & set(parts[:-1]) or parts[-1] == "conftest.py")


def _relpath(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def iter_files(tree: SourceTree) -> Iterator[tuple[Path, str, str]]:
    for path in tree.python_files():
        yield path, module_name(tree.root, path), _relpath(tree.root, path)


def scan_tree(tree: SourceTree, target: str = "vllm", everything: bool = False,
              progress: Callable[[int, int], None] | None = None) -> Scan:
    """Scan a consumer's source tree for every touchpoint of ``target``: the files it ships, or with
    ``everything`` its tests, examples and docs too. ``progress(done, total)``: after each walk of a module (each
    module is walked ``_PASSES`` times)."""
    index = ConsumerIndex()
    modules: list[ConsumerModule] = []
    problems: list[ScanProblem] = []
    left_out: list[str] = []
    count = 0
    every: list[ConsumerModule] = []
    for path, module, relpath in iter_files(tree):
        if not everything and not shipped(relpath):
            left_out.append(relpath)
            continue
        count += 1
        try:
            # As Python reads source: a UTF-8 byte-order mark is not part of the code.
            text = path.read_bytes().decode("utf-8-sig", errors="replace")
            module_ast = parse_source(text, relpath)
        except SyntaxError as exc:
            problems.append(ScanProblem(Location(relpath, exc.lineno or 0),
                                        f"SyntaxError: {exc.msg} (file skipped, the rest audited)"))
            continue
        except (OSError, ValueError) as exc:
            problems.append(ScanProblem(Location(relpath, 0), f"{type(exc).__name__}: {exc}"))
            continue
        source = ConsumerModule(module, relpath, module_ast, text.splitlines())
        every.append(source)
        index.add(source, text)  # every module: a class the consumer installs in vLLM may live in one without vLLM
        if target in text:
            modules.append(source)  # walked: only the modules that name vLLM touch it
    index.link()
    records = _walk(index, modules, target, progress)
    problems += [ScanProblem(location, f"the scan failed on this statement ({message}); the rest of the file and "
                                       "of the consumer was audited", trace)
                 for record in records for location, message, trace in record.failures]
    reply_uses: dict[Location, list[ReplyUse]] = {}
    for record in records:
        for location, uses in record.reply_uses.items():
            reply_uses.setdefault(location, []).extend(uses)
    touchpoints = [replace(tp, reply_uses=tuple(reply_uses.get(tp.location, ()))) if tp.kind == Kind.RPC else tp
                   for record in records for tp in record.touchpoints]
    touchpoints = helper_guards(touchpoints, [c for record in records for c in record.helper_calls], every)
    forwards: list[ForwardReplacement] = [f for record in records for f in record.forwards]
    patches = tuple(dict.fromkeys(p for record in records for p in record.class_patches))
    classes = tuple(
        ConsumerClass(info.qualname, Location(_module_relpath(modules, info.module), info.node.lineno),
                      tuple(sorted(info.methods)), info.bases, _extends(info.methods), class_state(info.methods),
                      tuple((name, from_def(node)) for name, node in sorted(info.methods.items())))
        for info in index.classes.values())
    read = (_guarded(problems, f.location, model_patch, index, f) for f in forwards)
    model_patches = tuple(patch for patch in read if patch is not None)
    loops = tuple(loop for source in modules
                  for loop in _guarded(problems, Location(source.relpath, 0), step_loops, source) or ())
    return Scan(name=tree.name, version=tree.version, origin=tree.origin, target=target,
                touchpoints=tuple(touchpoints), problems=tuple(problems), classes=classes,
                worker_extensions=tuple(dict.fromkeys(index.extensions)),
                written_for=written_for(tree.requires, target, tree.requires_at), files=count, root=str(tree.root),
                model_patches=model_patches, class_patches=patches, step_loops=loops,
                left_out=tuple(left_out), pin=choose_pin(tree.requires, tree.requires_at, target),
                name_at=tree.name_at, gates=tuple(g for record in records for g in record.gates),
                held_stores=tuple(dict.fromkeys(h for record in records for h in record.held_stores)))


SCAN_CODE = ("compat/consumer", "compat/syntax.py", "compat/location.py", "compat/sources")
"""What a scan's result depends on besides the consumer: a cached scan is keyed by these files' contents."""


def cached_scan(tree: SourceTree, target: str = "vllm", everything: bool = False,
                progress: Callable[[int, int], None] | None = None) -> Scan:
    """``scan_tree``, kept in the cache for a released consumer (an immutable archive from the package index),
    keyed by the release, the options and the scan's own code; other trees are scanned every time."""
    if not tree.origin.startswith("release "):
        return scan_tree(tree, target, everything, progress)
    from compat.cache import atomic_write_bytes, cache_dir

    key = hashlib.sha256("\0".join([tree.name, str(tree.version), tree.origin, str(tree.root), target,
                                    str(everything), sys.version, _scan_code_hash()]).encode()).hexdigest()[:32]
    path = cache_dir() / "scans" / f"{key}.pickle"
    try:
        cached = pickle.loads(path.read_bytes())
        if isinstance(cached, Scan):
            return cached
    except Exception:  # noqa: BLE001 - absent, cut short or from another version: scan again
        pass
    scan = scan_tree(tree, target, everything, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, pickle.dumps(scan, protocol=pickle.HIGHEST_PROTOCOL))
    return scan


def _extends(methods: dict[str, Any]) -> tuple[str, ...]:
    """The methods whose body calls the same method of the base (``super().m(...)``)."""
    found = []
    for name, node in methods.items():
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == name and \
                    isinstance(sub.func.value, ast.Call) and isinstance(sub.func.value.func, ast.Name) and \
                    sub.func.value.func.id == "super":
                found.append(name)
                break
    return tuple(sorted(found))


def _scan_code_hash() -> str:
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for name in SCAN_CODE:
        target = root / name
        for file in sorted(target.rglob("*.py")) if target.is_dir() else [target]:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def _guarded(problems: list[ScanProblem], where: Location, read: Any, *args: Any) -> Any:
    """``read(*args)``, or None with the exception on record as a scan problem at ``where``."""
    try:
        return read(*args)
    except Exception as exc:  # noqa: BLE001 - one error finding; the rest of the scan stands
        problems.append(ScanProblem(where, f"the scan failed here ({type(exc).__name__}: {exc}); the rest of the "
                                           "consumer was audited", traceback.format_exc()))
        return None


def _walk(index: ConsumerIndex, modules: list[ConsumerModule], target: str,
          progress: Callable[[int, int], None] | None = None) -> list[ModuleRecord]:
    """Walk every module ``_PASSES`` times; each walk sees the class attributes every earlier one learnt."""
    known = ClassAttributes()
    records: list[ModuleRecord] = []
    total, done = _PASSES * len(modules), 0
    for _ in range(_PASSES):
        records = []
        for source in modules:
            record = walk_module(index, known, source, target)
            known.update(record.attributes)
            records.append(record)
            done += 1
            if progress is not None:
                progress(done, total)
    return records


def helper_guards(touchpoints: list[TouchPoint], calls: list[tuple[str, tuple[Guard, ...]]],
                  modules: list[ConsumerModule]) -> list[TouchPoint]:
    """Give the touchpoints of each private helper of the consumer (``_name``) the guards of the build that every
    call of it runs under, where the helper is named nowhere but in those calls (a helper passed on as a value
    may run anywhere)."""
    by_helper: dict[str, list[tuple[Guard, ...]]] = {}
    for qualname, guards in calls:
        by_helper.setdefault(qualname, []).append(guards)
    shared: dict[str, tuple[Guard, ...]] = {}
    for qualname, each in by_helper.items():
        name = qualname.rpartition(".")[2]
        if not name.startswith("_") or name.startswith("__"):
            continue
        common = tuple(g for g in each[0] if involves_target(g.expr) and all(g in other for other in each[1:]))
        if common:
            shared[qualname] = common
    if not shared:
        return touchpoints
    named = Counter(n.attr if isinstance(n, ast.Attribute) else n.id for source in modules
                    for n in ast.walk(source.tree) if isinstance(n, (ast.Attribute, ast.Name))
                    and (n.attr if isinstance(n, ast.Attribute) else n.id).startswith("_"))
    shared = {q: g for q, g in shared.items() if named[q.rpartition(".")[2]] == len(by_helper[q])}
    out = []
    for tp in touchpoints:
        helper = next((q for q in shared if tp.context == q or tp.context.startswith(q + ".")), None)
        out.append(tp if helper is None else replace(tp, caller_guards=shared[helper], caller=helper))
    return out


def _module_relpath(modules: list[ConsumerModule], module: str) -> str:
    return next((m.relpath for m in modules if m.module == module), module)
