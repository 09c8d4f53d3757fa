"""Text from the files a tool reads (a file name, a tensor name, a pickle global's name, an exception's text),
made safe to show: a dataset's file can hold ``"\\x1b]0;pwned\\x07"`` (set the terminal's title) or
``"\\x1b[2J"`` (clear the screen), which a report must never pass on to whoever reads it."""

from __future__ import annotations

import re

_NONCHARACTERS = "\ufdd0-\ufdef\ufffe\uffff" + "".join(
    f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(1, 17))
SHOWN_ESCAPED = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
"""A character class (without its brackets) of what every report escapes but noncharacters: JSON carries those
as they are (``compat.report.json_report``)."""
_UNSAFE = re.compile("[" + SHOWN_ESCAPED + _NONCHARACTERS + "]")
"""C0 controls, DEL, C1 controls; the bidirectional marks and overrides that reorder what a reader sees, and the
line and paragraph separators some viewers break lines at; lone surrogates (no encoder accepts them); Unicode's
66 noncharacters (U+FDD0-U+FDEF and the last two code points of every plane: XML 1.0 forbids U+FFFE and U+FFFF,
so one in a name made the JUnit report unparseable)."""


def escaped(text: str | None, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` (a format's own line breaks) escaped.

    C0 controls and DEL become ``\\xNN``, as does each byte of a file name that is not UTF-8 (Python keeps it
    as a lone surrogate, U+DC80-U+DCFF); other characters become ``\\uNNNN``, so a C1 control (U+0085, which
    UTF-8 writes as two bytes) is never mistaken for the byte 0x85 of such a name."""
    if not text:
        return text or ""
    return _UNSAFE.sub(lambda m: _escape(m.group(), keep), text)


def _escape(char: str, keep: str) -> str:
    code = ord(char)
    if char in keep:
        return char
    if code < 0x80:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
