"""The JSON report: each result type owns its documented schema (``as_json``)."""

from __future__ import annotations

import io
import json
import re
from typing import Any, TextIO

from compat.report.escaping import SHOWN_ESCAPED, escaped
from compat.report.reportable import Reportable


def render(result: Reportable, color: bool = False, show_ok: bool = False) -> str:
    out = io.StringIO()
    write(result, out)
    return out.getvalue()


def write(result: Reportable, out: TextIO) -> None:
    """The report written to ``out`` part by part: 200,000 files' findings make a 120 MB document, which is
    never held as one string (nor twice, encoded)."""
    document = result.as_json()
    if _needs_escaping(document):
        document = _escaped(document)
    for chunk in _ENCODER.iterencode(document):
        out.write(chunk)
    out.write("\n")


_ENCODER = json.JSONEncoder(indent=2)
_UNSAFE_IN_JSON = re.compile("(?![\n\t])[" + SHOWN_ESCAPED + "]")
"""The characters ``escaped`` changes that JSON would carry (written as ``\\uNNNN``, which a reader decodes back):
controls but line breaks and tabs, bidirectional marks, separators, lone surrogates. A report without any is
written as it is, without a second copy."""


def _needs_escaping(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _UNSAFE_IN_JSON.search(item):
                return True
        elif isinstance(item, dict):
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, (list, tuple)):
            stack += item
    return False


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
