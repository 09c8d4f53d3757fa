"""The gate's pipeline: find files, read them (the map), judge them phase by phase (the reduce), report.

    discover -> map: per file, read (compat.gate.read) [--values: value_stats]
                     (compat.gate.mapstep: in this process, --jobs workers or --ray tasks; --state keeps
                      what is done)
             -> reduce: expectations from each layout's majority, [--values: consistency], rules, phase by phase
                        -> [--reference: recompute, outliers first] -> the reference rule
             -> GateResult

The map step's results (``FileResult``: a file's views and measured values) are all the reduce step reads of a
file, and it takes them in the files' order however they were read, so a run's report is the same whatever
``--jobs``, ``--ray`` and whatever a state file supplied. Each phase's checks (``compat.gate.rules.checks``) run
over that phase's subjects: reading faults and failures, sample headers, measured values, each sample's standing in its
dataset, reference comparisons.
``run_gate(GateOptions(...))`` is the whole gate; ``compat.gate.cli`` only parses flags and renders. The gate
opens data files read-only and never modifies, moves or deletes them.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path
from typing import Any

from compat.errors import CompatError
from compat.findings import Status
from compat.gate import expect
from compat.gate.collect import Key, RuleResults, collect, where
from compat.gate.consistency import Standing, compare_samples
from compat.gate.datasets import LayoutOutlier, layout_outliers, unused_masks
from compat.gate.discover import discover
from compat.gate.filestep import ReadHints
from compat.gate.mapstep import map_files
from compat.gate.options import GateOptions
from compat.gate.partial import Partial, check_every_sample
from compat.gate.read.files import NOT_DATA
from compat.gate.read.layouts import Layout
from compat.gate.read.safetensors_header import forget_headers
from compat.gate.read.source import configure as configure_storage
from compat.gate.read.views import FailureKind, FileView, ReadFailure, SampleView
from compat.gate.recompute import recompute
from compat.gate.result import GateResult, GateSummary
from compat.gate.rules import RULES, STRUCTURAL, checks
from compat.gate.rules.dataset import CONSISTENCY
from compat.gate.rules.reference import REFERENCE
from compat.gate.rules.rule import Context, Phase
from compat.gate.rules.values import NONFINITE_POLICIES
from compat.gate.value_stats import FileValues

Progress = Callable[[int, int], None]
Subjects = Iterable[tuple[str, int | None, Any, Context]]
"""What a phase's checks look at: (file, sample index or None, subject, context)."""


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


def _model(options: GateOptions) -> expect.ModelInfo | None:
    """The model's config the run is held to: ``--model``'s, else ``--reference``'s."""
    if options.model:
        return expect.read_model_config(options.model)
    return expect.read_model_config(options.reference) if options.reference is not None else None


def _expectations(options: GateOptions, data_config: Path | str | None, model: expect.ModelInfo | None
                  ) -> tuple[expect.Expectations, tuple[expect.Conflict | expect.DataConfigFault, ...]]:
    """What the samples under ``data_config`` are judged by, and what is wrong with the metadata: each flag that
    contradicts ``data_config.json``, or the file itself where it cannot be taken at its word (then it states
    nothing)."""
    dc = expect.read_data_config(data_config) if data_config else None
    fault = (dc,) if isinstance(dc, expect.DataConfigFault) else ()
    exp, conflicts = expect.build(hidden_size=options.hidden_size, dtype=options.dtype, layers=options.layers,
                                  layer_ids=options.layer_ids, model=model,
                                  data_config=dc if isinstance(dc, expect.DataConfig) else None,
                                  override_data_config=options.override_data_config,
                                  model_flag="--model" if options.model else "--reference")
    return exp, fault + conflicts


def _judge(phase: Phase, subjects: Subjects, found: RuleResults) -> list[Key]:
    """Run ``phase``'s checks over its subjects into ``found``; the samples a finding asks to skip."""
    phase_checks = checks(phase)
    skip: list[Key] = []
    for file, index, subject, ctx in subjects:
        for rule, check in phase_checks:
            findings = check(subject, ctx)
            if findings:  # most checks find nothing: no key, no list
                key = (file, index)
                for f in findings:
                    found.setdefault(key, []).append((rule, f))
                    if f.skip_sample:
                        skip.append(key)
    return skip


