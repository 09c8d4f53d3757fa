"""A persistent memo of a static surface's answers, so a warm audit parses nothing.

Every question the probes ask (lookup, member, signature, types, definitions) is stored with its
answer, per build, in the cache directory. The files the answers were read from are recorded with
their size and mtime; when any of them changed (a source checkout moved on), the memo is dropped.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from compat.cache import atomic_write_text, cache_dir
from compat.facts import Fact
from compat.facts.codec import decode, encode
from compat.location import Location
from compat.signature import Parameter, ParamKind, Signature
from compat.vllm.definitions import definition
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo, Found, FoundKind, Lookup, Missing, Unresolved

FORMAT = 6
T = TypeVar("T")


@functools.cache
def _code_fingerprint() -> str:
    """The memo is only valid for the code that computed it: this package's files, by size and mtime, as they
    were when this process first asked (a build opened later in a long run must not file what the code already
    loaded computes under the fingerprint of files edited since)."""
    package = Path(__file__).resolve().parent.parent
    parts = []
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        parts.append(f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _encode(value: Any) -> Any:
    if isinstance(value, Found):
        loc = [value.location.file, value.location.line] if value.location else None
        wraps = {"wraps": _encode(value.wraps)} if value.wraps is not None else {}
        return {"t": "found", "path": value.path, "kind": value.kind, "loc": loc} | wraps
    if isinstance(value, Missing):
        return {"t": "missing", "reason": value.reason, "elsewhere": list(value.elsewhere)}
    if isinstance(value, Unresolved):
        return {"t": "unresolved", "reason": value.reason, "traceback": value.traceback, "outside": value.outside}
    if isinstance(value, Signature):
        return {"t": "sig", "returns": value.returns,
                "params": [[p.name, p.kind.value, p.has_default, p.default, p.annotation] for p in value.parameters]}
    if isinstance(value, tuple):
        return {"t": "tuple", "items": list(value)}
    raise TypeError(f"cannot cache {type(value).__name__}")


def _decode(data: Any) -> Any:
    kind = data["t"]
    if kind == "found":
        loc = Location(*data["loc"]) if data["loc"] else None
        return Found(data["path"], FoundKind(data["kind"]), loc,
                     wraps=_decode(data["wraps"]) if "wraps" in data else None)
    if kind == "missing":
        return Missing(data["reason"], tuple(data["elsewhere"]))
    if kind == "unresolved":
        return Unresolved(data["reason"], data["traceback"], data.get("outside", False))
    if kind == "sig":
        params = tuple(Parameter(n, ParamKind(k), d, dv, a) for n, k, d, dv, a in data["params"])
        return Signature(params, data["returns"])
    return tuple(data["items"])


def _owner_key(owner: Found) -> str:
    wraps = f"[{_owner_key(owner.wraps)}]" if owner.wraps is not None else ""
    return f"{owner.kind}:{owner.path}{wraps}"


class CachedSurface:
    """Answers from the memo when it has them, from the static reading (parsing on demand) when not."""

    def __init__(self, inner: StaticSurface) -> None:
        self.inner = inner
        self.build: BuildInfo = inner.build
        key = f"{FORMAT}:{_code_fingerprint()}:{inner.index.root.resolve()}:{inner.package}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        self.path = cache_dir() / "surfaces" / f"{digest}.json"
        self._memo: dict[str, Any] | None = None
        self.facts: dict[str, Any] = {}
        """Facts decoded from the memo (or just read) in this process, by memo key."""
        self._files: dict[str, list[int]] = {}
        self.dirty = False

    # ---- persistence ---------------------------------------------------------------------
    @property
    def memo(self) -> dict[str, Any]:
        """The answers kept, read from the cache at the first question (an audit whose findings are kept asks
        none)."""
        if self._memo is None:
            self._memo, self._files = self._load()
        return self._memo

    @property
    def files(self) -> dict[str, list[int]]:
        self.memo  # noqa: B018 - loaded with the memo
        return self._files

    def _load(self) -> tuple[dict[str, Any], dict[str, list[int]]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}, {}
        for file, (size, mtime) in data.get("files", {}).items():
            try:
                stat = os.stat(file)
            except OSError:
                return {}, {}
            if stat.st_size != size or stat.st_mtime_ns != mtime:
                return {}, {}
        return data.get("memo", {}), data.get("files", {})

    def save(self) -> None:
        for path in self.inner.index.parsed_files:
            if str(path) not in self.files:
                stat = os.stat(path)
                self.files[str(path)] = [stat.st_size, stat.st_mtime_ns]
                self.dirty = True
        if self.dirty:
            atomic_write_text(self.path, json.dumps({"format": FORMAT, "files": self.files, "memo": self.memo}))
            self.dirty = False

    # ---- memo ----------------------------------------------------------------------------
    def _ask(self, key: str, compute) -> Any:
        if key in self.memo:
            return _decode(self.memo[key])
        value = compute()
        self.memo[key] = _encode(value)
        self.dirty = True
        return value

    def _live(self, found: Found) -> Lookup:
        """A Found from the memo carries no parse tree; read it again when a question needs one."""
        if definition(found) is not None or found.kind == FoundKind.EXTERNAL:
            return found
        live = self.inner.lookup(found.path)
        if found.wraps is not None and isinstance(live, Found):
            wrapped = self._live(found.wraps)
            return replace(live, wraps=wrapped) if isinstance(wrapped, Found) else live
        return live

    def _with_live(self, found: Found, method, *args) -> Any:
        live = self._live(found)
        if not isinstance(live, Found):
            return live
        return method(live, *args)

    # ---- the Surface protocol ------------------------------------------------------------
    def lookup(self, path: str) -> Lookup:
        return self._ask(f"lookup|{path}", lambda: self.inner.lookup(path))

    def member(self, owner: Found, name: str) -> Lookup:
        return self._ask(f"member|{_owner_key(owner)}|{name}",
                         lambda: self._with_live(owner, self.inner.member, name))

    def signature(self, obj: Found) -> Signature | Unresolved:
        return self._ask(f"signature|{_owner_key(obj)}", lambda: self._with_live(obj, self.inner.signature))

    def result_type(self, obj: Found, through: Found | None = None) -> Lookup:
        def compute() -> Lookup:
            live_through = self._live(through) if through is not None else None
            return self._with_live(obj, self.inner.result_type,
                                   live_through if isinstance(live_through, Found) else None)

        via = f"|{_owner_key(through)}" if through is not None else ""
        return self._ask(f"result|{_owner_key(obj)}{via}", compute)

    def attribute_type(self, owner: Found, name: str) -> Lookup:
        return self._ask(f"attrtype|{_owner_key(owner)}|{name}",
                         lambda: self._with_live(owner, self.inner.attribute_type, name))

    def member_names(self, owner: Found) -> tuple[str, ...]:
        def compute() -> tuple[str, ...]:
            live = self._live(owner)
            return self.inner.member_names(live) if isinstance(live, Found) else ()

        return self._ask(f"names|{_owner_key(owner)}", compute)

    def fact(self, fact: Fact[T], *inputs: Any) -> T:
        key = f"fact|{fact.key(inputs)}"
        if not fact.kept:
            return self.inner.fact(fact, *inputs)  # memoised in this process only
        if key not in self.facts:
            if key in self.memo:
                self.facts[key] = decode(fact.result, self.memo[key]["value"])
            else:
                self.facts[key] = self.inner.fact(fact, *inputs)
                self.memo[key] = {"t": "fact", "value": encode(self.facts[key])}
                self.dirty = True
        return self.facts[key]

    def definitions(self, name: str) -> tuple[str, ...]:
        return self._ask(f"defs|{name}", lambda: self.inner.definitions(name))

