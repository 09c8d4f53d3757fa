"""The audit: scan a consumer, open a vLLM build, run every probe, collect findings.

``Auditor.run()`` is the whole pipeline; the CLI in ``compat.audit`` only parses flags and renders.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from compat.audit import allowlist, memo
from compat.audit.result import AuditResult
from compat.consumer.guards import evaluate, render
from compat.consumer.pins import resolve_pin
from compat.consumer.result import Scan, TouchPoint
from compat.consumer.scan import cached_scan
from compat.consumer.source import open_consumer
from compat.errors import CompatError
from compat.findings import Confirmation, Evidence, Finding, Place, Status, by_place
from compat.policy import DEFAULT, FailOn
from compat.probe import DEFAULT_ARCHITECTURES, DEFAULT_WORKER_CLASS, Probe, ProbeContext
from compat.syntax import collector_paused
from compat.vllm.builds import OpenedBuild, open_build
from compat.vllm.surface import Surface

DEFAULT_CONSUMER = "speculators==0.3.0"


class WrittenFor(Enum):
    """``Auditor.run``'s default for the build the consumer was written for: none passed by the caller."""

    FROM_OPTIONS = "from options"
    """The one ``AuditOptions.written_for`` names (``auto``: the consumer's own pin; None: no reference)."""


@dataclass(frozen=True)
class AuditOptions:
    consumer: str = DEFAULT_CONSUMER
    vllm: str | None = None
    """``installed``, a version, a specifier, ``latest``, a wheel/sdist, or a source directory."""
    written_for: str | None = "auto"
    """The build the consumer was written for (evidence): ``auto`` reads its metadata pin; None: skip."""
    worker_class: str = DEFAULT_WORKER_CLASS
    allow: Path | None = None
    fail_on: FailOn = DEFAULT
    """The lowest status that fails the run (``compat.policy``)."""
    target: str = "vllm"
    vllm_version: str | None = None
    """Override the audited build's version (for unparseable dev builds)."""
    architectures: tuple[str, ...] = DEFAULT_ARCHITECTURES
    """Model architectures the model-convention probe checks the consumer's forward patch against."""
    confirm: str = "auto"
    """Runtime confirmation on real engines of the installed vLLM: 'auto' (only when a verdict it checks is
    unknown statically), 'always', 'never'."""
    confirm_timeout: float = 300.0
    all_files: bool = False
    """Audit the consumer's tests, examples and docs too, not only what it ships."""


