"""compat/facts/callers.py: the test around a call of vLLM's code, with a local read as what it was assigned only
where one plain assignment is all that binds it in the function."""

from __future__ import annotations

import ast
import textwrap

import pytest

from compat.facts.callers import _condition


def _test_of(body: str) -> str:
    """The condition ``_condition`` reads around ``send()`` in ``def f(config): <body>``."""
    function = ast.parse("def f(config):\n" + textwrap.indent(textwrap.dedent(body), "    ")).body[0]
    parents = {id(child): node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    call = next(n for n in ast.walk(function) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "send")
    return _condition(function, call, parents)


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param("on = config.cache.extensible\nif on:\n    send()\n", "(config.cache.extensible)",
                 id="assigned-once"),
    pytest.param("on: bool = config.cache.extensible\nif on:\n    send()\n", "(config.cache.extensible)",
                 id="annotated-once"),
    pytest.param("on = config.cache.extensible\nif not on:\n    pass\nelse:\n    send()\n",
                 "not (not config.cache.extensible)", id="in-the-else"),
    pytest.param("on = config.cache.extensible\non = False\nif on:\n    send()\n", "(on)", id="assigned-twice"),
    pytest.param("on = config.cache.extensible\non &= config.other\nif on:\n    send()\n", "(on)",
                 id="augmented"),
    pytest.param("on = config.cache.extensible\nfor on in config.flags:\n    pass\nif on:\n    send()\n", "(on)",
                 id="a-for-target"),
    pytest.param("on = config.cache.extensible\nif (on := config.other):\n    send()\n", "((on := config.other))",
                 id="walrus"),
    pytest.param("on, off = config.a, config.b\nif on:\n    send()\n", "(on)", id="unpacked"),
    pytest.param("config = config.inner\nif config:\n    send()\n", "(config)", id="a-parameter-rebound"),
    pytest.param("if config:\n    send()\n", "(config)", id="a-parameter"),
    pytest.param("def g():\n    on = config.cache.extensible\nif on:\n    send()\n", "(on)",
                 id="a-nested-function-s-local-is-not-this-one-s"),
    pytest.param("from vllm import on\nif on:\n    send()\n", "(on)", id="an-import"),
])
def test_a_local_is_read_as_its_value_only_where_one_plain_assignment_binds_it(body, expected):
    assert _test_of(body) == expected
