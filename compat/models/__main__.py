"""``python -m compat.models build ARCH DIR``: build a tiny model (random weights, local tokenizer).

Exit codes: 0 built, 2 bad input (unknown architecture or dtype, occupied directory) or a failed build.
"""

from __future__ import annotations

import argparse

from compat.cli import guarded
from compat.models import ARCHITECTURES, DTYPES, build


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m compat.models", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a tiny model directory")
    b.add_argument("arch", help=f"one of: {', '.join(ARCHITECTURES)}")
    b.add_argument("directory")
    b.add_argument("--dtype", default="float32", help=f"one of: {', '.join(DTYPES)} (default float32)")
    b.add_argument("--hidden-size", type=int, default=128)
    b.add_argument("--layers", type=int, default=4)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--max-positions", type=int, default=2048, help="the model's context (default 2048)")
    b.add_argument("--force", action="store_true", help="replace an existing directory")
    sub.add_parser("list", help="list the architectures")
    p.add_argument("--debug", action="store_true", help="show full tracebacks for internal errors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return guarded("compat.models", args.debug, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.command == "list":
        for arch in ARCHITECTURES:
            print(arch)
        return 0
    built = build(args.arch, args.directory, dtype=args.dtype, hidden_size=args.hidden_size, num_layers=args.layers,
                  seed=args.seed, force=args.force, max_positions=args.max_positions)
    print(f"{built.path}: {built.architecture} {built.spec.dtype}, hidden {built.spec.hidden_size}, "
          f"{built.spec.num_layers} layers, {built.parameters:,} parameters, tokenizer vocab {built.tokenizer_vocab}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
