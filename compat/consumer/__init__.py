"""The consumer side: every place a consumer's source touches vLLM, found with ``ast`` (never imported).

``scan.scan_tree`` is the entry point and ``model`` holds what it produces (touchpoints and the rest of a
``Scan``). ``index`` is the first pass (the consumer's classes and functions, across files); ``visitor``
walks one module (statements and expressions, one class; its pure helpers over nodes in ``nodes``) and
returns a ``record``; ``values`` is what the walk
knows about a value, ``conditions`` reads version guards that ``guards`` evaluates against a build, and
``patches`` reads replacement forwards.
"""
