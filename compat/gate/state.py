"""``--state FILE``: the files a gate run has checked, so that a run after an interruption reads only the rest.

A state file is JSON lines, appended to and flushed after every batch. The first line says what wrote it::

    {"format": "compat.gate.state/3", "generated_by": "compat X.Y.Z", "hints": ReadHints.as_dict()}

and every other line is one checked file::

    {"path": str, "size": int, "mtime_ns": int, "etag": str | null, "result": filejson.encode_result(...)}

A file whose stamp (size and modification time; for a file named by URL, size and ETag, or size and modification
time where its filesystem keeps no ETag, as its listing gave them: ``source.listed_stamp``) is the one recorded is
not read again: its recorded result stands for it. When a run starts, the file is left with those records alone
(the records of files changed, gone or unreadable dropped, atomically), so it holds one line per file. Only
regular files (and files named by URL whose listing gave a stamp) are recorded, and only after they were checked.
A state written by another version of the gate or with other ``ReadHints`` (``--layout``, the expected hidden
size or layer count, ``--values``, a known vocabulary) is refused (``CompatError``: the results it holds are not
what this run would find); a line that cannot be read (the last one, cut short when a run was killed while
writing it) is left out with a note, and its file is read again.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from compat import __version__
from compat.errors import CompatError
from compat.gate.filejson import decode_result, encode_result
from compat.gate.filestep import FileResult, ReadHints
from compat.gate.read import metadata
from compat.gate.read.source import is_url

FORMAT = "compat.gate.state/3"
"""``/2``: a layer's rows too small for any state (``tiny_rows``, ``first_tiny``) are recorded. A record leaves out
what is 0, so a ``/1`` record cannot say whether a layer had none: a ``/1`` file is refused, not read as none.
``/3``: rows wider than ``value_stats.PROJECTED`` are projected by numpy's generator, not torch's: a ``/2`` file's
prefix rows cannot be compared with a new run's, so it is refused."""

Stamp = tuple[int, int, str | None]
"""What says a file is unchanged: size, modification time in nanoseconds (0 where an ETag stands for it), ETag
(object storage; None for local files)."""


