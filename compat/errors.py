"""Errors that end a run with exit code 2: the audit itself could not run."""

from __future__ import annotations


class CompatError(Exception):
    """Bad input or an unusable environment; the message is one line for the user."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        message = " ".join(str(message).split())
        super().__init__(message or type(self).__name__)


class IndexUnreachable(CompatError):
    """The package index could not be reached."""


class UnknownVersion(CompatError):
    """No release of a package matches what was asked for."""


class BadArchive(CompatError):
    """A wheel or sdist that cannot be read."""
