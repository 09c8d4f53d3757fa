"""A worker extension the confirmation engine installs (ParallelConfig(worker_extension_cls=...))."""

from __future__ import annotations


class ConfirmExtension:
    def compat_reply_marker(self) -> list[str]:
        """A per-worker value shaped like speculators' per-layer list, to see how replies come back."""
        return ["layer-0", "layer-1", "layer-2"]