@dataclass
class Auditor:
    options: AuditOptions = field(default_factory=AuditOptions)
    _references: dict[str, Surface] = field(default_factory=dict, repr=False, compare=False)
    """The builds consumers were written for, opened once per auditor (a matrix audits many builds against one)."""

    def scan_consumer(self) -> Scan:
        from compat.progress import ProgressBar

        # A cold scan of a large consumer takes seconds: a bar on a terminal (never in logs or CI).
        scan = cached_scan(open_consumer(self.options.consumer, self.options.target), self.options.target,
                           everything=self.options.all_files, progress=ProgressBar.for_terminal(unit="module walks"))
        if self.options.written_for != "auto":
            return scan
        from compat.sources import index

        # A range pin (``vllm>=0.11,<0.13``) was written for the newest release it admits: the index says which.
        return resolve_pin(scan, lambda: index.releases(self.options.target))

    def run(self, scan: Scan | None = None, opened: OpenedBuild | None = None,
            written_for: Surface | None | WrittenFor = WrittenFor.FROM_OPTIONS) -> AuditResult:
        with collector_paused():  # the parse trees it builds would be walked again and again, for nothing
            return self._run(scan, opened, written_for)

    def _run(self, scan: Scan | None, opened: OpenedBuild | None,
             written_for: Surface | None | WrittenFor) -> AuditResult:
        scan = scan or self.scan_consumer()
        opened = opened or open_build(self.options.vllm, self.options.target, self.options.vllm_version)
        surface = opened.surface
        notes = [n for n in (opened.note,) if n]
        if scan.left_out:
            dirs = sorted({path.rsplit("/", 1)[0] + "/" if "/" in path else path for path in scan.left_out})
            notes.append(f"{len(scan.left_out)} files left out, not shipped by the consumer (tests, examples, docs): "
                         f"{', '.join(dirs[:6])}{' ...' if len(dirs) > 6 else ''}; --all-files audits them")
        reference = self._written_for(scan, surface, notes) if written_for is WrittenFor.FROM_OPTIONS else written_for
        installed = opened.installed  # read statically or imported: the confirmation's engines run it either way
        if self.options.confirm == "always" and not installed:
            notes.append("--confirm always: runtime confirmation needs the installed vLLM (--vllm installed, or no "
                         "--vllm where vLLM is installed); skipped")
        ctx = ProbeContext(scan, surface, reference, self.options.worker_class,
                           self.options.architectures, False, self.options.confirm_timeout)
        findings: list[Finding] = []
        if opened.import_error is not None:
            findings.append(Finding("build", Status.ERROR, self.options.target, None, None,
                                    str(opened.import_error), Evidence(traceback=opened.import_error.trace),
                                    fix="fix the vLLM installation (the traceback shows where the import failed)"))
        for problem in scan.problems:
            findings.append(Finding("scan", Status.ERROR, str(problem.location), str(problem.location), None,
                                    problem.message, Evidence(traceback=problem.traceback or None),
                                    place=Place(problem.location.file, problem.location.line or None),
                                    fix="report the traceback: the scan could not read this code; the rest was "
                                        "audited" if problem.traceback else "fix the file's syntax; the rest was "
                                                                            "audited"))
        kept = memo.key(scan, surface, reference, self.options, installed)
        judged = memo.load(kept) if kept else None
        if judged is None:
            found = run_probes(ctx)
            if installed:
                found += self._confirm(ctx, found, notes)
            judged = fold_consequences(annotate_runtime(found))
            for used in (surface, reference):
                if used is not None:
                    used.save()
            if kept:
                memo.save(kept, judged)
        findings.extend(judged)
        if self.options.allow is not None:
            findings = allowlist.apply(findings, allowlist.load(self.options.allow))
        findings.sort(key=lambda f: (f.status.rank, *by_place(f), f.check, f.symbol))
        return AuditResult(scan, surface.build, tuple(findings),
                           reference.build if reference is not None else None, tuple(notes), self.options.fail_on)

    def _confirm(self, ctx: ProbeContext, found: list[Finding], notes: list[str]) -> list[Finding]:
        """The runtime confirmation (real engines of the installed build: minutes), run with ``--confirm always``,
        and with ``auto`` only when a verdict it checks is unknown statically; announced on stderr before it
        starts, with its time at the end."""
        from compat.probes.confirm import CONFIRMED
        from compat.probes.confirm import PROBE as CONFIRM

        if self.options.confirm == "never":
            return []
        unknown = sorted({f.check for f in found if f.check in CONFIRMED.values() and f.status is Status.UNKNOWN})
        if self.options.confirm == "auto" and not unknown:
            notes.append("runtime confirmation not run: every static verdict it checks is known (--confirm always "
                         "runs it: tiny models on real engines of the installed vLLM, about 2 minutes)")
            return []
        why = ("--confirm always" if self.options.confirm == "always" else
               f"--confirm auto: the static verdicts of {', '.join(unknown)} are unknown")
        print(f"compat.audit: confirming the static verdicts on real engines of the installed vLLM "
              f"{ctx.surface.build.version} ({why}): tiny models in child processes, about 2 minutes; "
              "--confirm never skips it", file=sys.stderr, flush=True)
        started = time.perf_counter()
        ctx.confirm = True
        confirmed = run_probes(ctx, [CONFIRM])
        spent = time.perf_counter() - started
        print(f"compat.audit: runtime confirmation done in {spent:.0f} s", file=sys.stderr, flush=True)
        notes.append(f"runtime confirmation ({why}) took {spent:.0f} s")
        return confirmed

    def _written_for(self, scan: Scan, surface: Surface, notes: list[str]) -> Surface | None:
        wanted = self.options.written_for
        if wanted in (None, "none"):
            return None
        version = scan.written_for if wanted == "auto" else wanted
        if not version or version == surface.build.version:
            return None
        try:
            if version not in self._references:
                self._references[version] = open_build(version, self.options.target).surface
            return self._references[version]
        except CompatError as exc:
            notes.append(f"the build the consumer was written for ({version}) could not be read: {exc}")
            return None


