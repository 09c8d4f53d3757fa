"""The consumer side: every place a consumer's source touches vLLM, found with ``ast`` (never imported).

``scan.scan_tree`` is the entry point; ``model`` holds what it produces (touchpoints and the rest of a
``Scan``); ``visitor`` walks one module; ``values`` and ``conditions`` are what the walk knows about
expressions and version guards; ``guards`` evaluates those guards against a build; ``patches`` reads
replacement forwards.
"""
