"""compat: audit code that drives vLLM's internal APIs against any vLLM build."""

__version__ = "0.1.0"
