"""``python -m compat.gate PATH...``: check hidden-state files (shapes, dtypes, counts; values; a reference).

Exit codes: 0 nothing failing, 1 a rule failed, 2 the gate could not run (missing path, unreadable model
config, unknown layout or rule...). The gate never modifies, moves or deletes the files it checks.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from compat.cli import JsonErrors, emit, guarded
from compat.errors import CompatError
from compat.gate.options import GateOptions
from compat.gate.raytasks import address
from compat.gate.read.layouts import Layout
from compat.gate.read.source import is_url, parse_option
from compat.gate.recompute import NUMBERINGS
from compat.gate.result import SCHEMA
from compat.gate.rules import RULES
from compat.gate.rules.values import NONFINITE_POLICIES
from compat.gate.runner import run_gate
from compat.report import Format, View


class _Parser(argparse.ArgumentParser):
    """argparse's errors become one line and exit code 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise CompatError(message)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from exc


def _path_or_url(text: str) -> Path | str:
    return text if is_url(text) else Path(text)


def _ray_address(text: str) -> str:
    try:
        return address(text)
    except CompatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m compat.gate", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", type=_path_or_url,
                   help="files or directories of hidden-state files, local or as URLs (s3://bucket/prefix, gs://, "
                        "file://, memory://: any fsspec protocol)")
    p.add_argument("--storage-option", action="append", default=[], type=parse_option, metavar="KEY=VALUE",
                   help="an option of the URLs' filesystem (repeatable), e.g. endpoint_url=http://127.0.0.1:9000; "
                        "a value that reads as JSON is taken as such (anon=true)")
    p.add_argument("--layout", help=f"force a layout: {', '.join(x.value for x in Layout)} (default: detect)")
    p.add_argument("--model", type=Path, help="model directory or config.json: hidden size, dtype, vocabulary")
    p.add_argument("--hidden-size", type=int, help="expected hidden size (overrides --model)")
    p.add_argument("--dtype", help="expected dtype of the layers (overrides the model config's)")
    p.add_argument("--layers", type=int, help="expected number of layers per sample")
    p.add_argument("--layer-ids", type=_int_list, help="the layer ids extracted, e.g. 2,16,29,31")
    p.add_argument("--override-data-config", action="store_true",
                   help="--hidden-size, --layers and --layer-ids win over a data_config.json beside the files that "
                        "says otherwise (reported as allowed); without it the file wins and the contradiction fails")
    p.add_argument("--follow-links", action="store_true",
                   help="read the files and directories that links lead to outside the paths given (without it "
                        "such a link is a finding, unread); a link into /proc, /sys or /dev is never read")
    p.add_argument("--values", action="store_true",
                   help="read tensor values too: finite, no all-zero layer or row, no duplicate layer or row, "
                        "plausible order, and each sample against the rest of its dataset")
    p.add_argument("--nonfinite", default="fail",
                   help=f"NaN/Inf policy with --values: {', '.join(NONFINITE_POLICIES)} (default fail)")
    p.add_argument("--reference", type=Path, metavar="MODEL_DIR",
                   help="recompute a few samples with HF transformers on these weights and compare (the dataset "
                        "comparison's outliers first, then at random); reads every value, as --values does")
    p.add_argument("--reference-samples", type=int, default=4, help="samples to recompute (default 4)")
    p.add_argument("--reference-device", default="cpu", help="where the float32 reference runs: cpu (default), "
                                                             "cuda, or auto (CUDA when torch sees a device)")
    p.add_argument("--layer-numbering", default="auto",
                   help="what layer id k means: output (of decoder layer k; speculators), input (state entering "
                        "layer k; vLLM, EAGLE-3), auto (by layout; default)")
    p.add_argument("--max-rel", type=float, help="reference: largest relative L2 error accepted (default by dtype)")
    p.add_argument("--min-cos", type=float, help="reference: smallest per-token cosine accepted (default by dtype)")
    p.add_argument("--ignore", action="append", default=[], metavar="RULE", help="skip a rule (repeatable)")
    p.add_argument("--strict", action="store_true", help="count unknown findings as failures")
    p.add_argument("--format", default=Format.TERMINAL.value, help=f"{', '.join(f.value for f in Format)}")
    p.add_argument("--output", type=Path, help="write the report to this file instead of standard output")
    p.add_argument("--show-ok", action="store_true", help="list files that passed too")
    p.add_argument("--color", default="auto", help="auto, always, never")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="processes that read the files (default: the machine's cores, here %(default)s); 1 reads "
                        "them in this process. A run too small to repay starting them reads in this process")
    p.add_argument("--ray", nargs="?", const="", type=_ray_address, metavar="ADDRESS",
                   help="read the files as tasks on a Ray cluster (pip install 'vllm-compat[ray]'): auto, host:port, "
                        "ray://host:port; alone (after the paths), RAY_ADDRESS or else a local cluster. --jobs does "
                        "not apply")
    p.add_argument("--state", type=Path, metavar="FILE",
                   help="record each checked file in FILE (JSON lines); a rerun takes the results of files unchanged "
                        "since (same size and modification time; by URL, size and ETag) from it and reads only the "
                        "rest")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it is drawn only on a terminal)")
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    p.add_argument("--debug", action="store_true", help="show full tracebacks for internal errors")
    return p


