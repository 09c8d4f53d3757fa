"""The shape-validation gate: check hidden-state files before a training run reads them.

    extraction run (real engine) --> tensors --> validation gate

``python -m compat.gate PATH...`` (see ``compat.gate.cli``), or in Python ``run_gate(GateOptions(...))``.
Layouts are described in ``compat.gate.read.layouts``, rules in ``compat.gate.rules.RULES``.
"""

from compat.gate.expect import Expectations, Expected
from compat.gate.read import Layout, read_file
from compat.gate.result import SCHEMA, GateResult, GateSummary
from compat.gate.rules import RULES
from compat.gate.runner import GateOptions, run_gate

__all__ = ["RULES", "SCHEMA", "Expectations", "Expected", "GateOptions", "GateResult", "GateSummary", "Layout",
           "read_file", "run_gate"]
