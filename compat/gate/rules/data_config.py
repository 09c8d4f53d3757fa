"""The ``data_config`` rule: the flags agree with speculators' ``data_config.json`` beside the files.

The file was written by the run that wrote the data, so a flag that says otherwise is more likely wrong than the
file (ids copied from another model's run); the file wins and the disagreement fails. ``--override-data-config``
says the flags are right: they win, and the disagreement is reported as allowed. A file that cannot be taken at
its word (unreadable, too large, too deep, a value of the wrong type or range: ``expect.read_data_config``) states
nothing: the samples are judged without it, and the file fails.
"""

from __future__ import annotations

from collections.abc import Sequence

from compat.gate.expect import Conflict, DataConfigFault
from compat.gate.rules.rule import Context, Phase, ReadSubject, Rule, RuleFinding


def _shown(value: object) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def _data_config(c: ReadSubject, _ctx: Context) -> Sequence[RuleFinding]:
    if isinstance(c, DataConfigFault):
        return [RuleFinding(f"{c.message}: the samples are judged without this file",
                            "correct or remove the data_config.json (speculators writes hidden_states.layer_ids as a "
                            "list of integers and model.hidden_size as an integer)")]
    if not isinstance(c, Conflict):
        return ()
    flag, config = f"{c.flag.source} {_shown(c.flag.value)}", f"{c.config.source}"
    if c.overridden:
        return [RuleFinding(f"{flag} overrides {config}: the samples are judged by the flag", expected=config,
                            found=flag, allowed="--override-data-config: the flags win over data_config.json")]
    first = "pass the model that wrote this dataset" if c.flag.source.startswith(_MODEL_FLAGS) else \
        f"drop {c.flag.source}"
    return [RuleFinding(f"{flag} contradicts {config}: the samples are judged by data_config.json",
                        f"{first}, correct the data_config.json, or pass --override-data-config if the file is the "
                        "one that is wrong", expected=config, found=flag)]


_MODEL_FLAGS = ("--model", "--reference")
"""Flags whose value is a model: its config's hidden size is what they state."""


DATA_CONFIG = Rule(
    "data_config", "--hidden-size, --layers, --layer-ids and the hidden size of --model's config agree with "
                   "data_config.json beside the files (the file wins; --override-data-config: the flags win, reported "
                   "as allowed); a data_config.json that cannot be taken at its word (unreadable, over 1 MiB, nested "
                   "too deep, a value of the wrong type or range) fails and states nothing",
    Phase.READ, _data_config)