def _read_subjects(views: list[FileView], base: Context, contexts: Contexts) -> Subjects:
    """Phase.READ: each file that could not be read, each fault found in a sample."""
    for view in views:
        if view.failure is not None:
            yield view.path, None, view.failure, base
        for s in view.samples:
            for fault in s.faults:
                yield s.file, s.index, fault, contexts[s]


def _dataset_read_subjects(conflicts: tuple[expect.Conflict | expect.DataConfigFault, ...],
                           outliers: list[LayoutOutlier], base: Context, contexts: Contexts) -> Subjects:
    """Phase.READ, about datasets: a data_config.json that cannot be taken at its word and each flag that
    contradicts one (keyed to that file), each sample whose layout is not its directory's."""
    for c in conflicts:
        yield str(c.path), None, c, base
    for o in outliers:
        yield o.view.file, o.view.index, o, contexts[o.view]


@dataclass(frozen=True)
class Contexts:
    """The context each sample is judged in: its dataset's, the samples of its layout that the same
    ``data_config.json`` governs (the nearest one above their files; None: none does)."""

    groups: dict[tuple[Path | str | None, Layout], Context]
    governing: Callable[[str], Path | str | None]

    def __getitem__(self, view: SampleView) -> Context:
        return self.groups[(self.governing(view.file), view.layout)]


def _governing(configs: dict[str, Path | str]) -> Callable[[str], Path | str | None]:
    """The nearest ``data_config.json`` above a file (``configs``: directory -> its config), worked out once per
    directory, without recursion (a tree may nest thousands deep)."""
    known: dict[str, Path | str | None] = {}

    def nearest(directory: str) -> Path | str | None:
        passed, d = [], directory
        while d not in known:
            if d in configs:
                known[d] = configs[d]
                break
            parent = d.rpartition("/")[0] if "://" in d else os.path.dirname(d)
            if not parent or parent == d:
                known[d] = None
                break
            passed.append(d)
            d = parent
        for p in passed:
            known[p] = known[d]
        return known[directory]

    if not configs:
        return lambda _file: None
    # A file's directory: what os.path.dirname gives for a file name (``rpartition`` costs a third of it, and
    # runs once per sample a context is asked for).
    return lambda file: nearest(file.rpartition("/")[0] or "/")


def _by_group(exps: dict[Path | str | None, expect.Expectations], samples: list[SampleView], misplaced: set[Key],
              governing: Callable[[str], Path | str | None]) -> dict[tuple[Path | str | None, Layout],
                                                                   expect.Expectations]:
    """Each dataset's expectations (the samples of one layout under one ``data_config.json``), what no flag or
    config states taken from the majority of its samples: a run over two datasets (say EAGLE checkpoints next to
    vLLM files, or two models' runs in two directories) must not judge one by the other, nor a dataset by a
    sample of its layout misplaced among another dataset's."""
    kept = [s for s in samples if (s.file, s.index) not in misplaced] if misplaced else samples
    members: dict[tuple[Path | str | None, Layout], list[SampleView]] = {}
    for s in kept:
        members.setdefault((governing(s.file), s.layout), []).append(s)
    return {(config, layout): expect.fill_from_dataset(exp, members.get((config, layout), []))
            for config, exp in exps.items() for layout in Layout}


def _header_subjects(samples: list[SampleView], base: Context, contexts: Contexts,
                     misplaced: set[Key]) -> Subjects:
    """Phase.HEADER: each sample, judged by its layout's expectations; a sample misplaced among another layout's
    dataset (its ``layout`` finding says so) by what is stated only: no dataset's majority is its own."""
    for s in samples:
        yield s.file, s.index, s, base if misplaced and (s.file, s.index) in misplaced else contexts[s]


def _dataset_value_subjects(scanned: list[tuple[str, FileValues]], base: Context,
                            contexts: Contexts) -> Subjects:
    """Phase.VALUES, about datasets: all-zero loss masks, a sample's, or its directory's when every one is."""
    for u in unused_masks(v for _, values in scanned for v in values.samples):
        if u.view is None:
            yield u.dataset, None, u, base
        else:
            yield u.view.file, u.view.index, u, contexts[u.view]


def _value_subjects(scanned: list[tuple[str, FileValues]], base: Context,
                    contexts: Contexts) -> Subjects:
    """Phase.VALUES: each measured sample, then its file's failure to read values, if any."""
    for path, values in scanned:
        for v in values.samples:
            yield v.view.file, v.view.index, v, contexts[v.view]
        if values.failure is not None:
            yield path, None, values.failure, base


