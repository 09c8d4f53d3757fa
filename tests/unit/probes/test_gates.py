"""probes/gates.py: the consumer's own checks of vLLM's version that raise when its modules are imported (at the top
level, or in a helper called there), evaluated for the build's version; not those inside a def the import does not
run, nor those under a ``try`` that catches them."""

from __future__ import annotations

import pytest
from compat.probes.gates import PROBE

from compat.findings import Status

BUILD = {"vllm/engine.py": "class Engine:\n    pass\n"}

TABLE = '''
import vllm

_VENDORED = {{"0.0.0": "a", "0.1.0": "b"}}


def _select(version):
    if version not in _VENDORED:
        raise RuntimeError(f"Install a supported vLLM: {{sorted(_VENDORED)}}")
    return _VENDORED[version]


{use}
'''

DIRECT = '''
import vllm
from packaging.version import Version

if Version(vllm.__version__) {op} Version("0.0.5"):
    raise ImportError("this plugin needs another vLLM")
'''


ASSERTED = '''
from importlib.metadata import version

from packaging.version import Version

assert Version(version("vllm")) < Version("0.1.0"), (
    "vllm-project/vllm#59254 merged after v0.0.9. Once this vllm carries it, delete this patch"
)
'''


@pytest.mark.parametrize(("source", "version", "status", "says"), [
    pytest.param(TABLE.format(use="SCHEDULE = _select(vllm.__version__)"), "0.2.0", Status.BROKEN,
                 ["importing consumer raises for vLLM 0.2.0", "Install a supported vLLM", "in consumer._select"],
                 id="helper-raises-for-an-unlisted-release"),
    pytest.param(TABLE.format(use="SCHEDULE = _select(vllm.__version__)"), "0.1.0", Status.OK,
                 ["does not hold for vLLM 0.1.0"], id="helper-listed-release"),
    pytest.param(DIRECT.format(op="<"), "0.0.1", Status.BROKEN, ["needs another vLLM", "version < 0.0.5"],
                 id="top-level-raise-holds"),
    pytest.param(DIRECT.format(op="<"), "0.1.0", Status.OK, ["does not hold"], id="top-level-raise-does-not-hold"),
    # vllm-rbln 0.12.0, patches/harmony.py: ``assert Version(version("vllm")) < Version("0.31.0"), ...`` at import
    pytest.param(ASSERTED, "0.1.0", Status.BROKEN, ["importing consumer raises for vLLM 0.1.0",
                                                    '`assert Version(version("vllm")) < Version("0.1.0")',
                                                    "if version >= 0.1.0"],
                 id="top-level-assert-fails"),
    pytest.param(ASSERTED, "0.0.9", Status.OK, ["does not hold"], id="top-level-assert-holds"),
])
def test_a_version_gate_run_at_import(trees, source, version, status, says):
    findings = trees.findings(PROBE, source, {**BUILD, "vllm/_version.py": f'__version__ = "{version}"\n'})
    assert [f.status for f in findings] == [status], [f.message for f in findings]
    for word in says:
        assert word in findings[0].message, findings[0].message


@pytest.mark.parametrize("use", [
    pytest.param("def later():\n    return _select(vllm.__version__)", id="in-a-def-the-import-does-not-run"),
    pytest.param("try:\n    SCHEDULE = _select(vllm.__version__)\nexcept RuntimeError:\n    SCHEDULE = None",
                 id="caught-by-the-module"),
])
def test_no_gate_where_the_import_does_not_raise(trees, use):
    build = {**BUILD, "vllm/_version.py": '__version__ = "0.2.0"\n'}
    assert trees.findings(PROBE, TABLE.format(use=use), build) == []


NEEDS_PATCH = '''
from vllm.engine import Engine

if not hasattr(Engine, "_usage"):
    raise RuntimeError("apply the usage patch first")
'''


@pytest.mark.parametrize(("patch", "status"), [
    pytest.param("from vllm.engine import Engine\n\n\ndef _usage(self):\n    return 0\n\n\nEngine._usage = _usage\n",
                 Status.UNKNOWN, id="the-consumer-sets-it-itself"),
    pytest.param("", Status.BROKEN, id="nobody-sets-it"),
])
def test_a_gate_on_an_attribute_the_consumer_sets_on_vllm_s_class_is_not_the_build_s(trees, patch, status):
    """vllm-ascend 0.18.0 raises at import where OpenAIServingChat lacks ``_make_usage_info``
    (patch_glm_tool_call_parser.py:1077), which its own usage-accounting patch sets on that class, imported just
    before: the build does not decide the test, the order of the consumer's imports does."""
    consumer = {"consumer/__init__.py": "", "consumer/gate.py": NEEDS_PATCH} | (
        {"consumer/usage.py": patch} if patch else {})
    findings = trees.findings(PROBE, consumer, BUILD)
    assert [f.status for f in findings] == [status], [f.message for f in findings]
