"""Fixes: turn an audit's findings into a shim module and source edits of the consumer (``python -m compat.fix``).

``plan`` holds what a fixer contributes (shim pieces, edits, claims on findings); ``context`` is what a fixer
sees (the consumer's scan and the findings and facts of every audited build); ``edits`` are the LibCST
changes; ``shim`` assembles the shim module; ``pipeline`` runs the fixers, writes or shows the result and
re-audits it; ``cli`` is the command line. The fixers themselves live in the top-level ``fixers/`` package.
"""
