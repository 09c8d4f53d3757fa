"""The consumer's own version gates: code its modules run when imported that raises for a build it does not list.

A plugin that checks vLLM's version at import (``if Version(vllm.__version__) < Version("0.30"): raise ...``, or
a helper called at the module's top level that looks the version up in a table of the releases it vendors code
for and raises for the others) stops its own import on any other build; vLLM loads general plugins without
catching their errors, so every vLLM start fails while such a plugin is installed. Each gate's condition is
evaluated for the audited build's version (and its code, for ``hasattr`` and imports): broken where it raises,
ok where it does not, unknown where the condition cannot be told.
"""

from __future__ import annotations

from collections.abc import Iterable

from compat.consumer.guards import evaluate, render
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.probe import Probe, ProbeContext


class GatesProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        for gate in ctx.scan.gates:
            raises = evaluate(gate.condition, ctx.version, ctx.guard_lookup)
            where = f" (in {gate.via})" if gate.via else ""
            said = f"`{gate.raises}`{where} runs when {gate.module} is imported, if {render(gate.condition)}"
            if raises is True:
                status, message = Status.BROKEN, (
                    f"importing {gate.module} raises for vLLM {ctx.version}: {said}, which holds for this build; "
                    "a vLLM plugin importing it stops every vLLM start")
            elif raises is False:
                status, message = Status.OK, f"{said}, which does not hold for vLLM {ctx.version}"
            else:
                status, message = Status.UNKNOWN, f"{said}, which cannot be evaluated for vLLM {ctx.version}"
            yield Finding(self.name, status, f"{gate.module}:import", str(gate.location), None, message,
                          Evidence(audited=f"vLLM {ctx.version}", extra=(("condition", gate.text),)),
                          fix=f"let {gate.module} import on vLLM {ctx.version}, or pin the vLLM it supports"
                          if status is Status.BROKEN else None,
                          kind=FindingKind.GATE, touchpoint=f"gate:{gate.location}", place=Place.at(gate.location))


PROBE = GatesProbe(
    name="gate",
    description="The consumer's own checks of vLLM's version that raise when its modules are imported (directly, or "
                "in a helper called at the top level), evaluated for the build: broken where the import raises.",
    order=15,
)
