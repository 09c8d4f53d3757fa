"""``python -m compat.bisect``: the first build where one touchpoint breaks, between a good and a bad one.

Between two releases, the releases in between are audited by bisection. Given a vLLM git checkout
(``--repo``), the commits between two commits are read one at a time with ``git archive`` (never built) and
bisected the same way; the first bad commit is printed with its subject and the diff hunk of the audited
symbol. The touchpoint is named by its row's key in the matrix JSON (``rows[].key``), or by a part of exactly
one row's key: a key that names no row, or a part of several, exits 2 with the candidates listed. A build is bad
for the touchpoint when its finding there fails under ``--fail-on`` (``compat.policy``; default: broken or error).
Exit codes: 0 found, 1 the good build is not good or the bad one not bad, 2 the bisection could not run.
"""

from __future__ import annotations

import argparse
import difflib
import io
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from compat import policy
from compat.audit.pipeline import DEFAULT_CONSUMER, AuditOptions, Auditor
from compat.cache import cache_dir
from compat.cli import guarded
from compat.consumer.result import Scan
from compat.errors import CompatError
from compat.findings import Finding
from compat.matrix.result import row_key
from compat.report.escaping import escaped
from compat.sources import index
from compat.vllm.builds import open_build


@dataclass(frozen=True)
class Trial:
    """One build tried: its name, the touchpoint's finding there (None: the touchpoint is not there)."""

    build: str
    finding: Finding | None
    fail_on: policy.FailOn = policy.DEFAULT

    @property
    def bad(self) -> bool:
        return self.finding is not None and policy.fails(self.finding.status, self.fail_on)


def key_of(finding: Finding) -> str:
    """The finding's row key: ``probe|touchpoint|location``, as ``rows[].key`` in the matrix JSON."""
    return row_key(finding.check, finding.touchpoint or finding.symbol, finding.consumer_location)


SHOWN = 10
"""Candidate keys listed when ``--touchpoint`` names no row or several."""


class KeyProblem(CompatError):
    """``--touchpoint`` names no row, or part of several: never one picked silently."""

    def __init__(self, problem: str, candidates: list[str]) -> None:
        super().__init__(problem)
        self.candidates = candidates

    def lines(self) -> list[str]:
        shown = [f"  {key}" for key in self.candidates[:SHOWN]]
        if len(self.candidates) > SHOWN:
            shown.append(f"  ... and {len(self.candidates) - SHOWN} more (rows[].key in the matrix JSON)")
        return shown


def resolve(wanted: str, keys: list[str]) -> tuple[str, bool]:
    """The row key ``wanted`` names among ``keys``: (key, whether ``wanted`` was only a part of it). The exact
    key, or a part of exactly one key; else ``KeyProblem`` with the candidates (those it is part of, or the
    nearest keys)."""
    if wanted in keys:
        return wanted, False
    partial = sorted(k for k in keys if wanted and wanted in k)
    if len(partial) == 1:
        return partial[0], True
    if partial:
        raise KeyProblem(f"--touchpoint {wanted!r} is part of {len(partial)} row keys, not one; give one of "
                         "them exactly:", partial)
    nearest = difflib.get_close_matches(wanted, keys, n=len(keys), cutoff=0.0)
    raise KeyProblem(f"--touchpoint {wanted!r} is no row's key nor part of one ({len(keys)} rows); the nearest:",
                     nearest)


def bisect(builds: list[str], judge: Callable[[str], Trial]) -> tuple[Trial, Trial, list[Trial]]:
    """The first bad build of ``builds`` (oldest first; the first is good, the last bad) by bisection: (last good,
    first bad, every build tried)."""
    tried: list[Trial] = []

    def ask(i: int) -> Trial:
        trial = judge(builds[i])
        tried.append(trial)
        return trial

    good, bad = ask(0), ask(len(builds) - 1)
    if good.bad:
        raise NotBracketed(f"{builds[0]} is not good for this touchpoint: {good.finding.message}")  # type: ignore[union-attr]
    if not bad.bad:
        state = bad.finding.status.value if bad.finding else "not there"
        raise NotBracketed(f"{builds[-1]} is not bad for this touchpoint ({state})")
    lo, hi = 0, len(builds) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trial = ask(mid)
        if trial.bad:
            hi, bad = mid, trial
        else:
            lo, good = mid, trial
    return good, bad, tried


class NotBracketed(CompatError):
    """The endpoints do not bracket a breakage."""

    exit_code = 1


class Judge:
    """Audits the consumer against one build (once per build) and picks the finding of the row whose key is
    ``touchpoint`` exactly."""

    def __init__(self, scan: Scan, options: AuditOptions, touchpoint: str, opener: Callable[[str], str]) -> None:
        self.scan, self.options, self.touchpoint, self.opener = scan, options, touchpoint, opener
        self.fail_on = options.fail_on
        self._findings: dict[str, list[Finding]] = {}

    def findings(self, build: str) -> list[Finding]:
        if build not in self._findings:
            result = Auditor(self.options).run(self.scan, open_build(self.opener(build), self.options.target))
            self._findings[build] = list(result.findings)
        return self._findings[build]

    def keys(self, *builds: str) -> list[str]:
        """The row keys of these builds' findings, sorted."""
        return sorted({key_of(f) for build in builds for f in self.findings(build)})

    def __call__(self, build: str) -> Trial:
        found = [f for f in self.findings(build) if key_of(f) == self.touchpoint]
        bad = [f for f in found if policy.fails(f.status, self.fail_on)]
        return Trial(build, next(iter(bad or found), None), self.fail_on)


