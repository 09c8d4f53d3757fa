"""What a gate rule is: a ``Rule`` value (name, description, phase, structural or not, check), and what its
check returns, ``RuleFinding``s.

A check is a function ``(subject, context) -> Sequence[RuleFinding]``: empty when the rule holds. Its
subject depends on the phase it runs in:

- ``Phase.READ``: each thing reading could not make sense of: a file's ``ReadFailure`` or a sample's
  ``EntryFault`` (``compat.gate.read.views``), a sample whose layout is not its dataset's
  (``compat.gate.datasets.LayoutOutlier``), each flag that contradicts ``data_config.json``
  (``compat.gate.expect.Conflict``, keyed to that file) and a ``data_config.json`` that cannot be taken at its
  word (``compat.gate.expect.DataConfigFault``);
- ``Phase.HEADER``: each ``SampleView``: shapes and dtypes from the headers alone (every run);
- ``Phase.VALUES`` (``--values``): each sound sample's ``SampleValues`` (``compat.gate.value_stats``), or a
  file's ``ReadFailure`` when its tensor values could not be read; then the all-zero loss masks, a sample's or
  a whole dataset's (``compat.gate.datasets.UnusedMasks``);
- ``Phase.DATASET`` (``--values``, ``--reference``): each measured sample's ``Standing`` among the samples of
  its dataset (``compat.gate.consistency``);
- ``Phase.REFERENCE`` (``--reference``): each recomputed sample's ``Comparison`` or ``ComparisonError``
  (``compat.gate.recompute``), then every sample's ``Pairing`` (``compat.gate.pairing``) and ``Partial``
  (``compat.gate.partial``: its shallowest stored layer against the model recomputed up to it).

The context holds the expectations for the subject's layout and the run's options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from compat.findings import Status
from compat.gate.consistency import Standing
from compat.gate.datasets import LayoutOutlier, UnusedMasks
from compat.gate.expect import Conflict, DataConfigFault, Expectations
from compat.gate.options import GateOptions
from compat.gate.pairing import Pairing
from compat.gate.partial import Partial
from compat.gate.read.views import EntryFault, ReadFailure
from compat.gate.recompute import Comparison, ComparisonError
from compat.gate.value_stats import SampleValues


class Phase(str, Enum):
    """When a check runs, in this order; a sample's findings are listed in the same order."""

    READ = "read"
    HEADER = "header"
    VALUES = "values"
    DATASET = "dataset"
    REFERENCE = "reference"


@dataclass(frozen=True, slots=True)
class RuleFinding:
    """What a rule found about one sample (or file): by default a failure; with status OK, a pass worth
    reporting. The runner places it (file, sample) and names the rule when it becomes a ``Finding``."""

    message: str
    fix: str | None = None
    expected: str | None = None
    found: str | None = None
    status: Status = Status.BROKEN
    allowed: str | None = None
    """Why a policy accepts it (it is reported, and does not fail the run)."""
    traceback: str | None = None
    """Where it came from, when Python raised."""
    skip_sample: bool = False
    """List the sample in ``summary.skipped_samples``, for the trainer to drop (``--nonfinite skip``)."""


@dataclass(frozen=True, slots=True)
class Context:
    """What a check knows besides its subject."""

    expected: Expectations
    """For the subject's layout: flags, model config, data_config.json, else the majority of its samples."""
    options: GateOptions


ReadSubject = ReadFailure | EntryFault | LayoutOutlier | Conflict | DataConfigFault
ValueSubject = SampleValues | ReadFailure | UnusedMasks
DatasetSubject = Standing
ReferenceSubject = Comparison | ComparisonError | Pairing | Partial
Check = Callable[[Any, Context], Sequence[RuleFinding]]
"""``(subject, context) -> findings``, the subject being the phase's (``ReadSubject``...)."""


@dataclass(frozen=True)
class Rule:
    name: str
    """What ``--ignore`` names and findings carry (``Finding.check``)."""
    description: str
    """One line for ``--list-rules``."""
    phase: Phase
    check: Check
    """The check that runs in ``phase``."""
    structural: bool = False
    """A sample failing it cannot be compared row by row: ``--reference`` leaves it out."""
    also: Mapping[Phase, Check] = field(default_factory=dict)
    """Checks the rule makes in other phases (``token_ids``: ids within the vocabulary under ``--values``)."""


SHOWN = 5
"""Items a message lists before saying how many more there are: a file may claim thousands of layers."""


def some(items: Sequence[str], sep: str = ", ") -> str:
    """The first ``SHOWN`` of ``items`` joined by ``sep``, then how many more there are."""
    more = f"{sep}and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return sep.join(items[:SHOWN]) + more
