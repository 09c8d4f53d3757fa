"""What the command-line tools share: one-line errors with exit code 2, and writing a rendered report."""

from __future__ import annotations

import io
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from compat.cache import atomic_write_text
from compat.errors import CompatError
from compat.report import Format, Reportable, render


def guarded(prog: str, debug: bool, body: Callable[[], int]) -> int:
    """Run a command; bad input and internal errors end with one line on stderr and exit code 2."""
    try:
        return body()
    except CompatError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - an internal error still ends with one clear line
        if debug:
            traceback.print_exc()
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        print(f"{prog}: internal error: {type(exc).__name__}: {exc}{where} (rerun with --debug for the "
              "traceback)", file=sys.stderr)
        return 2


_UNDECODABLE = re.compile("[\udc80-\udcff]")


def printable(text: str) -> str:
    """``text`` with the bytes of file names that are not UTF-8 (Python keeps them as lone surrogates, which no
    encoder accepts) written as ``\\xNN``, so a report on such a file can be written and read."""
    return _UNDECODABLE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)


def emit(result: Reportable, fmt: Format, color: str, output: Path | None, show_ok: bool) -> None:
    """Render ``result`` to ``output`` (atomically) or standard output; colour only on a TTY unless asked.

    Standard output may have a strict encoding (ASCII under ``LANG=C``): what it cannot encode is escaped."""
    use_color = color == "always" or (color == "auto" and output is None and sys.stdout.isatty()
                                      and not os.environ.get("NO_COLOR"))
    text = printable(render(result, fmt, color=use_color and fmt is Format.TERMINAL, show_ok=show_ok))
    if output:
        atomic_write_text(output, text)
        return
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    sys.stdout.write(text)