def stamp(path: str) -> Stamp | None:
    """``path``'s stamp, or None where it is no regular file (those are never recorded: read again each run)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return (info.st_size, info.st_mtime_ns, None) if stat.S_ISREG(info.st_mode) else None


def stamps(files: list[str], listed: Mapping[str, Stamp] | None = None) -> list[Stamp | None]:
    """Each file's stamp: a local file's from ``stat``, one named by URL from its listing (``listed``, from
    ``compat.gate.discover``: no request per file); None for a URL not there (it is not recorded)."""
    listed = listed or {}
    return [listed.get(p) if "://" in p and is_url(p) else stamp(p) for p in files]


@dataclass
class StateFile:
    """An open state file: what it recorded that still holds (``start``), and where this run's results are
    appended (``record``)."""

    path: Path
    header: dict[str, Any]
    recorded: dict[str, tuple[Stamp, dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    lines: int = 0
    """Lines the file held when opened, its header's included (0: no usable header)."""
    stream: IO[str] | None = None

    @classmethod
    def open(cls, path: Path, hints: ReadHints) -> StateFile:
        """Read ``path`` (a state file, or none yet); refused where it is not one or was written for other
        ``hints``."""
        state = cls(path, {"format": FORMAT, "generated_by": f"compat {__version__}", "hints": hints.as_dict()})
        lines = _lines(path)
        if lines and state._read(lines):
            state.lines = len(lines)
        return state

    def start(self, files: list[str], stamps: list[Stamp | None]) -> dict[int, FileResult]:
        """The recorded results of ``files`` unchanged since (by position); the file is then left with those
        alone (records of files changed, gone or unreadable dropped), and opened to append to."""
        reused: dict[int, FileResult] = {}
        kept: dict[str, tuple[Stamp, dict[str, Any]]] = {}
        for i, (path, now) in enumerate(zip(files, stamps)):
            recorded = self.recorded.get(path)
            if recorded is None or now is None or recorded[0] != now:
                continue
            try:
                reused[i] = decode_result(path, recorded[1])
            except (ValueError, KeyError, TypeError, IndexError):
                self.notes.append(f"state file {self.path}: the record of {path!a} could not be read: read again")
                continue
            kept[path] = recorded
        if self.lines != len(kept) + 1:  # else every line is kept as it is
            _rewrite(self.path, self.header, kept)
        self.recorded = {}
        try:
            self.stream = open(self.path, "a", encoding="utf-8")
        except OSError as exc:
            raise CompatError(f"--state {self.path}: cannot write: {exc.strerror or exc}") from None
        return reused

    def _read(self, lines: list[str]) -> bool:
        """Take in what ``lines`` recorded; False when they are to be started again."""
        try:
            found = json.loads(lines[0])
        except (ValueError, RecursionError):  # nested deeper than Python's reader goes: not what a run writes
            found = None
        if not isinstance(found, dict) or found.get("format") != FORMAT:
            if len(lines) == 1 and not lines[0].endswith("\n"):  # cut short while its first line was written
                self.notes.append(f"state file {self.path}: its first line was cut short; started again")
                return False
            older = isinstance(found, dict) and str(found.get("format", "")).startswith("compat.gate.state/")
            raise CompatError(f"--state {self.path}: " + (
                f"written in the older format {_shown(found.get('format'))} (this gate writes {FORMAT}, whose "
                "records hold what that one's cannot): name another state file, or delete this one" if older else
                f"not a gate state file (its first line is not a {FORMAT} header)"))
        for key, flag in (("generated_by", "the gate's version"), ("hints", "the options that change what is read")):
            if found.get(key) != self.header[key]:
                raise CompatError(f"--state {self.path}: written with other {flag} ({key} {_shown(found.get(key))}, "
                                  f"this run's {_shown(self.header[key])}): name another state file, or delete "
                                  "this one")
        bad = 0
        for n, line in enumerate(lines[1:], 2):
            try:
                record = json.loads(line)
                path, size, mtime, etag = record["path"], record["size"], record["mtime_ns"], record["etag"]
                if not (type(path) is str and type(size) is int and type(mtime) is int and isinstance(
                        record["result"], dict) and (etag is None or type(etag) is str)):
                    raise ValueError("a field of the wrong type")
            except (ValueError, KeyError, TypeError, RecursionError):
                if n == len(lines) and not line.endswith("\n"):
                    self.notes.append(f"state file {self.path}: its last line was cut short (a run stopped while "
                                      "writing it): that file is read again")
                else:
                    bad += 1
                continue
            self.recorded[path] = ((size, mtime, etag), record["result"])
        if bad:
            self.notes.append(f"state file {self.path}: {bad} line(s) could not be read: those files are read again")
        return True

    def record(self, done: list[tuple[str, Stamp, FileResult]]) -> None:
        """Append checked files, then flush: a run killed after this keeps them."""
        assert self.stream is not None
        self.stream.write("".join(_line(path, s, result) for path, s, result in done))
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


def _lines(path: Path) -> list[str]:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CompatError(f"--state {path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode) or metadata.system_path(path):
        raise CompatError(f"--state {path}: not a regular file of its own (a FIFO, a device, a directory or a "
                          "system file): name a file the gate may write")
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.readlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CompatError(f"--state {path}: cannot read: {exc.strerror or exc}") from None


def _line(path: str, s: Stamp, result: FileResult | dict[str, Any]) -> str:
    encoded = encode_result(result) if isinstance(result, FileResult) else result
    # ASCII only: a file name that is not UTF-8 (a lone surrogate in Python) is written as \udcXX and read back
    return json.dumps({"path": path, "size": s[0], "mtime_ns": s[1], "etag": s[2], "result": encoded},
                      separators=(",", ":")) + "\n"


def _rewrite(path: Path, header: dict[str, Any], kept: dict[str, tuple[Stamp, dict[str, Any]]]) -> None:
    """The header and ``kept`` alone, replacing ``path`` at once (a run killed meanwhile leaves the old file)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(json.dumps(header, separators=(",", ":")) + "\n")
            f.writelines(_line(p, s, result) for p, (s, result) in kept.items())
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise CompatError(f"--state {path}: cannot write: {exc.strerror or exc}") from None


def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