def _choice(value: str, allowed: Sequence[str], flag: str) -> str:
    if value not in allowed:
        raise CompatError(f"{flag} {value!r}: choose one of {', '.join(allowed)}")
    return value


def options_from(args: argparse.Namespace) -> GateOptions:
    if not args.paths:
        raise CompatError("no PATH given: name hidden-state files or directories to check")
    layout = Layout(_choice(args.layout, [x.value for x in Layout], "--layout")) if args.layout else None
    for name, value in (("--hidden-size", args.hidden_size), ("--layers", args.layers)):
        if value is not None and value <= 0:
            raise CompatError(f"{name} {value}: must be positive")
    if args.jobs <= 0:
        raise CompatError(f"--jobs {args.jobs}: must be positive")
    if args.reference is not None and not (args.reference / "config.json").is_file():
        raise CompatError(f"--reference {args.reference}: not a model directory (no config.json)")
    return GateOptions(
        paths=tuple(args.paths), layout=layout, model=args.model, hidden_size=args.hidden_size, dtype=args.dtype,
        layers=args.layers, layer_ids=args.layer_ids, override_data_config=args.override_data_config,
        values=args.values, follow_links=args.follow_links,
        nonfinite=_choice(args.nonfinite, NONFINITE_POLICIES, "--nonfinite"), reference=args.reference,
        reference_samples=args.reference_samples,
        reference_device=_choice(args.reference_device, ("cpu", "cuda", "auto"), "--reference-device"),
        layer_numbering=_choice(args.layer_numbering, NUMBERINGS, "--layer-numbering"), max_rel=args.max_rel,
        min_cos=args.min_cos, ignore=frozenset(args.ignore), strict=args.strict,
        storage_options=tuple(args.storage_option), jobs=args.jobs, state=args.state, ray=args.ray)


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    return guarded("compat.gate", "--debug" in given, lambda: _gate(argv), JsonErrors.wanted(SCHEMA, given))


def _gate(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.list_rules:
        for rule in RULES.values():
            print(f"{rule.name:16} {rule.description}")
        return 0
    fmt = Format(_choice(args.format, [f.value for f in Format], "--format"))
    _choice(args.color, ["auto", "always", "never"], "--color")
    options = options_from(args)
    from compat.progress import ProgressBar

    result = run_gate(options, ProgressBar.for_terminal(not args.no_progress))
    # the gate's findings keep the detailed terminal view (one per file and rule, each message read in full)
    emit(result, fmt, args.color, args.output, args.show_ok, View(details=True))
    return result.exit_code


def run() -> None:
    sys.exit(main())
