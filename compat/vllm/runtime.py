"""The runtime reading: import the installed vLLM and ask ``inspect``.

Signatures and the existence of names come from the live objects. What ``inspect`` cannot see
(instance attributes set in methods, annotations naming return types, where names are defined)
comes from a static reading of the installed files, so both readings share one model.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from compat.errors import CompatError
from compat.signature import Parameter, ParamKind, Signature
from compat.vllm.static import StaticSurface
from compat.vllm.surface import BuildInfo, Found, FoundKind, Lookup, Missing, ReadingMethod, Unresolved

if TYPE_CHECKING:
    from compat.facts import Fact

T = TypeVar("T")

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: ParamKind.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: ParamKind.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.VAR_POSITIONAL: ParamKind.VAR_POSITIONAL,
    inspect.Parameter.KEYWORD_ONLY: ParamKind.KEYWORD_ONLY,
    inspect.Parameter.VAR_KEYWORD: ParamKind.VAR_KEYWORD,
}


@dataclass(frozen=True, eq=False)
class RuntimeObject:
    """The live object behind a ``Found`` of the runtime reading (``raw``: the class attribute as stored, a
    ``property`` or ``staticmethod`` before the descriptor protocol unwraps it)."""

    value: Any
    raw: Any = None


def live(found: Found) -> RuntimeObject | None:
    return found.handle if isinstance(found.handle, RuntimeObject) else None


class VllmImportError(CompatError):
    """Importing the installed vLLM failed; carries the full traceback."""

    def __init__(self, message: str, trace: str) -> None:
        super().__init__(message)
        self.trace = trace


def installed_root(package: str = "vllm") -> Path | None:
    """The directory holding the installed package (found without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


def to_signature(sig: inspect.Signature) -> Signature:
    params = []
    for p in sig.parameters.values():
        has_default = p.default is not inspect.Parameter.empty
        annotation = None
        if p.annotation is not inspect.Parameter.empty:
            annotation = p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation)
        params.append(Parameter(p.name, _KINDS[p.kind], has_default, repr(p.default) if has_default else None,
                                annotation))
    returns = None
    if sig.return_annotation is not inspect.Signature.empty:
        returns = sig.return_annotation if isinstance(sig.return_annotation, str) else inspect.formatannotation(
            sig.return_annotation)
    return Signature(tuple(params), returns)


