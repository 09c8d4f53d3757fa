"""The full extraction run (``python -m compat.extract``): the consumer, patched by ``compat.fix`` for the
installed vLLM, runs its own hidden-state generator on a real engine; its outputs are saved in its own
layout and validated by the gate (against HF transformers, and exactly on the predictable model).

``stage`` writes the patched consumer where a child process imports it; ``runner`` is that child (vLLM spawns
workers, so the generator runs in a process of its own); ``prompts`` makes or reads the prompts; ``verdict``
validates the tensors; ``checks`` are the consistency checks (``--check``); ``native`` runs vLLM's own
extraction for comparison.
"""
