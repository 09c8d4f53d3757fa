"""The shim module: a header that checks the vLLM it meets against the builds it was generated for, the
helpers every piece may use, and the fixers' pieces, each with why it is there."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from packaging.version import Version

from compat import __version__
from compat.errors import CompatError
from compat.fix.context import AuditedBuild, FixContext, span
from compat.fix.plan import FixerPlan, ShimPiece
from compat.vllm.surface import Found, relocated

HELPERS = '''
def _parameters(obj):
    """The parameters ``obj`` accepts, as the running build defines them (cached)."""
    key = id(obj)
    if key not in _PARAMETERS:
        _PARAMETERS[key] = inspect.signature(obj).parameters
    return _PARAMETERS[key]


_PARAMETERS = {}


def _required(obj, name):
    """Whether the running build's ``obj`` requires ``name`` (a parameter without a default)."""
    param = _parameters(obj).get(name)
    return param is not None and param.default is inspect.Parameter.empty and param.kind not in (
        inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _passed(obj, args, kwargs):
    """What a call of ``obj`` with ``args`` and ``kwargs`` passes, by parameter name."""
    try:
        return dict(inspect.signature(obj).bind_partial(*args, **kwargs).arguments)
    except TypeError:
        return dict(kwargs)


def _lookup(path):
    """The object at dotted ``path`` in the running build, or None when it has none there."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
'''


def raw_name(name: str) -> str:
    return f"_vllm_{name}"


def homes(builds: Sequence[AuditedBuild], symbol: str) -> list[tuple[str, list[str]]]:
    """Where each build defines the name at ``symbol`` (its module), newest home first, with the builds."""
    by_module: dict[str, list[str]] = {}
    name = symbol.rpartition(".")[2]
    for build in builds:
        if isinstance(build.surface.lookup(symbol), Found):
            module = symbol.rpartition(".")[0]
        else:
            moved = relocated(build.surface, symbol)
            if not moved:
                raise CompatError(f"{name} is not defined anywhere in vLLM {build.version}")
            module = moved[0].rpartition(".")[0]
        by_module.setdefault(module, []).append(build.version)
    return sorted(by_module.items(), key=lambda item: max(Version(v) for v in item[1]), reverse=True)


def raw_import(ctx: FixContext, symbol: str) -> ShimPiece:
    """``_vllm_<name>``: the build's object at ``symbol``, imported from wherever the running build has it
    (an ``except ImportError`` chain over the modules the audited builds define it in, newest first)."""
    name = symbol.rpartition(".")[2]
    found = homes(ctx.builds, symbol)
    lines: list[str] = []
    for depth, (module, versions) in enumerate(found):
        indent = "    " * depth
        where = span([b for b in ctx.builds if b.version in versions])
        statement = f"from {module} import {name} as {raw_name(name)}  # {where}"
        if depth < len(found) - 1:
            lines += [f"{indent}try:", f"{indent}    {statement}", f"{indent}except ImportError:"]
        else:
            lines.append(f"{indent}{statement}")
    why = f"{symbol} lives in {', '.join(m for m, _ in found)} across the audited builds"
    return ShimPiece(f"raw:{name}", "\n".join(lines), why)


def export(name: str) -> ShimPiece:
    """``name`` itself, for a consumer that imports it from the shim unchanged."""
    return ShimPiece(f"export:{name}", f"{name} = {raw_name(name)}", f"{name} as the running build has it",
                     weight=0)


def adjustment_name(name: str, fixer: str) -> str:
    return f"_adjust_{name}_{fixer}"


def _wrappers(plans: Sequence[FixerPlan]) -> list[ShimPiece]:
    """``def name(*args, **kwargs)`` for each wrapped callable, applying its adjustments in fixer order."""
    adjusted: dict[str, list[tuple[str, ShimPiece]]] = {}
    for plan in plans:
        for piece in plan.pieces:
            if piece.wraps:
                adjusted.setdefault(piece.wraps, []).append((plan.fixer, piece))
    out = []
    for name, pieces in adjusted.items():
        context = tuple(dict.fromkeys(c for _, p in pieces for c in p.context))
        lines = [f"def {name}(*args, **kwargs):",
                 f'    """The build\'s {name}, adjusted by: {", ".join(f for f, _ in pieces)} (see above)."""',
                 f"    target = {raw_name(name)}", "    params = _parameters(target)",
                 f"    context = {{n: kwargs.pop(n) for n in {context!r} if n in kwargs and n not in params}}"]
        lines += [f"    args, kwargs = {adjustment_name(name, fixer)}(target, params, args, kwargs, context)"
                  for fixer, _ in pieces]
        lines.append("    return target(*args, **kwargs)")
        out.append(ShimPiece(f"export:{name}", "\n".join(lines), f"{name} as the running vLLM takes it", weight=2))
    return out


