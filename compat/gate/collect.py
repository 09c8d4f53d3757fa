"""What the rules found, placed in files and samples and made into ``compat.findings.Finding``s, file by file:
``--ignore``d rules left out, and one ``ok`` finding (probe ``file``) for a file nothing failed. Findings about a
dataset as a whole (every loss mask all zero, a flag against its ``data_config.json``) are keyed to a path that is
no file read, its directory or its config, and come first."""

from __future__ import annotations

import os
import re
from pathlib import Path

from compat.findings import Evidence, Finding, Status
from compat.gate.read.views import FileView
from compat.gate.rules.rule import RuleFinding

Key = tuple[str, int | None]
"""A file (index None), a sample of a list file (its index), or a dataset (its directory or its
``data_config.json``, index None)."""
Found = dict[Key, list[tuple[str, RuleFinding]]]
"""Per file or sample, (rule name, finding) in the order the rules ran."""


def where(root: Path | str, sample_file: str, index: int | None) -> tuple[str, str]:
    """A finding's symbol (``file#i``) and location (``file:i``), relative to ``root``."""
    top = str(root).rstrip(os.sep)
    prefix = top + os.sep
    rel = _shown(sample_file[len(prefix):] if sample_file.startswith(prefix) else
                 "." if sample_file == top else sample_file)
    return (rel, rel) if index is None else (f"{rel}#{index}", f"{rel}:{index}")


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _shown(path: str) -> str:
    """A path on one line: control characters (a newline is a legal file name character) as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", path)


def _finding(root: str, key: Key, rule: str, f: RuleFinding) -> Finding:
    symbol, location = where(root, *key)
    extra = tuple((k, x) for k, x in (("expected", f.expected), ("found", f.found)) if x is not None)
    return Finding(rule, f.status, symbol, location, None, f.message, Evidence(traceback=f.traceback, extra=extra),
                   fix=f.fix, allowed=f.allowed)


def collect(views: list[FileView], found: Found, ignore: frozenset[str], root: Path) -> list[Finding]:
    """Every dataset's findings, then every file's: the file's own first, then each sample's of a list file."""
    top = str(root)  # a str: where() would convert a Path for every finding
    files = {view.path for view in views}
    datasets = sorted((key for key in found if key[0] not in files), key=lambda key: key[0])
    findings = [_finding(top, key, rule, f) for key in datasets for rule, f in found[key] if rule not in ignore]
    for view in views:
        keys = [(view.path, None)] + [(view.path, s.index) for s in view.samples if s.index is not None]
        shown = [_finding(top, key, rule, f) for key in keys for rule, f in found.get(key, ()) if rule not in ignore]
        if not any(f.status is not Status.OK for f in shown):
            shown.append(_finding(top, (view.path, None), "file", RuleFinding(_ok_message(view), status=Status.OK)))
        findings += shown
    return findings


def _ok_message(view: FileView) -> str:
    if not view.samples:
        reason = view.failure.message if view.failure else "no samples"
        return f"not checked, its finding dropped by --ignore: {reason}"
    s = view.samples[0]
    layer = s.layers[0] if s.layers else None
    shape = f"[T, {layer.shape[-1]}] {layer.dtype}" if layer is not None else "-"
    tokens = sum(x.tokens or 0 for x in view.samples)
    return (f"{s.layout.value}: {len(view.samples)} sample(s), {tokens} tokens, {s.numbered} layers of {shape}"
            f"{' + target' if s.numbered != len(s.layers) else ''}; "
            "every rule passed")