class RuntimeSurface:
    """The installed vLLM, imported."""

    def __init__(self, package: str = "vllm") -> None:
        self.package = package
        # The report may go to standard output (--format json); vLLM logs there unless told otherwise, and
        # older builds log while their modules are imported.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        # vLLM's import-time warnings ("Triton is installed, but doesn't include CPU backend") are about the
        # machine, not the audit: unless the user sets VLLM_LOGGING_LEVEL, the audit's process logs vLLM's errors
        # only (builds that configure their logger at import read the variable; newer ones configure it later,
        # so their "vllm" logger's level is set here too). A failed import is a finding with its traceback. The
        # variable is taken back after the import, so that the confirmation's engines log as they would.
        asked = "VLLM_LOGGING_LEVEL" in os.environ
        if not asked:
            os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
            logging.getLogger(package).setLevel(logging.ERROR)
        try:
            top = importlib.import_module(package)
        except BaseException as exc:  # noqa: BLE001 - any failure to import is the finding
            trace = traceback.format_exc()
            raise VllmImportError(f"import {package} failed: {type(exc).__name__}: {exc}", trace) from exc
        finally:
            if not asked:
                os.environ.pop("VLLM_LOGGING_LEVEL", None)
        root = Path(top.__file__).resolve().parent.parent  # type: ignore[arg-type]
        version = getattr(top, "__version__", None)
        self.build = BuildInfo(package, version, f"installed {package} {version} at {root / package}",
                               ReadingMethod.RUNTIME, str(root))
        self.static = StaticSurface(root, BuildInfo(package, version, self.build.origin, ReadingMethod.STATIC,
                                                    str(root)), package)

    # ---- names ---------------------------------------------------------------------------
    def lookup(self, path: str) -> Lookup:
        parts = path.split(".")
        if parts[0] != self.package:
            return Found(path, FoundKind.EXTERNAL)
        try:
            current: Any = importlib.import_module(parts[0])
        except BaseException as exc:  # noqa: BLE001
            return Unresolved(f"import {parts[0]} failed: {type(exc).__name__}: {exc}", traceback.format_exc())
        found: Lookup = self._found(current, parts[0])
        for name in parts[1:]:
            if not isinstance(found, Found):
                return found
            found = self.member(found, name)
        return found

    def _attribute(self, current: Any, current_path: str, name: str) -> tuple[Any] | Missing | Unresolved:
        if isinstance(current, ModuleType):
            sub = f"{current.__name__}.{name}"
            is_package = hasattr(current, "__path__")
            spec = None
            if is_package:
                try:
                    spec = importlib.util.find_spec(sub)
                except (ImportError, ValueError):
                    spec = None
            if spec is not None:
                try:
                    return (importlib.import_module(sub),)
                except BaseException as exc:  # noqa: BLE001
                    return Unresolved(f"import {sub} failed: {type(exc).__name__}: {exc}", traceback.format_exc())
        try:
            return (getattr(current, name),)
        except AttributeError:
            if isinstance(current, ModuleType):
                return Missing(f"module {current_path} has no name '{name}'")
            return Missing(f"{current_path} has no attribute '{name}'")
        except BaseException as exc:  # noqa: BLE001
            return Unresolved(f"reading {current_path}.{name} raised {type(exc).__name__}: {exc}",
                              traceback.format_exc())

    def _found(self, obj: Any, path: str, kind: FoundKind | None = None) -> Found:
        if kind is None:
            if inspect.ismodule(obj):
                kind = FoundKind.MODULE
            elif inspect.isclass(obj):
                kind = FoundKind.CLASS
            elif callable(obj):
                kind = FoundKind.FUNCTION
            else:
                kind = FoundKind.ATTRIBUTE
        canonical = path
        if kind in (FoundKind.CLASS, FoundKind.FUNCTION) and getattr(obj, "__module__", None) and \
                getattr(obj, "__qualname__", None):
            canonical = f"{obj.__module__}.{obj.__qualname__}"
        elif kind == FoundKind.MODULE:
            canonical = obj.__name__
        location = None
        if canonical.startswith(self.package):
            static = self.static.lookup(canonical)
            location = static.location if isinstance(static, Found) else None
        return Found(canonical, kind, location, handle=RuntimeObject(obj))

    def member(self, owner: Found, name: str) -> Lookup:
        if owner.kind == FoundKind.EXTERNAL:
            return Found(f"{owner.path}.{name}", FoundKind.EXTERNAL)
        handle = live(owner)
        if handle is None:
            return self.static.member(owner, name)
        obj = handle.value
        if owner.kind == FoundKind.MODULE:
            result = self._attribute(obj, owner.path, name)
            return self._found(result[0], f"{owner.path}.{name}") if isinstance(result, tuple) else result
        if owner.kind == FoundKind.CLASS:
            try:
                raw = inspect.getattr_static(obj, name)
            except AttributeError:
                static_owner = self.static.lookup(owner.path)
                if isinstance(static_owner, Found):
                    return self.static.member(static_owner, name)
                return Missing(f"{owner.path} has no attribute '{name}'")
            kind = FoundKind.ATTRIBUTE
            if isinstance(raw, staticmethod):
                kind = FoundKind.STATICMETHOD
            elif isinstance(raw, classmethod):
                kind = FoundKind.CLASSMETHOD
            elif isinstance(raw, property) or type(raw).__name__ == "cached_property":
                kind = FoundKind.PROPERTY
            elif inspect.isfunction(raw):
                kind = FoundKind.METHOD
            elif inspect.isclass(raw):
                kind = FoundKind.CLASS
            value = getattr(obj, name, raw)
            found = self._found(value, f"{owner.path}.{name}", kind)
            static_owner = self.static.lookup(owner.path)
            location = None
            if isinstance(static_owner, Found):
                static_member = self.static.member(static_owner, name)
                location = static_member.location if isinstance(static_member, Found) else None
            return Found(f"{owner.path}.{name}", kind, location or found.location, handle=RuntimeObject(value, raw))
        return self.static.member(owner, name)

    # ---- signatures and types -------------------------------------------------------------
    def signature(self, obj: Found) -> Signature | Unresolved:
        handle = live(obj)
        if handle is None:
            return self.static.signature(obj)
        value = handle.value
        if obj.kind == FoundKind.PROPERTY:
            raw = handle.raw if handle.raw is not None else value
            value = getattr(raw, "fget", None) or getattr(raw, "func", None)
        try:
            sig = to_signature(inspect.signature(value))
        except (TypeError, ValueError) as exc:
            return Unresolved(f"inspect.signature({obj.path}) failed: {type(exc).__name__}: {exc}")
        if obj.kind in (FoundKind.METHOD, FoundKind.PROPERTY):
            sig = sig.drop_first()
        return sig

    def _static_twin(self, obj: Found) -> Lookup:
        twin = self.static.lookup(obj.path)
        return replace(twin, wraps=obj.wraps) if isinstance(twin, Found) and obj.wraps is not None else twin

    def result_type(self, obj: Found, through: Found | None = None) -> Lookup:
        twin = self._static_twin(obj)
        static_through = self._static_twin(through) if through is not None else None
        return self.static.result_type(twin, static_through if isinstance(static_through, Found) else None) \
            if isinstance(twin, Found) else twin

    def attribute_type(self, owner: Found, name: str) -> Lookup:
        twin = self._static_twin(owner)
        return self.static.attribute_type(twin, name) if isinstance(twin, Found) else twin

    def member_names(self, owner: Found) -> tuple[str, ...]:
        twin = self._static_twin(owner)
        names = set(self.static.member_names(twin)) if isinstance(twin, Found) else set()
        handle = live(owner)
        if handle is not None:
            names.update(dir(handle.value))
        return tuple(sorted(names))

    def definitions(self, name: str) -> tuple[str, ...]:
        return self.static.definitions(name)

    def fact(self, fact: Fact[T], *inputs: Any) -> T:
        """Facts are read from the installed files' code (``observed`` runs the installed build itself)."""
        return self.static.fact(fact, *inputs)

    def save(self) -> None:
        """The runtime reading keeps nothing between audits: the installed build may change."""
