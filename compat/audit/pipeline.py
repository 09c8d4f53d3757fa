"""The audit: scan a consumer, open a vLLM build, run every probe, collect findings.

``Auditor.run()`` is the whole pipeline; the CLI in ``compat.audit`` only parses flags and renders.
"""

from __future__ import annotations

import importlib.metadata
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from compat import __version__, sources
from compat.audit import allowlist
from compat.consumer.guards import GuardExpr, HasAttr, Imports, evaluate, render
from compat.consumer.model import Scan, TouchPoint
from compat.consumer.scan import scan_tree
from compat.errors import CompatError
from compat.findings import Evidence, Finding, Status, Verdict
from compat.probe import DEFAULT_ARCHITECTURES, DEFAULT_WORKER_CLASS, Probe, ProbeContext
from compat.report import build_label
from compat.vllm.builds import OpenedBuild, open_build
from compat.vllm.surface import BuildInfo, Found, Lookup, Missing, Surface

DEFAULT_CONSUMER = "speculators==0.3.0"
SCHEMA = "compat.audit/1"


@dataclass(frozen=True)
class AuditOptions:
    consumer: str = DEFAULT_CONSUMER
    vllm: str | None = None
    """``installed``, a version, a specifier, ``latest``, a wheel/sdist, or a source directory."""
    written_for: str | None = "auto"
    """The build the consumer was written for (evidence): ``auto`` reads its metadata pin; None: skip."""
    worker_class: str = DEFAULT_WORKER_CLASS
    allow: Path | None = None
    strict: bool = False
    target: str = "vllm"
    vllm_version: str | None = None
    """Override the audited build's version (for unparseable dev builds)."""
    architectures: tuple[str, ...] = DEFAULT_ARCHITECTURES
    """Model architectures the model-convention probe checks the consumer's forward patch against."""
    confirm: str = "auto"
    """Runtime confirmation on a real engine: 'auto' (when the installed vLLM is audited), 'always', 'never'."""
    confirm_timeout: float = 300.0


@dataclass(frozen=True)
class AuditResult(Verdict):
    scan: Scan
    build: BuildInfo
    findings: tuple[Finding, ...]
    written_for: BuildInfo | None = None
    notes: tuple[str, ...] = ()
    strict: bool = False
    baseline: BuildInfo | None = None
    mode: str = "audit"

    tool = "vllm-compat"

    @property
    def source_root(self) -> str:
        return self.scan.root

    def title(self) -> str:
        title = f"{self.scan.name} {self.scan.version or ''}".rstrip() + f" against {build_label(self.build)}"
        return title + (f" (upgrade from {self.baseline.version})" if self.baseline else "")

    def facts(self) -> list[tuple[str, str]]:
        scan = self.scan
        facts = [("consumer", f"{scan.name} {scan.version or ''} ({scan.origin})".replace("  ", " ")),
                 ("vLLM", f"{build_label(self.build)} - {self.build.origin}")]
        if self.baseline:
            facts.append(("baseline", f"{build_label(self.baseline)} - {self.baseline.origin}; only what changed "
                                      "between the two builds is listed"))
        elif self.written_for:
            facts.append(("written for", f"{build_label(self.written_for)} (evidence shows its signatures)"))
        facts += [("note", n) for n in self.notes]
        facts.append(("scanned", f"{scan.files} files, {len(scan.touchpoints)} touchpoints"))
        return facts

    def as_json(self) -> dict:
        scan = self.scan
        return {
            "schema": SCHEMA,
            "generated_by": f"compat {__version__}",
            "mode": self.mode,
            "consumer": {"name": scan.name, "version": scan.version, "origin": scan.origin, "files": scan.files,
                         "touchpoints": len(scan.touchpoints), "written_for": scan.written_for},
            "vllm": asdict(self.build),
            "baseline": asdict(self.baseline) if self.baseline else None,
            "written_for": asdict(self.written_for) if self.written_for else None,
            "notes": list(self.notes),
            "summary": {**self.counts(), "exit_code": self.exit_code, "strict": self.strict},
            "findings": [f.as_dict() | {"touchpoint": f.touchpoint} for f in self.findings],
        }


def open_consumer(spec: str, target: str = "vllm") -> sources.SourceTree:
    """A consumer: a path, a wheel/sdist, an installed distribution, or a requirement from the index."""
    path = Path(spec)
    if sources.is_archive(spec):
        return sources.tree_from_archive(path, f"{path.name}")
    if path.exists() or spec.endswith(".py") or "/" in spec:
        return sources.tree_from_path(path)
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise CompatError(f"--consumer {spec!r}: not a path, an archive, or a requirement ({exc})") from exc
    if not req.specifier:
        try:
            importlib.metadata.distribution(req.name)
            return sources.tree_from_installed(req.name)
        except importlib.metadata.PackageNotFoundError:
            return sources.tree_from_release(canonicalize_name(req.name), "latest")
    return sources.tree_from_release(canonicalize_name(req.name), str(req.specifier))


