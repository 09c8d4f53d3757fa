"""The JSON report: each result type owns its documented schema (``as_json``)."""

from __future__ import annotations

import json
import re
from typing import Any

from compat.report.escaping import escaped
from compat.report.reportable import Reportable


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    document = result.as_json()
    text = json.dumps(document, indent=2)
    if _MAYBE_UNSAFE.search(text):
        text = json.dumps(_escaped(document), indent=2)
    return text + "\n"


_MAYBE_UNSAFE = re.compile(r"\\([bfr]|u(00[01]|007f|008|009|061c|200[ef]|202[89a-e]|206[6-9]|d[89a-f]))")
"""How ``json.dumps`` (ASCII only) writes each character ``escaped`` changes: a report without any is written
as it is, without walking it again."""


def _escaped(value: Any) -> Any:
    """Every string escaped as in the other formats: a consumer that prints a message or a file name shows what
    a terminal report would, and a name that is not UTF-8 reads ``\\xff``, not a lone surrogate (``\\udcff``).
    Line breaks and tabs stay (JSON writes them escaped): tracebacks have lines."""
    if isinstance(value, str):
        return escaped(value, keep="\n\t")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value
