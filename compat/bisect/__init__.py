"""``python -m compat.bisect``: see ``compat.matrix.bisect``."""
