"""The JSON report: each result type owns its documented schema (``as_json``)."""

from __future__ import annotations

import json

from compat.report.reportable import Reportable


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    return json.dumps(result.as_json(), indent=2) + "\n"
