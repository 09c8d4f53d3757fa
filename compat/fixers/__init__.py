"""``compat.fixers`` in a source checkout: the repository's ``fixers/`` package under this name (``compat.checkout``
says why a checkout needs this stand-in; the wheel maps ``fixers/`` here and does not hold it)."""

from compat.checkout import load

load(__name__)