def _measures_values(options: GateOptions) -> bool:
    """``--values``, or ``--reference``, which picks the samples to recompute from what the values show."""
    return options.values or options.reference is not None


def _dataset_subjects(scanned: list[tuple[str, FileValues]], found: RuleResults, contexts: Contexts,
                      root: Path | str) -> tuple[Subjects, dict[Key, Standing], dict]:
    """Phase.DATASET: each measured sample nothing has failed yet, against the others of its dataset (the samples
    of its layout in its directory: two models' datasets side by side are not compared with each other)."""
    datasets: dict[tuple[str, Layout], list] = {}
    for _, values in scanned:
        for v in values.samples:
            if (v.view.file, v.view.index) not in found and (v.view.file, None) not in found:
                datasets.setdefault((os.path.dirname(v.view.file), v.view.layout), []).append(v)
    standings: dict[Key, Standing] = {}
    summaries = {}
    for (directory, layout), members in datasets.items():
        model_type = contexts[members[0].view].expected.model_type
        run = compare_samples(members, model_type.value if model_type else None)
        summaries[f"{where(root, directory, None)[0]} ({layout.value})"] = run.summary
        standings.update(((s.values.view.file, s.values.view.index), s) for s in run.standings)
    subjects = [(key[0], key[1], s, contexts[s.values.view]) for key, s in standings.items()]
    return subjects, standings, summaries


def _confirmed(found: RuleResults) -> None:
    """A sample the dataset comparison set apart that HF transformers reproduces is right: its finding is kept,
    allowed."""
    for pairs in found.values():
        if any(rule == REFERENCE.name and f.status is Status.OK for rule, f in pairs):
            pairs[:] = [(rule, replace(f, allowed="HF transformers reproduces this sample: the reference check "
                                                  "passed") if rule == CONSISTENCY.name else f)
                        for rule, f in pairs]


def _hints(options: GateOptions, exp: expect.Expectations) -> ReadHints:
    """What the per-file step needs of the run: decided before any file is read, so every file is read alike."""
    return ReadHints(options.layout, exp.hidden_size.value if exp.hidden_size else None,
                     exp.layers.value if exp.layers else None, _measures_values(options), exp.vocab_size is not None)


