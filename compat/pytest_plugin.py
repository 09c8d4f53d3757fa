"""A pytest plugin: ``pytest --vllm-compat=SPEC`` runs the audit as test cases in a consumer's own suite.

Each place the consumer touches vLLM becomes one test per build (``vllm-compat::pkg/mod.py:12
vllm.v1.request.Request[0.12.0]``; ``vllm-compat::build[0.12.0]`` for what is not at a place): it fails when
a finding there fails under ``--vllm-compat-fail-on`` (``compat.policy``, as ``--fail-on`` in every tool; default
broken, and error always), and is skipped when the audit finds something that does not fail (changed, or it
cannot tell); ``--vllm-compat-strict`` is ``--vllm-compat-fail-on=unknown``. A SPEC means what ``--vllm`` means
in every tool (``compat.buildspec``: a specifier is every matching release, ``newest:SPEC`` the newest only).
Collection reads only the consumer's code; vLLM is read when the first of these tests runs (statically for a
version or a path, so vLLM is never imported unless the spec is ``installed``).
They are collected as any test is (counted, listed, ``-k``), and an id pytest prints selects that one test when
given back on the command line.

    pytest --vllm-compat=0.12.0 --vllm-compat=">=0.20"      # the consumer is the rootdir
    pytest --vllm-compat=latest --vllm-compat-consumer=src/mypkg
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

_RESULTS = pytest.StashKey[dict]()
"""Per session (on its config): each build's audit result, and why a build named could not be used."""
_SAID = pytest.StashKey[list]()
"""What each ``--vllm-compat`` resolved to, said in the terminal summary."""
_WANTED = pytest.StashKey[list]()
"""The ids of this plugin's tests named on the command line, when some are."""
NAME = "vllm-compat"
"""The collector of this plugin's tests: their ids start ``vllm-compat::``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vllm-compat", "audit this project's use of vLLM's internals")
    group.addoption("--vllm-compat", action="append", default=[], metavar="SPEC",
                    help="vLLM builds to audit against, as --vllm in every tool: a version, a specifier (every "
                         "matching release), newest:SPEC, latest, installed, a path, a URL, git+URL@REF; repeatable")
    group.addoption("--vllm-compat-consumer", default=None, metavar="PATH",
                    help="the code that uses vLLM (default: the rootdir)")
    group.addoption("--vllm-compat-fail-on", default=None, metavar="{broken,changed,unknown}",
                    help="the lowest status that fails a test (default broken; error always fails)")
    group.addoption("--vllm-compat-strict", action="store_true", help="the same as --vllm-compat-fail-on=unknown")


def _fail_on(config: pytest.Config):
    from compat import policy
    from compat.errors import CompatError

    try:
        return policy.choose(config.getoption("--vllm-compat-fail-on"), config.getoption("--vllm-compat-strict"))
    except CompatError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config: pytest.Config) -> None:
    """Arguments that name these tests (``vllm-compat``, ``vllm-compat::build[0.12.0]``, ``vllm-compat::PLACE``)
    are taken out of the paths pytest collects from: they select among this plugin's tests instead."""
    if not config.getoption("--vllm-compat"):
        return
    _fail_on(config)  # bad input ends the session before anything is collected
    wanted: list[str] = []
    rest: list[str] = []
    for arg in config.args:
        named = _names_these_tests(config, arg)
        (wanted if named is not None else rest).append(named if named is not None else arg)
    if wanted:
        config.args[:] = rest
        config.stash[_WANTED] = wanted


def _names_these_tests(config: pytest.Config, arg: str) -> str | None:
    """``arg`` as a node id relative to the rootdir when it names this plugin's tests (it may be relative to
    another directory, as pytest prints ids when run from one), else None."""
    if arg.startswith("-"):
        return None
    path, sep, rest = arg.partition("::")
    full = config.invocation_params.dir / path
    if full.exists() or os.path.normpath(full) != os.path.normpath(config.rootpath / NAME):
        return None
    return NAME + sep + rest


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """The session's collection holds this plugin's tests: pytest counts, lists and selects them as it does any
    collected test."""
    outcome = yield
    if not isinstance(collector, pytest.Session) or not collector.config.getoption("--vllm-compat"):
        return
    report = outcome.get_result()
    if report.passed:
        report.result.append(CompatTests.from_parent(collector, name=NAME, nodeid=NAME))


