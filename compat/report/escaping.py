"""Text from the files a tool reads (a file name, a tensor name, a pickle global's name, an exception's text),
made safe to show: a dataset's file can hold ``"\\x1b]0;pwned\\x07"`` (set the terminal's title) or
``"\\x1b[2J"`` (clear the screen), which a report must never pass on to whoever reads it."""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
"""C0 controls, DEL, C1 controls; the bidirectional marks and overrides that reorder what a reader sees, and the
line and paragraph separators some viewers break lines at; lone surrogates (no encoder accepts them)."""


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
    return f"\\u{code:04x}"
