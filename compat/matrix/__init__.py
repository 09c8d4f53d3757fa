"""The version matrix: one consumer against many vLLM builds (``python -m compat.matrix``), and bisection of the
first bad build (``python -m compat.bisect``)."""
