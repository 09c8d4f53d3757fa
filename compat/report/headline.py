"""A finding's message and fix in brief, for the compact terminal view: read from the text the probes wrote,
by its grammar alone (clauses, asides, qualified names), never by what a particular message says.

The probes write one shape of message: a first clause that says what is wrong, then ``; `` or ``: `` and the
evidence, with places and asides in parentheses::

    the replacement forward calls self.get_input_embeddings, which
    vllm.model_executor.models.deepseek_v2.DeepseekV2Model (DeepseekV2ForCausalLM) does not have; it has embed_input_ids

reads ``the replacement forward calls self.get_input_embeddings, which DeepseekV2Model does not have``. What a
width cuts ends with ``…``; the detailed view (``--details``) and the other formats keep every word."""

from __future__ import annotations

import re

ELLIPSIS = "…"

_WORD = 8
"""A cut ends after a word where that leaves out at most this many more characters, else within the word."""
_QUOTES = '"`'
_OPEN, _CLOSE = "([{", ")]}"
_MODULE_PATH = re.compile(r"(?<![\w./'\"`<>-])(?:[a-z_][a-z0-9_]*\.){2,}(?=[A-Z])")
"""A dotted module path before a class name (``vllm.model_executor.models.llama.`` before ``LlamaModel``); not
inside a path, a quoted string or an attribute chain (``model.language_model.model`` names no class)."""


def headline(message: str) -> str:
    """What is wrong, in the message's own words: its first clause (up to a top-level ``; `` or ``: ``),
    without the asides in parentheses, class names without their module path."""
    return first_clause(short_names(without_asides(" ".join(message.split()))), ("; ", ": "))[0].strip()


def fix_in_brief(fix: str) -> list[str]:
    """The fix as it may be shown, longest first: whole (without asides, class names without their module
    path), then its first clause ending with ``…`` where the rest is left out."""
    whole = short_names(without_asides(" ".join(fix.split())))
    head, rest = first_clause(whole, ("; ", ": ", ", "))
    return [whole] if not rest else [whole, head.rstrip() + ELLIPSIS]


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: whole, or cut (after a word where that keeps most of it) and
    ended with ``…``."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    room = text[:width - 1]
    space = room.rfind(" ")
    if space >= len(room) - _WORD:
        room = room[:space]
    return room.rstrip(" ,;:") + ELLIPSIS


def short_names(text: str) -> str:
    """Class names without their module path: ``vllm.config.scheduler.SchedulerConfig`` reads ``SchedulerConfig``."""
    return _MODULE_PATH.sub("", text)


def without_asides(text: str) -> str:
    """``text`` without the groups in parentheses that follow a space (``(vllm/config/cache.py:69)``, ``(the
    callable no longer takes it)``); a call's parentheses (``Scheduler()``, ``collective_rpc(..., rank=...)``)
    and what is quoted stay."""
    out: list[str] = []
    i, quote = 0, ""
    while i < len(text):
        char = text[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
            quote = char
        elif char == "(" and i and text[i - 1] == " ":
            end = _closing(text, i)
            if end is not None:
                while out and out[-1] == " ":
                    out.pop()
                i = end + 1
                continue
        out.append(char)
        i += 1
    return "".join(out)


def first_clause(text: str, separators: tuple[str, ...]) -> tuple[str, str]:
    """``text`` split at its first separator outside brackets and quotes: (the first clause, the rest after
    the separator); the rest is empty where there is no such separator."""
    depth, quote = 0, ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth = max(0, depth - 1)
        elif depth == 0:
            for separator in separators:
                if text.startswith(separator, i):
                    return text[:i], text[i + len(separator):]
    return text, ""


def _closing(text: str, start: int) -> int | None:
    """Where the parenthesis opened at ``start`` closes (brackets and quotes inside it nest), or None."""
    depth, quote = 0, ""
    for i in range(start, len(text)):
        char = text[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
            if depth == 0:
                return i if char == ")" else None
    return None