def _merge(plans: Sequence[FixerPlan]) -> list[ShimPiece]:
    chosen: dict[str, ShimPiece] = {}
    for plan in plans:
        for piece in plan.pieces:
            old = chosen.get(piece.key)
            if old is None or piece.weight > old.weight:
                chosen[piece.key] = piece
            elif piece.weight == old.weight and piece.code != old.code:
                raise CompatError(f"two fixers disagree on the shim's {piece.key}")
    for piece in _wrappers(plans):
        chosen[piece.key] = piece
    order = {"raw": 0, "helper": 1}
    return sorted(chosen.values(), key=lambda p: order.get(p.key.split(":")[0], 2))


def assemble(ctx: FixContext, plans: Sequence[FixerPlan]) -> str:
    """The shim module's source."""
    pieces = _merge(plans)
    versions = [b.version for b in ctx.builds]
    imports = sorted({"import importlib", "import inspect", "import os", "import warnings"}
                     | {line for p in pieces for line in p.imports})
    notes = [f"- {plan.fixer}: {note}" for plan in plans for note in plan.notes]
    consumer = f"{ctx.scan.name} {ctx.scan.version or ''}".strip()
    head = f'''"""vLLM compatibility shim for {consumer}, generated by compat {__version__}.

Generated for {span(ctx.builds)}: {", ".join(versions)}. It adapts to the vLLM it meets by feature detection
(signatures, attributes, module locations); at import it checks that this vLLM is within what it was
generated for. Regenerate with ``python -m compat.fix`` rather than editing it.

{chr(10).join(notes)}
"""

{chr(10).join(imports)}

import vllm
from packaging.version import Version

GENERATED_FOR = ({", ".join(repr(v) for v in versions)},)
OUT_OF_RANGE_ENV = "VLLM_COMPAT_ALLOW_OUT_OF_RANGE"


def _check_range():
    """Refuse a vLLM outside the audited range (set {{OUT_OF_RANGE_ENV}}=1 to only warn)."""
    try:
        running = Version(vllm.__version__).release
    except Exception as exc:  # noqa: BLE001 - an unreadable version is out of range too
        running, reason = None, f"its version {{getattr(vllm, '__version__', None)!r}} cannot be read ({{exc}})"
    else:
        reason = f"vLLM {{vllm.__version__}} is outside the audited builds {{GENERATED_FOR[0]}}..{{GENERATED_FOR[-1]}}"
    known = {{Version(v).release for v in GENERATED_FOR}}
    lowest, highest = min(known), max(known)
    if running is not None and lowest <= running <= highest:
        return
    message = (f"{{__name__}}: {{reason}}; this shim was generated for {{', '.join(GENERATED_FOR)}}. "
               "Run `python -m compat.fix` against this vLLM before trusting its output.")
    if os.environ.get(OUT_OF_RANGE_ENV):
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    else:
        raise RuntimeError(message + f" (set {{OUT_OF_RANGE_ENV}}=1 to run anyway)")


_check_range()
'''
    body = [textwrap.dedent(HELPERS).strip()]
    for piece in pieces:
        body.append(f"# {piece.why}\n{piece.code.strip()}")
    return head + "\n\n" + "\n\n\n".join(body) + "\n"
