"""Rules on each sample against the rest of its dataset (``compat.gate.consistency``): rows the samples that start
with the same tokens must share, and the scale of each layer."""

from __future__ import annotations

from collections.abc import Sequence

from compat.findings import Status
from compat.gate.consistency import LOOSEST, MARGIN, SCALE_DEVIATIONS, SCALE_FACTOR, PrefixDeviation, Standing
from compat.gate.rules.rule import Context, Phase, Rule, RuleFinding
from compat.gate.rules.values import slot_names


def _consistency(s: Standing, ctx: Context) -> Sequence[RuleFinding]:
    """One finding per sample, with every comparison that sets it apart."""
    names = slot_names(s.values.view, ctx.expected)
    parts: list[str] = []
    expected, found = [], []
    decided = False
    p = s.prefix
    if p is not None and p.off:
        shared = "its first token" if p.position == 0 else f"its first {p.position + 1} tokens"
        others = p.members - 1
        where = (f"{names[p.slot]}, row {p.position} (token {p.tokens[-1]}): {p.distance:.3g} relative distance from "
                 f"the median row of the {others} other sample{'s' if others != 1 else ''} that share {shared} "
                 f"{list(p.tokens)}")
        if p.decided and ctx.expected.model_type is None and p.like_batch_rounding:
            parts.append(f"{where}; they are {p.typical:.2g} from it typically (bound {p.bound:.3g}), but it agrees "
                         f"with them at {p.agreeing} of its shared rows at every layer and is within {LOOSEST:g}: what "
                         "kernels that round by batch make of an MoE/MLA model's rows (a router's near-tied experts "
                         "flip), which only the model type can tell from a fault")
            expected.append(f"row within {p.bound:.3g}")
        elif p.decided:
            decided = True
            parts.append(f"{where}; they are {p.typical:.2g} from it typically (bound {p.bound:.3g}: {MARGIN:g}x "
                         f"that, at least the dtype's {p.floor:.3g}). A model gives the same tokens at the same "
                         "positions the same state")
            expected.append(f"row within {p.bound:.3g}")
        else:
            parts.append(f"{where}: the two are {2 * p.distance:.3g} apart, more than the dtype's {p.floor:.3g}, and "
                         "which one is wrong cannot be told from two")
            expected.append(f"row within {p.floor:.3g}")
        found.append(f"{p.distance:.3g}")
    c = s.scale
    if c is not None and c.off:
        decided = True
        parts.append(f"{names[c.slot]}: median per-token RMS is {c.ratio:.3g}x the dataset's median, "
                     f"{c.deviations:.3g} deviations away (the {c.samples} samples spread by a factor {c.spread:.3g}, "
                     f"this one's {c.rows} tokens make its median uncertain by a factor {c.own:.3g}; off means over "
                     f"{SCALE_DEVIATIONS:g} deviations and a factor {SCALE_FACTOR:g})")
        expected.append(f"scale about 1x (spread x{c.spread:.3g})")
        found.append(f"{c.ratio:.3g}x")
    if not parts:
        return ()
    why = (": this sample was computed by other weights (a fine-tuned copy, another checkpoint), scaled, or with its "
           "rows shifted" if decided else "")
    fix = "re-extract it with the dataset's model; --reference recomputes outliers first"
    if p is not None and p.off and ctx.expected.model_type is None and p.distance <= _loosest_bound(p):
        fix += ("; pass --model: the shared rows of MoE/MLA models differ from batch to batch by more than the "
                "dtype's floor, and their model type gets a looser one")
    return [RuleFinding("; ".join(parts) + why, fix, expected="; ".join(expected), found="; ".join(found),
                        status=Status.BROKEN if decided else Status.UNKNOWN)]


def _loosest_bound(p: PrefixDeviation) -> float:
    """The bound this row would have with an MoE/MLA model type: past it, no ``--model`` changes the verdict."""
    return LOOSEST / 2 if not p.decided else max(LOOSEST, p.bound)


CONSISTENCY = Rule(
    "consistency", "--values: each sample agrees with the rest of its dataset: the same first tokens give the same "
                   "rows, and each layer's scale is within the dataset's spread",
    Phase.DATASET, _consistency)
