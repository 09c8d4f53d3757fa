"""The fix: audit the consumer against every build of a range, let each fixer plan, make the shim and the
edits, and re-audit the patched consumer against the same builds.

``plan_fix`` does the planning and editing in memory (nothing is written); ``write_copy`` and
``write_in_place`` write the result (atomically, file by file); ``verify`` re-audits a patched tree.
"""

from __future__ import annotations

import ast
import difflib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import libcst as cst
from packaging.version import InvalidVersion, Version

from compat import buildspec
from compat.audit.pipeline import DEFAULT_CONSUMER, AuditOptions, Auditor
from compat.cache import atomic_write_text
from compat.consumer.pins import resolve_pin
from compat.consumer.result import Kind, Scan
from compat.consumer.scan import scan_tree
from compat.consumer.source import open_consumer
from compat.errors import CompatError
from compat.findings import Finding, Status
from compat.fix.context import FAILING, AuditedBuild, FixContext, Shim
from compat.fix.edits import Edit, ImportShim, ReplaceStatements, RouteImport
from compat.fix.plan import FixerPlan
from compat.fix.shim import Export, assemble, exports, pinned, restrict
from compat.matrix.builds import Request, columns_for, local_spec, resolved
from compat.policy import DEFAULT, FailOn, fails
from compat.sources import SourceTree, index, tree_from_path
from compat.vllm.builds import OpenedBuild, open_build
from compat.vllm.surface import Found, Surface


@dataclass(frozen=True)
class FixOptions:
    consumer: str = DEFAULT_CONSUMER
    vllm: str | None = None
    """A build spec (``compat.buildspec``): a specifier (every release matching it), ``newest:SPEC``, a version,
    or one build (wheel, sdist, checkout, URL, ``git+URL@REF``, installed). Default: every release from the one
    the consumer pins (``>=0.11.0`` for speculators 0.3.0)."""
    fail_on: FailOn = DEFAULT
    """What the verification fails on (``compat.policy``); the fixers try every broken or changed finding."""
    without: tuple[str, ...] = ()
    """Fixers to leave out (to see what a fix is for)."""
    target: str = "vllm"


@dataclass(frozen=True)
class Fix:
    """A planned fix: the plans, and each changed file's text before and after (the shim's before is '')."""

    tree: SourceTree
    ctx: FixContext
    plans: tuple[FixerPlan, ...]
    files: dict[str, tuple[str, str]] = field(default_factory=dict)
    fail_on: FailOn = DEFAULT
    """What its verification fails on (``compat.policy``)."""
    resolved: str = ""
    """What ``--vllm`` resolved to, in words."""

    @property
    def changed(self) -> bool:
        return any(old != new for old, new in self.files.values())

    def diff(self) -> str:
        out: list[str] = []
        for rel, (old, new) in sorted(self.files.items()):
            if old != new:
                out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                            f"a/{rel}" if old else "/dev/null", f"b/{rel}")
        return "".join(out)


@dataclass(frozen=True)
class Verification:
    """The patched consumer re-audited: what still fails although a fixer claims it, and what no fixer handles."""

    builds: tuple[str, ...]
    claimed: tuple[tuple[str, Finding], ...]
    unhandled: tuple[tuple[str, Finding], ...]
    accepted: tuple[tuple[str, Finding, str], ...] = ()
    """Failing findings a fixer accepted on purpose, with its reason."""
    fail_on: FailOn = DEFAULT

    @property
    def ok(self) -> bool:
        return not self.claimed

    def failing(self) -> list[tuple[str, Finding]]:
        """What is left that fails under ``fail_on`` (``compat.policy``): claimed by a fixer, or handled by none,
        which counts as at least ``changed`` (no fixer says why it may stay)."""
        return [(v, f) for v, f in self.claimed if fails(f.status, self.fail_on)] + \
            [(v, f) for v, f in self.unhandled if fails(_at_least_changed(f.status), self.fail_on)]

    @property
    def clean(self) -> bool:
        return self.ok and not self.unhandled

    def not_clean(self) -> dict[str, str]:
        """The builds whose re-audit is not clean, each with what is left there (the first finding, and a count)."""
        left: dict[str, list[Finding]] = {}
        for version, finding in self.claimed + self.unhandled:
            left.setdefault(version, []).append(finding)
        return {v: f"{fs[0].status.value} {fs[0].check} {fs[0].symbol} at {fs[0].consumer_location}"
                   + (f" and {len(fs) - 1} more" if len(fs) > 1 else "")
                for v, fs in sorted(left.items(), key=lambda item: _order(item[0]))}