@dataclass
class Auditor:
    options: AuditOptions = field(default_factory=AuditOptions)

    def scan(self) -> Scan:
        return scan_tree(open_consumer(self.options.consumer, self.options.target), self.options.target)

    def run(self, scan: Scan | None = None, opened: OpenedBuild | None = None,
            written_for: Surface | None | str = "auto") -> AuditResult:
        scan = scan or self.scan()
        opened = opened or open_build(self.options.vllm, self.options.target, self.options.vllm_version)
        surface = opened.surface
        notes = [n for n in (opened.note,) if n]
        reference = self._written_for(scan, surface, notes) if written_for == "auto" else written_for
        runtime = surface.build.reading == "runtime"
        confirm = self.options.confirm == "always" or (self.options.confirm == "auto" and runtime)
        if confirm and not runtime:
            notes.append("--confirm always: runtime confirmation needs the installed vLLM (--vllm installed); skipped")
            confirm = False
        ctx = ProbeContext(scan, surface, reference, self.options.worker_class,  # type: ignore[arg-type]
                           self.options.architectures, confirm, self.options.confirm_timeout)
        findings: list[Finding] = []
        if opened.import_error is not None:
            findings.append(Finding("build", Status.ERROR, self.options.target, None, None,
                                    str(opened.import_error), Evidence(traceback=opened.import_error.trace),
                                    fix="fix the vLLM installation (the traceback shows where the import failed)"))
        for problem in scan.problems:
            findings.append(Finding("scan", Status.ERROR, str(problem.location), str(problem.location), None,
                                    problem.message, fix="fix the file's syntax; the rest was audited"))
        findings.extend(annotate_runtime(run_probes(ctx), ctx))
        for used in (surface, reference):
            save = getattr(used, "save", None)
            if save is not None:
                save()
        if self.options.allow is not None:
            findings = allowlist.apply(findings, allowlist.load(self.options.allow))
        findings.sort(key=lambda f: (f.status.rank, f.consumer_location or "", f.probe))
        return AuditResult(scan, surface.build, tuple(findings),
                           reference.build if reference is not None else None, tuple(notes), self.options.strict)

    def _written_for(self, scan: Scan, surface: Surface, notes: list[str]) -> Surface | None:
        wanted = self.options.written_for
        if wanted in (None, "none"):
            return None
        version = scan.written_for if wanted == "auto" else wanted
        if not version or version == surface.build.version:
            return None
        try:
            return open_build(version, self.options.target).surface
        except CompatError as exc:
            notes.append(f"the build the consumer was written for ({version}) could not be read: {exc}")
            return None


def _guard_state(ctx: ProbeContext, tp: TouchPoint) -> tuple[bool | None, str]:
    """Whether the touchpoint's code runs on the audited build (None: cannot tell), and why."""

    def known(result: Lookup) -> bool | None:
        return True if isinstance(result, Found) else (False if isinstance(result, Missing) else None)

    def lookup(expr: GuardExpr) -> bool | None:
        if isinstance(expr, HasAttr):
            owner = ctx.lookup(expr.symbol)
            return known(ctx.surface.member(owner, expr.name)) if isinstance(owner, Found) else known(owner)
        if isinstance(expr, Imports):
            results = [known(ctx.lookup(s)) for s in expr.symbols]
            if all(r is True for r in results):
                return True
            return False if any(r is False for r in results) else None
        return None

    state: bool | None = True
    reasons = []
    for guard in tp.guards:
        value = evaluate(guard.expr, ctx.version, lookup)
        if value is None:
            state = None if state is not False else False
            reasons.append(f"`{guard.text}` at {guard.location} cannot be evaluated ({render(guard.expr)})")
        elif value != guard.branch:
            state = False
            reasons.append(f"`{guard.text}` at {guard.location} is {value} for vLLM {ctx.version}")
    return state, "; ".join(reasons)


def annotate_runtime(findings: list[Finding], ctx: ProbeContext) -> list[Finding]:
    """Give each semantic finding the runtime verdict of its concern next to the static one."""
    if not ctx.confirmed:
        return findings
    out = []
    for finding in findings:
        verdicts = ctx.confirmed.get(finding.probe)
        if verdicts:
            if any(ok is False for ok, _ in verdicts):
                head, shown = "DISAGREES with a real engine: ", [text for ok, text in verdicts if ok is False]
            elif any(ok is None for ok, _ in verdicts):
                head, shown = "not confirmed on a real engine: ", [text for ok, text in verdicts if ok is None]
            else:
                head, shown = "confirmed on a real engine: ", [text for _, text in verdicts]
            summary = head + "; ".join(shown)[:400]
            finding = replace(finding, evidence=replace(finding.evidence,
                                                        extra=finding.evidence.extra + (("runtime", summary),)))
        out.append(finding)
    return out


def run_probes(ctx: ProbeContext, probes: list[Probe] | None = None) -> list[Finding]:
    """Every probe over every touchpoint it applies to; a crash becomes an ``error`` finding."""
    from probes import all_probes

    findings: list[Finding] = []
    for probe in probes if probes is not None else all_probes():
        for tp in ctx.scan.touchpoints:
            if not probe.applies(tp):
                continue
            state, why = _guard_state(ctx, tp)
            if state is False:
                findings.append(probe.finding(tp, Status.OK, f"not run with this build: {why}"))
                continue
            try:
                result = probe.check(ctx, tp)
            except Exception as exc:  # noqa: BLE001 - a crashing probe is reported, the audit goes on
                findings.append(probe.finding(
                    tp, Status.ERROR, f"probe {probe.name} crashed: {type(exc).__name__}: {exc}",
                    evidence=Evidence(traceback=traceback.format_exc())))
                continue
            if result is None:
                continue
            if state is None and result.status in (Status.BROKEN, Status.CHANGED):
                result = replace(result, status=Status.UNKNOWN,
                                 message=f"{result.message} (but this code is guarded: {why})")
            findings.append(result)
        try:
            findings.extend(probe.run(ctx))
        except Exception as exc:  # noqa: BLE001
            findings.append(Finding(probe.name, Status.ERROR, probe.name, None, None,
                                    f"probe {probe.name} crashed: {type(exc).__name__}: {exc}",
                                    Evidence(traceback=traceback.format_exc())))
    return findings