# ---- git ---------------------------------------------------------------------------------------
def _git(repo: Path, *args: str, binary: bool = False):
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, timeout=600,
                              text=not binary)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        raise CompatError(f"git {' '.join(args[:2])} in {repo} failed: {str(detail).strip()}") from exc
    return done.stdout


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """``good``, then every commit after it up to ``bad`` along the ancestry path, oldest first."""
    first = _git(repo, "rev-parse", "--verify", f"{good}^{{commit}}").strip()
    path = _git(repo, "rev-list", "--reverse", "--ancestry-path", f"{first}..{bad}").split()
    if not path:
        raise CompatError(f"{bad} does not come after {good} in {repo}")
    return [first] + path


def checkout_of(repo: Path, commit: str) -> str:
    """The files of ``commit`` (``git archive``, nothing built), once, in the cache."""
    dest = cache_dir() / "commits" / commit
    if not (dest / ".complete").exists():
        data = _git(repo, "archive", "--format=tar", commit, binary=True)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
        (dest / ".complete").touch()
    return str(dest)


def hunk(repo: Path, good: str, bad: str, finding: Finding) -> str:
    """The diff hunk between two commits that touches the audited symbol (its file, its name)."""
    where = (finding.vllm_location or "").rpartition(":")[0]
    name = (finding.touchpoint or finding.symbol).replace("(...)", "").rsplit(".", 1)[-1].split(":")[0]
    paths = [where] if where else []
    if not paths:
        stem = (finding.touchpoint or finding.symbol).split(":")[0].rsplit(".", 1)[0]
        paths = [stem.replace(".", "/") + ".py", stem.replace(".", "/") + "/__init__.py"]
    diff = _git(repo, "diff", good, bad, "--", *paths) if paths else ""
    hunks = re.split(r"(?m)^(?=@@)", diff)
    head, body = hunks[0], hunks[1:]
    chosen = [h for h in body if name and name in h] or body[:1]
    return (head + "".join(chosen)).strip() if chosen else f"(no change in {', '.join(paths) or 'the files'})"


# ---- command line --------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.bisect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--consumer", default=DEFAULT_CONSUMER)
    p.add_argument("--touchpoint", required=True,
                   help="the row to bisect: its key probe|touchpoint|location (rows[].key in the matrix JSON), "
                        "or a part of exactly one row's key")
    p.add_argument("--good", required=True, help="a release (or, with --repo, a commit) where it is fine")
    p.add_argument("--bad", required=True, help="a release (or, with --repo, a commit) where it is broken")
    p.add_argument("--repo", type=Path, help="a vLLM git checkout: bisect its commits instead of releases")
    policy.add_option(p)
    p.add_argument("--debug", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return guarded("compat.bisect", args.debug, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    options = AuditOptions(consumer=args.consumer, confirm="never", fail_on=policy.choose(args.fail_on))
    scan = Auditor(options).scan_consumer()
    if args.repo:
        repo = args.repo.resolve()
        builds = commits_between(repo, args.good, args.bad)
        judge = Judge(scan, options, args.touchpoint, lambda commit: checkout_of(repo, commit))
    else:
        good, bad = index.resolve(options.target, args.good), index.resolve(options.target, args.bad)
        builds = [str(v) for v in index.releases(options.target) if good <= v <= bad]
        judge = Judge(scan, options, args.touchpoint, lambda version: version)
    if len(builds) < 2:
        raise CompatError(f"nothing to bisect between {args.good} and {args.bad}")
    try:
        key, partial = resolve(args.touchpoint, judge.keys(builds[0], builds[-1]))
    except KeyProblem as exc:
        print(escaped(f"compat.bisect: error: {exc}"), file=sys.stderr)
        for line in exc.lines():
            print(escaped(line), file=sys.stderr)
        return exc.exit_code
    if partial:
        print(escaped(f"compat.bisect: --touchpoint {args.touchpoint!r} is part of one row's key only: {key}"),
              file=sys.stderr)
    judge.touchpoint = key
    try:
        good_trial, bad_trial, tried = bisect(builds, judge)
    except NotBracketed as exc:
        print(f"compat.bisect: {exc}", file=sys.stderr)
        return exc.exit_code
    finding = bad_trial.finding
    assert finding is not None
    print(f"first bad: {bad_trial.build}" + (f" (last good: {good_trial.build})"))
    if args.repo:
        subject = _git(args.repo, "log", "-1", "--format=%s", bad_trial.build).strip()
        print(f"commit {bad_trial.build} {subject}")
    print(f"touchpoint: {finding.check} {finding.touchpoint or finding.symbol} at {finding.consumer_location}")
    print(f"{finding.status.value}: {finding.message}")
    print(f"builds audited: {len(tried)} of {len(builds)}")
    if args.repo:
        print(hunk(args.repo, good_trial.build, bad_trial.build, finding))
    return 0


def run() -> None:
    sys.exit(main())