def _order(version: str) -> tuple[int, Version | str]:
    try:
        return 0, Version(version)
    except InvalidVersion:
        return 1, version


def _at_least_changed(status: Status) -> Status:
    return status if status.rank <= Status.CHANGED.rank else Status.CHANGED


def restricted(fix: Fix, verification: Verification) -> Fix:
    """The fix with its shim's builds restricted to those whose re-audit is clean (``shim.restrict``)."""
    not_clean = verification.not_clean()
    path = fix.ctx.shim.path
    if not not_clean or path not in fix.files:
        return fix
    old, text = fix.files[path]
    files = dict(fix.files)
    files[path] = (old, restrict(text, verification.builds, not_clean))
    return replace(fix, files=files)


def resolve_builds(spec: str, target: str = "vllm") -> tuple[list[str], str]:
    """What ``open_build`` opens for each build ``spec`` names (``compat.buildspec``: a specifier is every matching
    release, as in every tool), oldest first, and the line saying what it resolved to."""
    request = Request([spec], target=target)
    parsed = buildspec.parse(spec)
    columns = columns_for(parsed, request)
    if not columns:
        raise CompatError(f"--vllm {spec!r}: no release of {target} matches")
    return [local_spec(c, request) for c in columns], resolved(parsed, columns)


def audit_range(scan: Scan, spec: str, target: str = "vllm", said: list[str] | None = None
                ) -> tuple[AuditedBuild, ...]:
    """The consumer audited against every build ``spec`` names, oldest first (what it resolved to appended to
    ``said``)."""
    auditor = Auditor(AuditOptions(confirm="never", target=target))
    builds = []
    specs, line = resolve_builds(spec, target)
    if said is not None:
        said.append(line)
    for one in specs:
        opened = open_build(one, target)
        result = auditor.run(scan, opened)
        builds.append(AuditedBuild(result.build.version or one, opened.surface, result.findings))
    return tuple(builds)


def shim_location(scan: Scan, tree: SourceTree) -> Shim:
    """The shim goes into the consumer's top package (or beside a single-file consumer)."""
    touched = sorted({tp.location.file for tp in scan.touchpoints})
    top = touched[0].split("/")[0] if touched and "/" in touched[0] else ""
    if top and (tree.root / top / "__init__.py").exists():
        return Shim(f"{top}._vllm_compat", f"{top}/_vllm_compat.py")
    return Shim("_vllm_compat", "_vllm_compat.py")


def plan_fix(options: FixOptions) -> Fix:
    """Audit, plan every fixer, and edit the consumer's files in memory."""
    from compat.fix.fixer import all_fixers

    tree = open_consumer(options.consumer, options.target)
    scan = resolve_pin(scan_tree(tree, options.target), lambda: index.releases(options.target))
    spec = options.vllm or (f">={scan.written_for}" if scan.written_for else "latest")
    shim = shim_location(scan, tree)
    unknown = set(options.without) - {f.name for f in all_fixers()}
    if unknown:
        raise CompatError(f"--without {', '.join(sorted(unknown))}: no such fixer "
                          f"(fixers: {', '.join(f.name for f in all_fixers())})")
    active = tuple(f.name for f in all_fixers() if f.name not in options.without)
    said: list[str] = []
    ctx = FixContext(_outside(scan, shim.path), tuple(_without_findings_in(b, shim.path)
                                                      for b in audit_range(scan, spec, options.target, said)),
                     shim, active)
    plans = tuple(p for p in (f.plan(ctx) for f in all_fixers() if f.name in active) if not p.empty)
    files = edit_files(tree.root, ctx, plans)
    if any(rel != shim.path and old != new for rel, (old, new) in files.items()) and _generated(tree.root / shim.path):
        raise CompatError(f"{tree.root / shim.path}: this consumer was already patched by compat.fix, and the new "
                          f"fix for {ctx.versions} needs more edits; fix the original sources instead (a new shim "
                          "would drop what the earlier edits rely on)")
    return Fix(tree, ctx, plans, files, options.fail_on, said[0])


def _outside(scan: Scan, path: str) -> Scan:
    """The scan without the shim's own code: the shim is generated, fixers never edit it."""
    return replace(scan, touchpoints=tuple(tp for tp in scan.touchpoints if tp.location.file != path))


def _without_findings_in(build: AuditedBuild, path: str) -> AuditedBuild:
    return replace(build, findings=tuple(f for f in build.findings
                                         if (f.consumer_location or "").partition(":")[0] != path))


