"""A pytest plugin: ``pytest --vllm-compat=SPEC`` runs the audit as test cases in a consumer's own suite.

Each place the consumer touches vLLM becomes one test per build (``vllm-compat[0.12.0]::call::pkg/mod.py:12
vllm.v1.request.Request``): it fails when the audit finds it broken, changed or in error there, and is skipped
when the audit cannot tell (failed too with ``--vllm-compat-strict``). Collection reads only the consumer's
code; vLLM is read when the first of these tests runs (statically for a version or a path, so vLLM is never
imported unless the spec is ``installed``).

    pytest --vllm-compat=0.12.0 --vllm-compat=">=0.20"      # the consumer is the rootdir
    pytest --vllm-compat=latest --vllm-compat-consumer=src/mypkg
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

_RESULTS = pytest.StashKey[dict]()
"""Per session (on its config): each build's audit result, and why a build named could not be used."""
FAILING = ("broken", "changed", "error")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vllm-compat", "audit this project's use of vLLM's internals")
    group.addoption("--vllm-compat", action="append", default=[], metavar="SPEC",
                    help="a vLLM build to audit against (version, specifier, latest, path, URL); repeatable")
    group.addoption("--vllm-compat-consumer", default=None, metavar="PATH",
                    help="the code that uses vLLM (default: the rootdir)")
    group.addoption("--vllm-compat-strict", action="store_true", help="fail when the audit cannot tell")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    specs = config.getoption("--vllm-compat")
    if not specs:
        return
    from compat.audit.pipeline import AuditOptions, Auditor  # consumer side only: vLLM is not read here
    from compat.matrix.builds import Request, columns_for

    consumer = config.getoption("--vllm-compat-consumer") or str(config.rootpath)
    scan = Auditor(AuditOptions(consumer=str(Path(consumer).resolve()), confirm="never")).scan_consumer()
    request = Request(list(specs))
    results = config.stash.setdefault(_RESULTS, {})
    places: dict[tuple[str, str], None] = {}
    for tp in scan.touchpoints:
        places.setdefault((str(tp.location), tp.symbol), None)
    for spec in specs:
        try:
            builds = [c.spec for c in columns_for(spec, request)]
        except Exception as exc:  # noqa: BLE001 - an unusable spec is a failing test, not a crashed session
            builds = [spec]
            results[(spec, "error")] = f"{type(exc).__name__}: {exc}"
        for build in builds:
            items.append(BuildItem.from_parent(session, name=f"vllm-compat[{build}]::build", build=build,
                                               scan=scan, place=None))
            for location, symbol in places:
                items.append(BuildItem.from_parent(session, name=f"vllm-compat[{build}]::{location} {symbol}",
                                                   build=build, scan=scan, place=(location, symbol)))


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
            results[key] = Auditor(AuditOptions(confirm="never")).run(self.scan, open_build(self.build))
        return results[key]

    def runtest(self) -> None:
        result = self._result()
        if self.place is None:
            findings = [f for f in result.findings if f.consumer_location is None]
        else:
            location, symbol = self.place
            findings = [f for f in result.findings if f.consumer_location == location and
                        (f.touchpoint or f.symbol) == symbol]
        failing = [f for f in findings if f.status.value in FAILING and not f.allowed]
        if failing:
            raise CompatFailure("; ".join(f"{f.check} {f.status.value}: {f.message}" + (f" (fix: {f.fix})"
                                          if f.fix else "") for f in failing))
        unknown = [f for f in findings if f.status.value == "unknown"]
        if unknown:
            message = "; ".join(f"{f.check}: {f.message}" for f in unknown)
            if self.config.getoption("--vllm-compat-strict"):
                raise CompatFailure(f"the audit cannot tell: {message}")
            pytest.skip(f"the audit cannot tell: {message}")

    def repr_failure(self, excinfo, style=None):  # type: ignore[override]
        if isinstance(excinfo.value, CompatFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


class CompatFailure(Exception):
    """What the audit found, shown as the test's failure."""
