"""The shape-validation gate: check hidden-state files before a training run reads them.

    extraction run (real engine) --> tensors --> validation gate

``python -m compat.gate PATH...`` (see ``compat.gate.cli``), or in Python ``run_gate(GateOptions(...))``.
Reading lives in ``compat.gate.read`` (layouts in ``compat.gate.read.layouts``), judging in
``compat.gate.rules`` (``RULES``: one ``Rule`` each); ``compat.gate.runner`` is the pipeline between them.
"""

from compat.gate.expect import Expectations, Expected
from compat.gate.options import GateOptions
from compat.gate.read import Layout, read_file
from compat.gate.result import SCHEMA, GateResult, GateSummary
from compat.gate.rules import RULES
from compat.gate.rules.rule import Rule
from compat.gate.runner import run_gate

__all__ = ["RULES", "SCHEMA", "Expectations", "Expected", "GateOptions", "GateResult", "GateSummary", "Layout",
           "Rule", "read_file", "run_gate"]
