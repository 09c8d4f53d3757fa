"""An audit's findings kept in the cache, for an audit that would compute the same ones again.

The findings are a function of the scan, the builds read, the options and the tool's own code. Where every input
is immutable (a consumer release and vLLM releases from the package index, read statically), the second audit of
the same pair reads the findings the first one wrote instead of running every probe again; any other input (a
directory, an installed build, a source tree, a runtime reading, the runtime confirmation) is audited every time.
The key holds the scan itself (a caller may hand over a scan it changed, as the fix's re-audit does), each build's
identity, every option a probe reads, and the size and modification time of every file of the tool's code.
"""

from __future__ import annotations

import functools
import hashlib
import io
import pickle
import sys
from dataclasses import astuple
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from compat.consumer.result import Scan
    from compat.findings import Finding
    from compat.vllm.surface import Surface

FORMAT = 1
_RELEASE = "release "


class ProbeOptions(Protocol):
    """What of the audit's options the probes read (``compat.audit.pipeline.AuditOptions`` has them)."""

    @property
    def worker_class(self) -> str: ...

    @property
    def target(self) -> str: ...

    @property
    def vllm_version(self) -> str | None: ...

    @property
    def architectures(self) -> tuple[str, ...]: ...

    @property
    def all_files(self) -> bool: ...


@functools.cache
def tool_fingerprint() -> str:
    """The tool's code as this process first saw it: every ``.py`` of ``compat`` (and of a source checkout's
    ``probes/`` and ``fixers/``, which install inside it), by path, size and modification time."""
    package = Path(__file__).resolve().parents[1]
    roots = [package] + [package.parent / name for name in ("probes", "fixers") if (package.parent / name).is_dir()]
    parts = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            stat = path.stat()
            parts.append(f"{path.relative_to(root.parent)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def key(scan: Scan, surface: Surface, reference: Surface | None, options: ProbeOptions, installed: bool) -> str | None:
    """The key of these findings, or None where an input may change between two audits (or the runtime
    confirmation may run)."""
    if installed or not scan.origin.startswith(_RELEASE):
        return None
    builds = [s.build for s in (surface, reference) if s is not None]
    if any(not b.origin.startswith(_RELEASE) or b.reading != "static" for b in builds):
        return None
    digest = hashlib.sha256()
    for part in (str(FORMAT), sys.version, tool_fingerprint(), repr([astuple(b) for b in builds]),
                 repr(reference is None), repr((options.worker_class, options.target, options.vllm_version,
                                                options.architectures, options.all_files))):
        digest.update(part.encode() + b"\0")
    digest.update(_by_value(scan))
    return digest.hexdigest()[:32]


def _by_value(scan: Scan) -> bytes:
    """The scan's bytes by value alone: a plain pickle records which equal objects are the same object, which differs
    between a scan just made and the same scan read back from the cache."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # no memo: every object written out where it occurs
    pickler.dump(scan)
    return out.getvalue()


def _path(memo_key: str) -> Path:
    from compat.cache import cache_dir

    return cache_dir() / "audits" / f"{memo_key}.pickle"


def load(memo_key: str) -> list[Finding] | None:
    """The findings kept under ``memo_key``; None when there are none (or they cannot be read)."""
    from compat.findings import Finding

    try:
        kept = pickle.loads(_path(memo_key).read_bytes())
    except Exception:  # noqa: BLE001 - absent, cut short or from another version: audit again
        return None
    if isinstance(kept, list) and all(isinstance(f, Finding) for f in kept):
        return kept
    return None


def save(memo_key: str, findings: list[Finding]) -> None:
    from compat.cache import atomic_write_bytes

    path = _path(memo_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, pickle.dumps(findings, protocol=pickle.HIGHEST_PROTOCOL))
