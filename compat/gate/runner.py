"""The gate's pipeline: find files, read headers, run the rules (and ``--values``, ``--reference``), report.

``run_gate(GateOptions(...))`` is the whole gate; ``compat.gate.cli`` only parses flags and renders.
The gate opens data files read-only and never modifies, moves or deletes them.
"""

from __future__ import annotations

import gc
import os
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from compat.errors import CompatError
from compat.findings import Evidence, Finding, Status
from compat.gate import expect
from compat.gate.read import DATA_SUFFIXES, FailureKind, FileView, Layout, SampleView, read_file
from compat.gate.read.tensor_data import open_file
from compat.gate.result import GateResult, GateSummary
from compat.gate.rules import RULES, Verdict, check_header, fill_from_dataset
from compat.gate.values import NONFINITE_POLICIES, check_values

DATA_CONFIG = "data_config.json"


@dataclass(frozen=True)
class GateOptions:
    paths: tuple[Path, ...]
    layout: Layout | None = None
    model: Path | None = None
    hidden_size: int | None = None
    dtype: str | None = None
    layers: int | None = None
    layer_ids: tuple[int, ...] | None = None
    values: bool = False
    nonfinite: str = "fail"
    reference: Path | None = None
    reference_samples: int = 4
    layer_numbering: str = "auto"
    max_rel: float | None = None
    min_cos: float | None = None
    ignore: frozenset[str] = field(default_factory=frozenset)
    strict: bool = False


Progress = Callable[[int, int], None]

_DIGITS = re.compile(r"(\d+)")


def natural_key(path: str) -> tuple:
    """``data_2.pt`` before ``data_10.pt`` (directories compare as text, names by their numbers)."""
    head, _, name = path.rpartition(os.sep)
    return head, tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


def _walk(top: str, out: list[str]) -> None:
    # os.scandir, not os.walk + pathlib: listing 100k files must cost less than checking them.
    with os.scandir(top) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue  # dot-files are other tools' in-progress writes (atomic renames), not data
            if entry.is_dir():
                _walk(entry.path, out)
            elif os.path.splitext(entry.name)[1] in DATA_SUFFIXES:
                out.append(entry.path)


def discover(paths: tuple[Path, ...]) -> tuple[list[str], Path, Path | None]:
    """Data files under ``paths`` (natural order), their common root, and a data_config.json if one is there."""
    files: list[str] = []
    configs: list[Path] = []
    for path in paths:
        if not path.exists():
            raise CompatError(f"{path}: no such file or directory")
        if path.is_file():
            if path.name == DATA_CONFIG:
                configs.append(path)
            else:
                files.append(os.path.abspath(path))  # named explicitly: read whatever its suffix
            continue
        if (path / DATA_CONFIG).is_file():
            configs.append(path / DATA_CONFIG)
        _walk(os.path.abspath(path), files)
    if not files:
        shown = ", ".join(map(str, paths))
        raise CompatError(f"no hidden-state files ({', '.join(sorted(DATA_SUFFIXES))}) under {shown}")
    files = sorted(set(files), key=natural_key)
    root = Path(os.path.commonpath([os.path.abspath(p if p.is_dir() else p.parent) for p in paths]))
    first_dir = Path(os.path.dirname(files[0]))
    if not configs and (first_dir / DATA_CONFIG).is_file():
        configs.append(first_dir / DATA_CONFIG)
    return files, root, configs[0] if configs else None


def _where(root: Path, sample_file: str, index: int | None) -> tuple[str, str]:
    prefix = str(root).rstrip(os.sep) + os.sep
    rel = sample_file[len(prefix):] if sample_file.startswith(prefix) else sample_file
    return (rel, rel) if index is None else (f"{rel}#{index}", f"{rel}:{index}")


def _finding(root: Path, file: str, index: int | None, v: Verdict, tb: str | None = None) -> Finding:
    symbol, location = _where(root, file, index)
    extra = tuple((k, x) for k, x in (("expected", v.expected), ("found", v.found)) if x is not None)
    return Finding(v.rule, v.status, symbol, location, None, v.message, Evidence(traceback=tb, extra=extra),
                   fix=v.fix, allowed=v.allowed)


def _expectations(options: GateOptions, data_config: Path | None) -> expect.Expectations:
    model = expect.read_model_config(options.model) if options.model else None
    if model is None and options.reference is not None:
        model = expect.read_model_config(options.reference)
    dc = expect.read_data_config(data_config) if data_config else None
    return expect.build(hidden_size=options.hidden_size, dtype=options.dtype, layers=options.layers,
                        layer_ids=options.layer_ids, model=model, data_config=dc)


def run_gate(options: GateOptions, progress: Progress | None = None) -> GateResult:
    """Check every file under ``options.paths``; bad input raises CompatError."""
    # The scan keeps a few small objects per file and makes no reference cycles; the cyclic collector's
    # repeated passes over 100k live views would cost more than reading the headers themselves.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_gate(options, progress)
    finally:
        if enabled:
            gc.enable()


