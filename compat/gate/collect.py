"""What the rules found, placed in files and samples and made into ``compat.findings.Finding``s, file by file:
``--ignore``d rules left out, and one ``ok`` finding (probe ``file``) for a file nothing failed. Findings about a
dataset as a whole (every loss mask all zero, a flag against its ``data_config.json``) are keyed to a path that is
no file read, its directory or its config, and come first."""

from __future__ import annotations

import os
from pathlib import Path

from compat.findings import Evidence, Finding, Place, Status
from compat.gate.read.views import FileView
from compat.gate.rules.rule import RuleFinding
from compat.report.escaping import escaped

Key = tuple[str, int | None]
"""A file (index None), a sample of a list file (its index), or a dataset (its directory or its
``data_config.json``, index None)."""
RuleResults = dict[Key, list[tuple[str, RuleFinding]]]
"""Per file or sample, (rule name, finding) in the order the rules ran."""


def where(root: Path | str, sample_file: str, index: int | None) -> tuple[str, str]:
    """A finding's symbol (``file#i``) and location (``file:i``), relative to ``root``."""
    return _named(_relative(root, sample_file), index)


def _named(rel: str, index: int | None) -> tuple[str, str]:
    return (rel, rel) if index is None else (f"{rel}#{index}", f"{rel}:{index}")


def _relative(root: Path | str, sample_file: str) -> str:
    """``sample_file`` relative to ``root``, on one line and printable: control characters (a newline is a legal
    file name character) and the bytes of a name that is not UTF-8 as ``\\xNN``."""
    top = str(root).rstrip(os.sep)
    prefix = top + os.sep
    return escaped(sample_file[len(prefix):] if sample_file.startswith(prefix) else
                   "." if sample_file == top else sample_file)


MESSAGE_LIMIT = 2000
"""Characters of a message (and of each side of its evidence) a report shows. Rules list at most a few
layers (``SHOWN``); this bounds what they do not foresee, such as the names a hostile file holds."""


def _capped(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _finding(root: str, key: Key, rule: str, f: RuleFinding) -> Finding:
    rel = _relative(root, key[0])
    symbol, location = _named(rel, key[1])
    extra = tuple((k, _capped(x)) for k, x in (("expected", f.expected), ("found", f.found)) if x is not None)
    return Finding(rule, f.status, symbol, location, None, _capped(f.message),
                   Evidence(traceback=f.traceback, extra=extra), fix=f.fix, allowed=f.allowed,
                   place=Place(rel, sample=key[1]))


def collect(views: list[FileView], found: RuleResults, ignore: frozenset[str], root: Path | str) -> list[Finding]:
    """Every dataset's findings, then every file's: the file's own first, then each sample's of a list file."""
    top = str(root)  # a str: where() would convert a Path for every finding
    files = {view.path for view in views}
    datasets = sorted((key for key in found if key[0] not in files), key=lambda key: key[0])
    findings = [_finding(top, key, rule, f) for key in datasets for rule, f in found[key] if rule not in ignore]
    for view in views:
        if (view.path, None) not in found and (not view.samples or view.samples[0].index is None):
            findings.append(_passed(top, view))  # a file of one sample nothing failed: most files of most runs
            continue
        keys = [(view.path, None)] + [(view.path, s.index) for s in view.samples if s.index is not None]
        shown = [_finding(top, key, rule, f) for key in keys for rule, f in found.get(key, ()) if rule not in ignore]
        if not any(f.status is not Status.OK for f in shown):
            shown.append(_passed(top, view))
        findings += shown
    return findings


_NO_EVIDENCE = Evidence()


def _passed(root: str, view: FileView) -> Finding:
    """The ``ok`` finding of a file nothing failed: made for most files of most runs, so made directly (half
    what ``_finding`` of a RuleFinding costs)."""
    rel = _relative(root, view.path)
    return Finding("file", Status.OK, rel, rel, None, _ok_message(view), _NO_EVIDENCE, place=Place(rel))


def _ok_message(view: FileView) -> str:
    if not view.samples:
        reason = view.failure.message if view.failure else "no samples"
        return f"not checked, its finding dropped by --ignore: {reason}"
    s = view.samples[0]
    layer = s.layers[0] if s.layers else None
    shape = f"[T, {layer.shape[-1]}] {layer.dtype}" if layer is not None else "-"
    tokens = (s.tokens or 0) if len(view.samples) == 1 else sum(x.tokens or 0 for x in view.samples)
    numbered = s.numbered
    return (f"{s.layout.value}: {len(view.samples)} sample(s), {tokens} tokens, {numbered} layers of {shape}"
            f"{' + target' if numbered != len(s.layers) else ''}; "
            "every rule passed")