class CompatTests(pytest.Collector):
    """The audit's tests: one per build (what the audit finds outside the consumer's code) and one per place the
    consumer touches vLLM and build. Collecting them reads only the consumer's code."""

    def collect(self) -> list[pytest.Item]:
        config = self.config
        specs = config.getoption("--vllm-compat")
        from compat.audit.pipeline import AuditOptions, Auditor  # consumer side only: vLLM is not read here
        from compat.buildspec import parse
        from compat.matrix.builds import Request, columns_for, resolved

        consumer = config.getoption("--vllm-compat-consumer") or str(config.rootpath)
        scan = Auditor(AuditOptions(consumer=str(Path(consumer).resolve()), confirm="never")).scan_consumer()
        request = Request(list(specs))
        results = config.stash.setdefault(_RESULTS, {})
        places: dict[tuple[str, str], None] = {}
        for tp in scan.touchpoints:
            places.setdefault((str(tp.location), tp.symbol), None)
        items: dict[str, BuildItem] = {}
        said = config.stash.setdefault(_SAID, [])
        for spec in specs:
            try:
                parsed = parse(spec, "--vllm-compat")
                columns = columns_for(parsed, request)
                builds = [c.spec for c in columns]
                said.append(resolved(parsed, columns).replace("--vllm", "--vllm-compat", 1))
            except Exception as exc:  # noqa: BLE001 - an unusable spec is a failing test, not a crashed session
                builds = [spec]
                results[(spec, "error")] = f"{type(exc).__name__}: {exc}"
                said.append(f"--vllm-compat {spec}: {exc}")
            for build in builds:
                label = build.replace("::", ":")
                for place in [None, *places]:
                    name = f"{'build' if place is None else _plain(' '.join(place))}[{label}]"
                    items.setdefault(name, BuildItem.from_parent(self, name=name, build=build, scan=scan,
                                                                 place=place))
        wanted = config.stash.get(_WANTED, None)
        if wanted is None:
            return list(items.values())
        chosen: list[pytest.Item] = [item for item in items.values() if any(_selects(w, item.nodeid) for w in wanted)]
        missing = [w for w in wanted if not any(_selects(w, item.nodeid) for item in items.values())]
        if missing:
            raise CompatFailure(f"no vllm-compat test is named {', '.join(missing)}")
        return chosen

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CompatFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def _plain(text: str) -> str:
    """A place as part of a test's name: no ``::`` (pytest's separator) and no brackets (its parameters')."""
    return text.replace("::", ":").replace("[", "(").replace("]", ")")


def _selects(wanted: str, nodeid: str) -> bool:
    """As pytest selects: the id itself, everything under a node, or every parameter of a name given bare."""
    return nodeid == wanted or nodeid.startswith(wanted + "::") or ("[" not in wanted.partition("::")[2]
                                                                   and nodeid.partition("[")[0] == wanted)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """What each ``--vllm-compat`` resolved to."""
    for line in config.stash.get(_SAID, []):
        terminalreporter.write_line(f"vllm-compat: {line}")


class BuildItem(pytest.Item):
    def __init__(self, *, build: str, scan: Any, place: tuple[str, str] | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.build, self.scan, self.place = build, scan, place

    def _result(self):
        key = (self.build, "result")
        results = self.config.stash[_RESULTS]
        if key not in results:
            from compat.audit.pipeline import AuditOptions, Auditor
            from compat.vllm.builds import open_build

            error = results.get((self.build, "error"))
            if error:
                raise CompatFailure(f"vLLM build {self.build} cannot be used: {error}")
            from compat.matrix.builds import Column, Request, local_spec

            opened = open_build(local_spec(Column(self.build, self.build), Request([self.build])))
            results[key] = Auditor(AuditOptions(confirm="never")).run(self.scan, opened)
        return results[key]

    def runtest(self) -> None:
        result = self._result()
        if self.place is None:
            findings = [f for f in result.findings if f.consumer_location is None]
        else:
            location, symbol = self.place
            findings = [f for f in result.findings if f.consumer_location == location and
                        (f.touchpoint or f.symbol) == symbol]
        from compat import policy
        from compat.findings import Status

        fail_on = _fail_on(self.config)
        failing = policy.failing(findings, fail_on)
        if failing:
            raise CompatFailure("; ".join(f"{f.check} {f.status.value}: {f.message}" + (f" (fix: {f.fix})"
                                          if f.fix else "") for f in failing))
        passing = [f for f in findings if f.status != Status.OK and not f.allowed]
        if passing:
            message = "; ".join(f"{f.check} {f.status.value}: {f.message}" for f in passing)
            pytest.skip(f"not failing under --vllm-compat-fail-on={fail_on.value}: {message}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CompatFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


class CompatFailure(Exception):
    """What the audit found, shown as the test's failure."""