def _run_gate(options: GateOptions, progress: Progress | None) -> GateResult:
    if options.nonfinite not in NONFINITE_POLICIES:
        raise CompatError(f"--nonfinite {options.nonfinite!r}: choose one of {', '.join(NONFINITE_POLICIES)}")
    unknown = sorted(set(options.ignore) - set(RULES))
    if unknown:
        raise CompatError(f"--ignore {', '.join(unknown)}: no such rule (see --list-rules)")
    if _measures_values(options) and importlib.util.find_spec("torch") is None:
        # torch reads what the gate's own readers do not (torch.load's fallback) and runs the reference: where it
        # is missing the run stops saying what to install (compat.cli), rather than calling files broken. Found,
        # not imported: --values computes in numpy, and the import costs seconds.
        raise ModuleNotFoundError("No module named 'torch'", name="torch")
    started = time.perf_counter()
    forget_headers()  # a run costs what its own files do, whatever ran before it in this process
    configure_storage(dict(options.storage_options))  # for the URLs' filesystems, wherever they are read
    found_files = discover(options.paths, options.follow_links)
    root, data_config = found_files.root, found_files.data_config
    configs = found_files.configs or ({os.path.dirname(str(data_config)): data_config} if data_config else {})
    exps: dict[Path | str | None, expect.Expectations] = {}
    issues: list[expect.Conflict | expect.DataConfigFault] = []
    model = _model(options)
    for config in (None, *configs.values()):
        exps[config], found_issues = _expectations(options, config, model)
        issues += found_issues
    conflicts = tuple(issues)
    exp = exps[data_config] if data_config in exps else exps[None]
    mapped = map_files(found_files.files, found_files.regular, _hints(options, exp), options.jobs, options.state,
                       progress, options.ray, found_files.stamps)
    views = [r.view for r in mapped.results]
    scanned = [(r.view.path, r.values) for r in mapped.results if r.values is not None]
    views += [FileView(link, 0, failure=ReadFailure(
        FailureKind.UNREADABLE, "a link to a directory already walked (a symlink loop, or a second link to the "
        "same directory): not walked again", "SymlinkLoop", fix=NOT_DATA)) for link in found_files.loops]
    views += [FileView(link, 0, failure=ReadFailure(FailureKind.UNREADABLE, why, "LinkNotFollowed", fix=NOT_DATA))
              for link, why in found_files.refused.items()]
    samples = [s for view in views for s in view.samples]
    outliers = layout_outliers(samples)
    misplaced = {(o.view.file, o.view.index) for o in outliers}
    governing = _governing(configs)
    by_group = _by_group(exps, samples, misplaced, governing)
    contexts = Contexts({group: Context(e, options) for group, e in by_group.items()}, governing)
    base = Context(exp, options)
    found: RuleResults = {}
    _judge(Phase.READ, chain(_read_subjects(views, base, contexts),
                             _dataset_read_subjects(conflicts, outliers, base, contexts)), found)
    _judge(Phase.HEADER, _header_subjects(samples, base, contexts, misplaced), found)
    skipped = _judge(Phase.VALUES, chain(_value_subjects(scanned, base, contexts),
                                         _dataset_value_subjects(scanned, base, contexts)), found)
    subjects, standings, consistency = _dataset_subjects(scanned, found, contexts, root)
    _judge(Phase.DATASET, subjects, found)
    layouts = Counter(v.samples[0].layout for v in views if v.samples)
    shown_layout = layouts.most_common(1)[0][0] if layouts else None
    if shown_layout is not None:
        exp = by_group[(data_config, shown_layout)]
    reference = None
    if options.reference is not None:
        # Recompute only what can be compared row by row; a failed value rule (a NaN, a suspicious order) is
        # exactly what a reference comparison should look at too.
        failed = {key for key, pairs in found.items() if any(rule in STRUCTURAL for rule, _ in pairs)}
        candidates = [s for s in samples if s.sound and (s.file, s.index) not in failed
                      and (s.file, None) not in failed]
        # Every sample's shallowest stored layer first (cheap: the layers up to it only); what it finds is what
        # the full recompute, which keeps its budget, looks at first.
        partial = check_every_sample(options, options.reference, lambda view: contexts[view].expected, candidates)
        whys = {key: s.why() for key, s in standings.items() if s.outlier}
        for c in partial.checks:
            if not (isinstance(c, Partial) and c.passed):
                key = (c.view.file, c.view.index)
                whys[key] = f"{whys[key]}; the partial recompute found it too" if key in whys else \
                    "the partial recompute found it"
        run = recompute(options, options.reference, exp, candidates, whys)
        reference = {**run.report, "partial": partial.summary}
        _judge(Phase.REFERENCE, ((c.view.file, c.view.index, c, contexts[c.view])
                                 for c in (*run.comparisons, *partial.checks)), found)
        _confirmed(found)
    findings = collect(views, found, options.ignore, root)
    summary = GateSummary(
        files=len(views), samples=len(samples), tokens=sum(s.tokens or 0 for s in samples),
        bytes=sum(v.size for v in views), value_bytes=sum(values.bytes_read for _, values in scanned),
        seconds=time.perf_counter() - started, layouts=tuple(sorted((k.value, n) for k, n in layouts.items())),
        skipped_samples=tuple(where(root, *key)[1] for key in skipped), reused=mapped.reused)
    notes = list(mapped.notes)
    if options.state is not None:
        notes.append(f"{mapped.reused} of {len(found_files.files)} files' results taken from the state file "
                     f"{options.state} (unchanged since they were checked), the rest read")
    if len(layouts) > 1 and shown_layout is not None:
        notes.append("several layouts: expectations no flag states come from each layout's own majority; the "
                     f"ones shown are for {shown_layout.value}")
    refused = {str(c.path) for c in conflicts if isinstance(c, expect.DataConfigFault)}
    for config in configs.values():
        notes.append(f"speculators data_config.json {'refused (see its finding)' if str(config) in refused else 'read'}"
                     f" from {config}" + (": it governs the files under its directory" if len(configs) > 1 else ""))
    if len(configs) > 1:
        notes.append(f"{len(configs)} datasets, each judged by the nearest data_config.json above its files; the "
                     f"expectations shown are {data_config}'s")
    return GateResult(tuple(findings), summary, exp, tuple(map(str, options.paths)), str(root), options.as_dict(),
                      reference, tuple(notes), options.strict, consistency or None)
