"""The plan for one engine environment: which torch, which requirements, which pip commands, in order.

The plan is made from the wheel itself (its METADATA and its platform detection code) and the index's
upload dates, so what an environment holds is derived from the release, not from a table of versions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from compat.engines.alias import DistAlias
from compat.engines.requirements import WheelMetadata, cap_later_majors, install_requirements, torch_pin

CAPPED_AT_UPLOAD = ("transformers",)
"""Requirements kept to the major releases that existed when the wheel was uploaded: vLLM's model and
tokenizer code follows transformers' major API, and older builds ask for ``transformers>=4.x`` unbounded."""
REMOVED = ("torchvision", "torchaudio", "torchcodec")
"""Uninstalled last if anything pulled them in: their CUDA builds break ``import transformers`` (RUNTIME.md)."""


@dataclass(frozen=True)
class BuildPlan:
    project: str
    version: str
    wheel: str
    """The wheel's file name."""
    torch: str
    """The plain torch release installed first and held by a constraint (the wheel's pin without ``+cpu``)."""
    requirements: tuple[str, ...]
    """The wheel's other requirements for this platform, as pip is given them."""
    changed: tuple[str, ...] = ()
    """Each requirement the plan changed from the wheel's metadata, and why."""
    alias: DistAlias | None = None
    removed: tuple[str, ...] = REMOVED

    @property
    def constraints(self) -> str:
        """The constraint file every install after torch's runs under."""
        return f"torch=={self.torch}\n"

    def pip_commands(self, wheel: Path, constraints: Path) -> tuple[tuple[str, ...], ...]:
        """The pip argument lists, in order (each run as ``ENV_PYTHON -m pip ...``)."""
        return (("install", f"torch=={self.torch}"),
                ("install", "--no-deps", str(wheel)),
                ("install", "--constraint", str(constraints), *self.requirements),
                ("uninstall", "--yes", *self.removed))


def make_plan(metadata: WheelMetadata, wheel: str, environment: Mapping[str, str],
              uploaded: datetime | None = None,
              releases: Mapping[str, Iterable[tuple[Version, datetime]]] | None = None,
              alias: DistAlias | None = None) -> BuildPlan:
    """The plan for ``metadata``'s wheel on the platform ``environment`` describes (PEP 508 markers).

    ``releases`` gives, for the names in ``CAPPED_AT_UPLOAD``, each release and its upload time; with the
    wheel's ``uploaded`` time they keep those requirements to the majors the build was made against.
    """
    torch = torch_pin(metadata.requires, environment)
    requirements, changed = [], []
    for req in install_requirements(metadata.requires, environment):
        name = canonicalize_name(req.name)
        if uploaded is not None and releases is not None and name in CAPPED_AT_UPLOAD and name in releases:
            capped = cap_later_majors(req, releases[name], uploaded)
            if str(capped) != str(req):
                changed.append(f"{req} -> {capped}: the wheel was uploaded on {uploaded:%Y-%m-%d}, before "
                               f"{req.name}'s next major release")
                req = capped
        requirements.append(str(req))
    return BuildPlan(metadata.name, metadata.version, wheel, str(torch), tuple(requirements), tuple(changed), alias)