def _run_gate(options: GateOptions, progress: Progress | None) -> GateResult:
    if options.nonfinite not in NONFINITE_POLICIES:
        raise CompatError(f"--nonfinite {options.nonfinite!r}: choose one of {', '.join(NONFINITE_POLICIES)}")
    unknown = sorted(set(options.ignore) - set(RULES))
    if unknown:
        raise CompatError(f"--ignore {', '.join(unknown)}: no such rule (see --list-rules)")
    started = time.perf_counter()
    files, root, data_config = discover(options.paths)
    exp = _expectations(options, data_config)
    hidden_hint = exp.hidden_size.value if exp.hidden_size else None
    layers_hint = exp.layers.value if exp.layers else None
    verdicts: dict[tuple[str, int | None], list[tuple[Verdict, str | None]]] = {}
    views: list[FileView] = []
    samples: list[SampleView] = []
    skipped: list[str] = []
    value_bytes = 0
    for n, path in enumerate(files, 1):
        view = read_file(path, options.layout, hidden_hint, layers_hint)
        views.append(view)
        samples += view.samples
        if view.failure is not None:
            rule = "layout" if view.failure.kind is FailureKind.LAYOUT_MISMATCH else "readable"
            f = view.failure
            verdicts.setdefault((path, None), []).append(
                (Verdict(rule, f"{f.message} [{f.error_type}]", _READ_FIX[rule], found=f.error_type), f.traceback))
        elif options.values:
            value_bytes += _scan_values(view, exp, options, verdicts, skipped, root)
        if progress is not None:
            progress(n, len(files))
    # What no flag or config states is taken from the majority of samples of the same layout: a run over
    # two datasets (say EAGLE checkpoints next to vLLM files) must not judge one by the other.
    by_layout = {layout: fill_from_dataset(exp, [s for s in samples if s.layout is layout]) for layout in Layout}
    for s in samples:
        key = (s.file, s.index)
        verdicts[key] = [(v, None) for v in check_header(s, by_layout[s.layout])] + verdicts.get(key, [])
    layouts = Counter(v.samples[0].layout for v in views if v.samples)
    exp_layout = layouts.most_common(1)[0][0] if layouts else None
    if exp_layout is not None:
        exp = by_layout[exp_layout]
    reference = None
    if options.reference is not None:
        from compat.gate.reference import run_reference

        # Recompute only what can be compared row by row; a failed value rule (a NaN, a suspicious order) is
        # exactly what a reference comparison should look at too.
        structural = {"readable", "layout", "token_ids", "seq_len", "layer_shape"}
        failed = {key for key, found in verdicts.items() if any(v.rule in structural for v, _ in found)}
        candidates = [s for s in samples if s.sound and (s.file, s.index) not in failed
                      and (s.file, None) not in failed]
        reference = run_reference(options, exp, candidates, verdicts)
    findings = _collect(views, verdicts, options.ignore, root)
    summary = GateSummary(
        files=len(views), samples=len(samples), tokens=sum(s.tokens or 0 for s in samples),
        bytes=sum(v.size for v in views), value_bytes=value_bytes, seconds=time.perf_counter() - started,
        layouts=tuple(sorted((k.value, n) for k, n in layouts.items())), skipped_samples=tuple(skipped))
    opts = {"layout": options.layout.value if options.layout else "auto", "values": options.values,
            "nonfinite": options.nonfinite, "reference": str(options.reference) if options.reference else None,
            "reference_samples": options.reference_samples, "layer_numbering": options.layer_numbering,
            "ignore": sorted(options.ignore), "strict": options.strict}
    notes = []
    if len(layouts) > 1:
        notes.append("several layouts: expectations no flag states come from each layout's own majority; the "
                     f"ones shown are for {exp_layout.value}")
    if data_config is not None:
        notes.append(f"speculators data_config.json read from {data_config}")
    return GateResult(tuple(findings), summary, exp, tuple(map(str, options.paths)), str(root), opts, reference,
                      tuple(notes), options.strict)


_READ_FIX = {"readable": "re-extract this sample; the file is damaged or was never completely written",
             "layout": "pass the right --layout, or re-extract with a supported writer"}


def _scan_values(view: FileView, exp: expect.Expectations, options: GateOptions,
                 verdicts: dict, skipped: list[str], root: Path) -> int:
    read = 0
    try:
        with open_file(view) as tensors:
            for st in tensors:
                if not st.view.sound:
                    continue  # the header rules report why; values of a malformed sample mean nothing
                outcome = check_values(st, exp, options.nonfinite)
                read += outcome.bytes_read
                verdicts.setdefault((st.view.file, st.view.index), []).extend((v, None) for v in outcome.verdicts)
                if outcome.skipped:
                    skipped.append(_where(root, st.view.file, st.view.index)[1])
    except Exception as exc:  # noqa: BLE001 - a file whose values cannot be read is a finding, the gate goes on
        verdicts.setdefault((view.path, None), []).append((Verdict(
            "readable", f"reading tensor values failed: {type(exc).__name__}: {exc}",
            _READ_FIX["readable"], status=Status.BROKEN, found=type(exc).__name__), traceback.format_exc()))
    return read


def _collect(views: list[FileView], verdicts: dict, ignore: frozenset[str], root: Path) -> list[Finding]:
    findings: list[Finding] = []
    for view in views:
        keys = [(view.path, None)] + [(view.path, s.index) for s in view.samples if s.index is not None]
        shown = []
        for key in keys:
            for v, tb in verdicts.get(key, []):
                if v.rule not in ignore:
                    shown.append(_finding(root, key[0], key[1], v, tb))
        if not any(f.status is not Status.OK for f in shown):
            shown.append(_finding(root, view.path, None, Verdict("file", _ok_message(view), status=Status.OK)))
        findings += shown
    return findings


def _ok_message(view: FileView) -> str:
    s = view.samples[0]
    layer = s.layers[0] if s.layers else None
    shape = f"[T, {layer.shape[-1]}] {layer.dtype}" if layer is not None else "-"
    tokens = sum(x.tokens or 0 for x in view.samples)
    return (f"{s.layout.value}: {len(view.samples)} sample(s), {tokens} tokens, {len(s.layers)} layers of {shape}; "
            "every rule passed")
