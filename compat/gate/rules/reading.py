"""Rules on reading itself: the file opens (``readable``) and follows a known layout (``layout``)."""

from __future__ import annotations

from collections.abc import Sequence

from compat.gate.datasets import LayoutOutlier
from compat.gate.read.layouts import Layout
from compat.gate.read.views import EntryFault, FailureKind, ReadFailure
from compat.gate.rules.rule import Context, Phase, ReadSubject, Rule, RuleFinding, ValueSubject

_REREAD = "re-extract this sample; the file is damaged or was never completely written"


def _unreadable_file(subject: ReadSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(subject, ReadFailure) or subject.kind is not FailureKind.UNREADABLE:
        return ()
    return [RuleFinding(f"{subject.message} [{subject.error_type}]", subject.fix or _REREAD, found=subject.error_type,
                        traceback=subject.traceback)]


def _unreadable_values(subject: ValueSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if not isinstance(subject, ReadFailure):
        return ()
    return [RuleFinding(f"reading tensor values failed: {subject.error_type}: {subject.message}",
                        subject.fix or _REREAD,
                        found=subject.error_type, traceback=subject.traceback)]


READABLE = Rule(
    "readable", "the file opens and parses: a safetensors header consistent with the file's size, or "
                "torch.load(weights_only=True) succeeding",
    Phase.READ, _unreadable_file, structural=True, also={Phase.VALUES: _unreadable_values})


def layout_fault(fault: EntryFault) -> bool:
    """A fault of any entry but the loss mask (whose faults the loss_mask rule reports) is a layout finding."""
    return fault.entry != "loss_mask"


def _layout(subject: ReadSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if isinstance(subject, ReadFailure):
        if subject.kind is not FailureKind.LAYOUT_MISMATCH:
            return ()
        return [RuleFinding(f"{subject.message} [{subject.error_type}]",
                            "pass the right --layout, or re-extract with a supported writer",
                            found=subject.error_type, traceback=subject.traceback)]
    if isinstance(subject, LayoutOutlier):
        return [_outlier(subject)]
    if isinstance(subject, EntryFault) and layout_fault(subject):
        return [RuleFinding(subject.message, subject.fix)]
    return ()


def _keys(layout: Layout) -> set[str]:
    return {layout.ids_key, layout.layers_key}


def _outlier(o: LayoutOutlier) -> RuleFinding:
    missing = sorted(_keys(o.layout) - _keys(o.view.layout))
    trips = f"; a {o.layout.value} loader finds no {', '.join(map(repr, missing))} in it" if missing else ""
    return RuleFinding(
        f"this sample follows {o.view.layout.value}, but its dataset is {o.layout.value} ({o.count} of the "
        f"{o.total} samples in its directory){trips}",
        "re-extract it with the dataset's writer, or move it to a directory of its own",
        expected=o.layout.value, found=o.view.layout.value)


LAYOUT = Rule(
    "layout", "the file follows a known layout (or the one --layout names): its keys and their types; and the "
              "layout of most samples in its directory (two datasets need two directories)",
    Phase.READ, _layout, structural=True)
