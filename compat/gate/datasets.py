"""Samples judged by their dataset, a dataset being the samples of one directory: a sample of another layout
among them, and loss masks that train nothing.

A run may cover several datasets (EAGLE checkpoints in one directory, vLLM files in another), and each is judged
by itself; within one directory the samples were written by one tool for one loader, so a sample of another
layout there is a mistake that loader trips on (a vLLM dict among speculators files: ``KeyError: 'input_ids'``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from compat.gate.read.layouts import Layout
from compat.gate.read.views import SampleView
from compat.gate.value_stats import SampleValues


def _by_directory(samples: Iterable[SampleView]) -> dict[str, list[SampleView]]:
    groups: dict[str, list[SampleView]] = {}
    for s in samples:
        groups.setdefault(os.path.dirname(s.file), []).append(s)
    return groups


@dataclass(frozen=True)
class LayoutOutlier:
    """A sample whose layout is not its dataset's: the one more than half the samples of its directory follow
    (without such a majority no layout is the dataset's, and no sample is the mistake)."""

    view: SampleView
    dataset: str
    """The directory."""
    layout: Layout
    """The dataset's layout."""
    count: int
    """Samples of the directory that follow ``layout``."""
    total: int
    """Samples read in the directory."""


def layout_outliers(samples: Iterable[SampleView]) -> list[LayoutOutlier]:
    """Every sample whose layout is not the layout of more than half the samples of its directory."""
    out = []
    for directory, group in _by_directory(samples).items():
        counts = Counter(s.layout for s in group)
        layout, n = counts.most_common(1)[0]
        if len(counts) > 1 and 2 * n > len(group):
            out += [LayoutOutlier(s, directory, layout, n, len(group)) for s in group if s.layout is not layout]
    return out


@dataclass(frozen=True)
class UnusedMasks:
    """Loss masks that are all zero, so that nothing would be trained on those tokens: one sample's (``view``),
    or, when every measured mask of the dataset is, the dataset's as a whole (``view`` None: one finding, not
    one per sample)."""

    view: SampleView | None
    dataset: str
    """The directory."""
    zero: int
    """All-zero masks in the directory."""
    measured: int
    """Samples of the directory whose mask ``--values`` read."""


def unused_masks(values: Iterable[SampleValues]) -> list[UnusedMasks]:
    """The all-zero loss masks, per directory: each sample's, or the dataset's when all (and more than one) are."""
    measured: dict[str, list[SampleValues]] = {}
    for v in values:
        if v.mask_all_zero is not None:
            measured.setdefault(os.path.dirname(v.view.file), []).append(v)
    out = []
    for directory, group in measured.items():
        zero = [v for v in group if v.mask_all_zero]
        if len(zero) == len(group) > 1:
            out.append(UnusedMasks(None, directory, len(zero), len(group)))
        else:
            out += [UnusedMasks(v.view, directory, len(zero), len(group)) for v in zero]
    return out
