"""vLLM's API surface as the probes see it, whichever way it was read.

``StaticSurface`` reads a source tree with ``ast`` (any release, wheel, sdist or git checkout);
``RuntimeSurface`` imports the installed vLLM and asks ``inspect``. Both answer the same
questions with the same objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from compat.location import Location
from compat.signature import Signature

if TYPE_CHECKING:
    from compat.facts import Fact

T = TypeVar("T")


class ReadingMethod(StrEnum):
    """How a surface read its build."""

    STATIC = "static"
    """The source read with ``ast``, never imported."""
    RUNTIME = "runtime"
    """The installed package imported and asked through ``inspect``."""


class FoundKind(StrEnum):
    """What a ``Found`` is (its values are the words the reports print)."""

    MODULE = "module"
    """A module or package."""
    CLASS = "class"
    """A class of the build."""
    FUNCTION = "function"
    """A module-level function."""
    METHOD = "method"
    """A plain method of a class (seen through an instance)."""
    CLASSMETHOD = "classmethod"
    """A method decorated ``@classmethod``."""
    STATICMETHOD = "staticmethod"
    """A method decorated ``@staticmethod``."""
    PROPERTY = "property"
    """A ``property`` or ``cached_property`` (its getter's result is the attribute)."""
    ATTRIBUTE = "attribute"
    """A value a module or a class body binds."""
    INSTANCE_ATTRIBUTE = "instance-attribute"
    """An attribute a method sets on ``self`` (or one ``__slots__`` declares)."""
    EXTERNAL = "external"
    """A name outside the build (torch, typing, a builtin): nothing of vLLM's to check."""


@dataclass(frozen=True)
class BuildInfo:
    """Which vLLM build a surface describes and how it was read."""

    name: str
    version: str | None
    origin: str
    reading: ReadingMethod
    """Static (source read with ast) or runtime (imported, inspect.signature)."""
    root: str


@dataclass(frozen=True)
class Found:
    """A vLLM object: where it is defined and what it is."""

    path: str
    kind: FoundKind
    location: Location | None = None
    handle: Any = field(default=None, compare=False, repr=False)
    """Reader-private: what the reading that made it needs to answer further questions (a static
    ``Definition``, a ``RuntimeObject``); read it only through that reading's own accessors."""
    wraps: Found | None = None
    """For an object of a class whose ``__getattr__`` forwards what the class lacks to one of its attributes
    (``compat.vllm.forwarding``): the class of the object it wraps, as the place that built it says
    (``BreakableCUDAGraphWrapper(self.model, ...)``); a member the class lacks is that class's."""


@dataclass(frozen=True)
class Missing:
    reason: str
    elsewhere: tuple[str, ...] = ()
    """Other places in the build where a definition of that name lives (it may have moved)."""


@dataclass(frozen=True)
class Unresolved:
    reason: str
    traceback: str | None = None
    """Set when reading the build crashed (an import that raised): the full traceback."""
    outside: bool = False
    """What was asked about is not vLLM's code (torch, triton, typing, a builtin container, a logger, Hugging
    Face's config): there is nothing of vLLM's to check, so it is not a touchpoint at all."""


Lookup = Found | Missing | Unresolved


class Surface(Protocol):
    build: BuildInfo

    def lookup(self, path: str) -> Lookup:
        """Resolve a dotted path (``vllm.v1.request.Request``) the way an import would."""

    def member(self, owner: Found, name: str) -> Lookup:
        """An attribute of a module or class (inherited members and instance attributes included)."""

    def signature(self, obj: Found) -> Signature | Unresolved:
        """What calling ``obj`` accepts: a class's constructor, a function, a method via an instance."""

    def result_type(self, obj: Found, through: Found | None = None) -> Lookup:
        """The class of what calling ``obj`` returns (an instance for a class); ``through`` is the class a method
        was reached through (``AsyncEngineArgs.from_cli_args`` defined on ``EngineArgs`` builds the subclass)."""

    def attribute_type(self, owner: Found, name: str) -> Lookup:
        """The class of attribute ``name`` on instances of ``owner``."""

    def member_names(self, owner: Found) -> tuple[str, ...]:
        """Every name reachable on a class (class body and instance attributes along the MRO) or a module."""

    def definitions(self, name: str) -> tuple[str, ...]:
        """Dotted paths of the top-level definitions of ``name`` anywhere in the build."""

    def fact(self, fact: Fact[T], *inputs: Any) -> T:
        """What the build's code does about one concern (see ``compat.facts``), once per fact and inputs."""

    def save(self) -> None:
        """Keep what was learnt for the next audit (a no-op for readings that keep nothing)."""


def relocated(surface: Surface, symbol: str) -> list[str]:
    """Where a name that is not at ``symbol`` in this build is defined instead (shallowest module first)."""
    name = symbol.rpartition(".")[2]
    homes = [path for path in surface.definitions(name) if path != symbol and isinstance(surface.lookup(path), Found)]
    return sorted(homes, key=lambda p: (p.count("."), p))
