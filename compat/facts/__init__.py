"""Facts about what a vLLM build's code does, for the semantic probes.

A fact module (``replies``, ``protocol``, ``hashing``, ``models``, ``startup``) reads one concern from a
static reading of the build and returns a frozen dataclass, so that probes never walk ASTs; ``observed`` is
what a real engine of the installed build does. Each module declares its ``FACT``: a name and the function
that reads it. ``surface.fact(FACT, *inputs)`` answers once per build and inputs; the persistent memo stores
the answer under a key made from the name and the inputs (``Fact.key``), so a warm audit reads nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """A named reading: ``read(static_surface, *inputs)`` returns a frozen dataclass (its annotated type)."""

    name: str
    read: Callable[..., T]
    kept: bool = True
    """Whether the persistent memo keeps the answer; False for what the machine, not the build's code, decides
    (``observed``: what real engines did), which every audit that asks observes again."""

    def key(self, inputs: tuple[Any, ...]) -> str:
        """The memo key: the fact's name and its inputs, so that one key is one computation."""
        return "|".join([self.name, *(str(i) for i in inputs)])

    @property
    def result(self) -> type[T]:
        """The dataclass ``read`` returns (its return annotation), which the memo decodes answers into."""
        annotation = self.read.__annotations__["return"]
        return eval(annotation, self.read.__globals__) if isinstance(annotation, str) else annotation  # noqa: S307