def _generated(path: Path) -> bool:
    """Whether ``path`` is a shim this tool generated."""
    try:
        return path.read_text(encoding="utf-8").startswith('"""vLLM compatibility shim for ')
    except OSError:
        return False


def _merged(edits: Sequence[Edit]) -> list[Edit]:
    """One import edit per import statement, naming every name routed from it."""
    imports: dict[tuple[str, int, str], RouteImport] = {}
    others: list[Edit] = []
    for edit in edits:
        if isinstance(edit, RouteImport):
            key = (edit.file, edit.line, edit.module)
            old = imports.get(key)
            names = tuple(dict.fromkeys((old.names if old else ()) + edit.names))
            imports[key] = RouteImport(edit.file, edit.line, edit.pattern, module=edit.module, names=names,
                                       shim=edit.shim)
        else:
            others.append(edit)
    return others + list(imports.values())


def _superseded(edits: Sequence[Edit]) -> list[Edit]:
    """The edits without those inside code another edit replaces as a whole (a fixer that rewrites a loop takes
    over what another planned for a line of it)."""
    replacing = [e for e in edits if isinstance(e, ReplaceStatements) and e.end_line]
    return [e for e in edits if not any(r.supersedes(e) for r in replacing)]


def edit_files(root: Path, ctx: FixContext, plans: Sequence[FixerPlan]) -> dict[str, tuple[str, str]]:
    """Each edited file's text before and after, and the shim's (bottom-up per file, so lines stay valid)."""
    edits = _merged(_superseded([e for plan in plans for e in plan.edits]))
    files: dict[str, tuple[str, str]] = {}
    for rel in sorted({e.file for e in edits}):
        old = (root / rel).read_text(encoding="utf-8")
        module = cst.parse_module(old)
        mine = sorted((e for e in edits if e.file == rel), key=lambda e: -e.line)
        for edit in mine + [ImportShim(rel, 0, ctx.shim.import_line, import_line=ctx.shim.import_line,
                                         alias=ctx.shim.alias)]:
            module = edit.apply(module)
        files[rel] = (old, module.code)
    if files:
        shim_old = (root / ctx.shim.path).read_text(encoding="utf-8") if (root / ctx.shim.path).exists() else ""
        files[ctx.shim.path] = (shim_old, assemble(ctx, plans))
    return files


def write_copy(fix: Fix, dest: Path) -> Path:
    """A patched copy of the consumer's tree at ``dest`` (built beside it, then renamed into place)."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise CompatError(f"--apply {dest}: exists and is not empty")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}-") as tmp:
        staged = Path(tmp) / "tree"
        shutil.copytree(fix.tree.root, staged, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
        for rel, (_, new) in fix.files.items():
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            (staged / rel).write_text(new, encoding="utf-8")
        if dest.exists():
            dest.rmdir()
        staged.rename(dest)
    return dest


def write_in_place(fix: Fix) -> list[Path]:
    """Write the changed files into the consumer's own tree (each file atomically)."""
    written = []
    for rel, (old, new) in fix.files.items():
        if old != new:
            atomic_write_text(fix.tree.root / rel, new)
            written.append(fix.tree.root / rel)
    return written