def _guard_state(ctx: ProbeContext, tp: TouchPoint) -> tuple[bool | None, str]:
    """Whether the touchpoint's code runs on the audited build (None: cannot tell), and why."""

    lookup = ctx.guard_lookup
    state: bool | None = True
    reasons = []
    inherited = tp.caller_guards if tp.caller_guards and not ctx.vllm_may_call(tp.caller) else ()
    for guard in tp.guards + inherited:
        value = evaluate(guard.expr, ctx.version, lookup)
        where = f"at {guard.location}" + (f", where every call of {tp.caller} is," if guard in inherited else "")
        if value is None:
            state = None if state is not False else False
            reasons.append(f"`{guard.text}` {where} cannot be evaluated ({render(guard.expr)})")
        elif value != guard.branch:
            state = False
            meaning = render(guard.expr)
            said = f" ({meaning})" if meaning != guard.text else ""
            reasons.append(f"`{guard.text}` {where}{said} is {value} for vLLM {ctx.version}")
    return state, "; ".join(reasons)


def fold_consequences(findings: list[Finding]) -> list[Finding]:
    """One cause, one finding: a later use that fails only because a name is missing (another use of it, a call
    of it, an attribute of it) is folded into the first finding that reports the name missing, which lists where
    else it fails.

    Causes carry ``missing`` (the reason the name is missing), consequences ``cause`` (the same reason). With no
    finding for the cause itself, the first consequence stands for it.
    """
    def extra(f: Finding, key: str) -> str | None:
        return next((v for k, v in f.evidence.extra if k == key), None)

    causes: dict[str, int] = {}
    for i, f in enumerate(findings):
        reason = extra(f, "missing")
        if reason is not None:
            causes.setdefault(reason, i)  # an unknown cause (an interface) takes its consequences with it
    folded: dict[int, list[str]] = {}
    kept: list[Finding | None] = list(findings)
    for i, f in enumerate(findings):
        reason = extra(f, "cause") or (extra(f, "missing") if causes.get(extra(f, "missing") or "") != i else None)
        if reason is None or f.status not in (Status.BROKEN, Status.UNKNOWN):
            continue
        if reason not in causes:
            causes[reason] = i  # this consequence stands for its cause
            continue
        folded.setdefault(causes[reason], []).append(f.consumer_location or f.symbol)
        kept[i] = None
    out = []
    for i, left in enumerate(kept):
        if left is None:
            continue
        f = left
        if i in folded:
            where = sorted(set(folded[i]))
            shown = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
            f = replace(f, message=f"{f.message}; {len(where)} later use(s) fail for the same reason ({shown})",
                        evidence=replace(f.evidence, extra=f.evidence.extra + (("consequences", shown),)))
        out.append(f)
    return out


def annotate_runtime(findings: list[Finding]) -> list[Finding]:
    """Give each semantic finding the runtime confirmation's verdict on its probe, next to the static one."""
    verdicts: dict[str, list[Confirmation]] = {}
    for finding in findings:
        if finding.confirmation is not None:
            for probe in finding.confirmation.probes:
                verdicts.setdefault(probe, []).append(finding.confirmation)
    out = []
    for finding in findings:
        found = verdicts.get(finding.check)
        if found:
            if any(c.agree is False for c in found):
                head, shown = "DISAGREES with a real engine: ", [c.text for c in found]
            elif any(c.agree is None for c in found):
                head, shown = "not confirmed on a real engine: ", [c.text for c in found if c.agree is None]
            else:
                head, shown = "confirmed on a real engine: ", [c.text for c in found]
            finding = replace(finding, evidence=replace(finding.evidence, extra=finding.evidence.extra + (
                ("runtime", head + "; ".join(shown)[:400]),)))
        out.append(finding)
    return out


def run_probes(ctx: ProbeContext, probes: list[Probe] | None = None) -> list[Finding]:
    """Every probe over every touchpoint it applies to; a crash becomes an ``error`` finding."""
    from compat.probes import all_probes

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
