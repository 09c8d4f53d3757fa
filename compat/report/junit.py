"""JUnit XML: one test case per touchpoint and probe, so CI systems list them."""

from __future__ import annotations

from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

from compat.findings import Status
from compat.report.escaping import escaped

if TYPE_CHECKING:
    from compat.report.reportable import Reportable


def _x(text: str | None) -> str:
    """Text XML 1.0 can hold: control characters but tab and line breaks (from the files read) escaped; ET would
    write them raw, which no XML parser accepts."""
    return escaped(text, keep="\t\n\r")


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    failing = set(map(id, result.failing()))
    suite = ET.Element("testsuite", name=_x(f"{result.tool} {result.title()}"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for f in result.findings:
        counts["tests"] += 1
        name = f"{f.touchpoint or f.symbol} @ {f.consumer_location or '-'}"
        case = ET.SubElement(suite, "testcase", classname=_x(f"{result.tool}.{f.check}"), name=_x(name))
        file, line = f.file_and_line
        if file:
            case.set("file", _x(file))
        if line is not None:
            case.set("line", str(line))
        detail = "\n".join(x for x in (f.message, f"fix: {f.fix}" if f.fix else "",
                                        f"was: {f.evidence.written_for}" if f.evidence.written_for else "",
                                        f"now: {f.evidence.audited}" if f.evidence.audited else "",
                                        f.evidence.traceback or "") if x)
        if id(f) in failing:
            tag = "error" if f.status is Status.ERROR else "failure"
            counts["errors" if tag == "error" else "failures"] += 1
            ET.SubElement(case, tag, message=_x(f.message), type=f.status.value).text = _x(detail)
        elif f.status is not Status.OK:
            counts["skipped"] += 1
            reason = f"{f.status.value}: {f.message}" + (f" (allowed: {f.allowed})" if f.allowed else "")
            ET.SubElement(case, "skipped", message=_x(reason))
        else:
            ET.SubElement(case, "system-out").text = _x(f.message)
    for key, value in counts.items():
        suite.set(key, str(value))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