def verify(patched: Path, fix: Fix) -> Verification:
    """Re-audit the patched tree against every build the fix was planned for.

    The static reader cannot see through the shim, so each build is audited on a view of the patched tree (the
    same files and lines, ``_view_scan``): every name the consumer imports from the shim reads as an import of
    the vLLM object the shim gives it on that build, so each use of it (``X.create(...)``, ``isinstance(o, X)``,
    ``class Y(X)``, the attributes of what ``X(...)`` returns) is audited against that build's object. The shim
    is audited with the consumer (its vLLM imports sit in the functions that use them, where the reader sees
    them); no fixer claims its findings, so a failing one is listed as handled by none. A direct call of a
    wrapped name is a call of the shim's adjustment, planned from the findings of that very call, and is left
    out, as every call of the shim's functions is.
    """
    auditor = Auditor(AuditOptions(confirm="never", target=fix.ctx.scan.target))
    claims = [c for plan in fix.plans for c in plan.claims]
    accepting = [(c, why) for plan in fix.plans for c, why in plan.accepted]
    claimed, unhandled, accepted = [], [], []
    shim = Path(patched) / fix.ctx.shim.path
    served = exports(shim.read_text(encoding="utf-8")) if shim.exists() else ()
    pins = pinned(shim.read_text(encoding="utf-8")) if shim.exists() else {}
    views: dict[tuple[tuple[str, str | None], ...], Scan] = {}
    with tempfile.TemporaryDirectory(prefix="compat-verify-") as tmp:
        for build in fix.ctx.builds:
            given = tuple((e.name, e.on(build.surface)) for e in served)
            if given not in views:
                views[given] = _view_scan(Path(patched), fix, served, dict(given), Path(tmp) / f"view-{len(views)}")
            scan = replace(views[given], written_for=fix.ctx.scan.written_for,
                           settings=shim_settings(pins, build.surface))
            result = auditor.run(scan, OpenedBuild(build.surface))
            for finding in result.findings:
                if finding.status not in FAILING and not fails(finding.status, fix.fail_on):
                    continue
                why = next((why for c, why in accepting if c.covers(finding)), None)
                if any(c.covers(finding) for c in claims) and not _in_shim(finding, fix):
                    claimed.append((build.version, finding))
                elif why is not None:
                    accepted.append((build.version, finding, why))
                else:
                    unhandled.append((build.version, finding))
    return Verification(tuple(b.version for b in fix.ctx.builds), tuple(claimed), tuple(unhandled),
                        tuple(accepted), fix.fail_on)


def shim_settings(pins: dict[str, dict[str, str]], surface: Surface) -> tuple[tuple[str, str, str], ...]:
    """What the shim's wrappers give the consumer's configs on the build ``surface`` reads: each pinned field the
    build's class has (the wrapper passes it only there), so the re-audit reads the shim's own settings."""
    out = []
    for config, fields in sorted(pins.items()):
        cls = surface.lookup(f"vllm.config.{config}")
        sig = surface.signature(cls) if isinstance(cls, Found) else None
        params = {p.name for p in getattr(sig, "parameters", ())}
        out += [(config, name, value) for name, value in sorted(fields.items()) if name in params]
    return tuple(out)


def _in_shim(finding: Finding, fix: Fix) -> bool:
    return (finding.consumer_location or "").partition(":")[0] == fix.ctx.shim.path


def _view_scan(patched: Path, fix: Fix, served: Sequence[Export], given: dict[str, str | None], dest: Path) -> Scan:
    """The scan of a copy of ``patched`` at ``dest`` in which each import of a name ``served`` from the shim reads
    as the import of ``given[name]`` (the vLLM object the shim gives on one build); without the calls of wrapped
    names in the files that import them from the shim."""
    view = dest / patched.name
    shutil.copytree(patched, view, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    wrapped = {e.name for e in served if e.wrapped}
    adjusted: dict[str, set[str]] = {}
    tree = tree_from_path(view)
    for path in tree.python_files():
        rel = path.relative_to(tree.root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        if rel != fix.ctx.shim.path and fix.ctx.shim.module in text:
            new, names = _through_shim(text, fix.ctx.shim.module, given)
            path.write_text(new, encoding="utf-8")
            adjusted[rel] = {str(given[n]) for n in names & wrapped}
    scan = scan_tree(tree, fix.ctx.scan.target)
    return replace(scan, touchpoints=tuple(tp for tp in scan.touchpoints if not (
        tp.kind == Kind.CALL and tp.symbol in adjusted.get(tp.location.file, ()))))


def _through_shim(text: str, shim: str, given: dict[str, str | None]) -> tuple[str, set[str]]:
    """``text`` with each ``from <shim> import X`` that has its lines to itself read as ``from <module> import X``
    (``given[X]`` is ``<module>.X``), on the same lines (the first, then blank ones); and the names rewritten."""
    lines = text.split("\n")
    names: set[str] = set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text, names
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.module == shim and not node.level
                and all(given.get(a.name) for a in node.names) and node.end_lineno is not None):
            continue
        first, last = lines[node.lineno - 1].encode(), lines[node.end_lineno - 1].encode()
        before, after = first[:node.col_offset].decode(), last[node.end_col_offset or 0:].decode().strip()
        if before.strip() or (after and not after.startswith("#")):
            continue
        imports = [f"from {str(given[a.name]).rpartition('.')[0]} import {a.name}" + (
            f" as {a.asname}" if a.asname else "") for a in node.names]
        lines[node.lineno - 1] = before + "; ".join(imports)
        for i in range(node.lineno, node.end_lineno):
            lines[i] = ""
        names |= {a.name for a in node.names}
    return "\n".join(lines), names
