"""The audit: scan a consumer, open a vLLM build, run every probe, report the findings.

``pipeline`` runs it; ``cli`` is ``python -m compat.audit``; ``upgrade`` compares two builds;
``allowlist`` accepts known findings.
"""
