"""Changed defaults (``probes/defaults.py``, ``compat/facts/defaults.py``): fields a consumer leaves out of a config
it builds whose default is not the one of the build it was written for.

The first layer runs on two small trees shaped like vLLM (a ``SchedulerConfig`` whose ``enable_chunked_prefill``
goes from ``None`` to ``True`` as between vLLM 0.11.0 and 0.11.1, a ``__post_init__`` copy the scheduler reads, a
``VllmConfig`` that rewrites a sub-config's field) and a small consumer; the second on the real releases and
speculators 0.3.0, where first releases are confirmed by reading the releases' own declarations with ``ast``.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from compat.probes.defaults import PROBE

from compat import sources
from compat.consumer.scan import scan_tree
from compat.facts import defaults
from compat.findings import Finding, Status
from compat.probe import ProbeContext
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

COMMON = {
    "vllm/__init__.py": "",
    "vllm/config/__init__.py": """
        from vllm.config.cache import CacheConfig
        from vllm.config.observability import ObservabilityConfig
        from vllm.config.scheduler import SchedulerConfig
        from vllm.config.vllm import VllmConfig
    """,
    "vllm/config/observability.py": """
        from dataclasses import dataclass

        @dataclass
        class ObservabilityConfig:
            collect_detailed_traces: list | None = None
    """,
    "vllm/v1/__init__.py": "",
    "vllm/v1/core/__init__.py": "",
    "vllm/v1/core/sched/__init__.py": "",
    "vllm/v1/engine/__init__.py": "",
    "vllm/v1/engine/output_processor.py": """
        class OutputProcessor:
            def __init__(self, vllm_config):
                self.scheduler_config = vllm_config.scheduler_config

            def process_outputs(self, outputs):
                return outputs[:: self.scheduler_config.stream_interval]
    """,
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": """
        from dataclasses import dataclass

        from vllm.config import CacheConfig


        @dataclass
        class EngineArgs:
            model: str = "facebook/opt-125m"
            enable_prefix_caching: bool | None = CacheConfig.enable_prefix_caching
    """,
}

# As vLLM 0.11.0: chunked prefill None (off), copied into chunked_prefill_enabled, which the scheduler reads;
# max_num_seqs None until __post_init__ fills in 128; prefix caching None.
OLD = COMMON | {
    "vllm/_version.py": '__version__ = "9.0.0"\n',
    "vllm/config/scheduler.py": """
        from dataclasses import dataclass, field


        @dataclass
        class SchedulerConfig:
            max_num_seqs: int | None = None
            enable_chunked_prefill: bool | None = None
            policy: str = "fcfs"
            stream_interval: int = 1
            max_num_partial_prefills: int = 1
            async_scheduling: bool = False
            chunked_prefill_enabled: bool = field(init=False)

            def __post_init__(self):
                if self.max_num_seqs is None:
                    self.max_num_seqs = 128
                self.chunked_prefill_enabled = self.enable_chunked_prefill
    """,
    "vllm/config/cache.py": """
        from dataclasses import dataclass, field


        @dataclass
        class CacheConfig:
            block_size: int = 16
            enable_prefix_caching: bool | None = None
            ignore_patterns: list[str] = field(default_factory=lambda: ["original/**/*"])
    """,
    "vllm/config/vllm.py": """
        from dataclasses import dataclass, field

        from vllm.config.cache import CacheConfig
        from vllm.config.observability import ObservabilityConfig
        from vllm.config.scheduler import SchedulerConfig


        @dataclass
        class VllmConfig:
            scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
            cache_config: CacheConfig = field(default_factory=CacheConfig)
            observability_config: ObservabilityConfig | None = None
    """,
    "vllm/v1/core/sched/scheduler.py": """
        class Scheduler:
            def __init__(self, vllm_config):
                self.scheduler_config = vllm_config.scheduler_config
                self.cache_config = vllm_config.cache_config
                self.caching = bool(self.cache_config.enable_prefix_caching)

            def schedule(self):
                if not self.scheduler_config.chunked_prefill_enabled:
                    return "whole prompts"
                return "chunks"
    """,
}

# As vLLM 0.11.1 on: chunked prefill True, read directly by the scheduler; max_num_seqs declared 128 (the same
# effective default); prefix caching True; stream_interval 10 (read only by code the consumer does not call);
# async_scheduling None, which VllmConfig.__post_init__ always turns back into False; max_num_partial_prefills
# declared 1 as before but always set to 4 by VllmConfig; a field that is new.
NEW = COMMON | {
    "vllm/_version.py": '__version__ = "9.1.0"\n',
    "vllm/config/scheduler.py": """
        from dataclasses import dataclass


        @dataclass
        class SchedulerConfig:
            max_num_seqs: int = 128
            enable_chunked_prefill: bool = True
            policy: str = "fcfs"
            stream_interval: int = 10
            max_num_partial_prefills: int = 1
            async_scheduling: bool | None = None
            new_field: int = 3

            @property
            def chunked_prefill_enabled(self) -> bool:
                return self.enable_chunked_prefill
    """,
    "vllm/config/cache.py": """
        from dataclasses import dataclass, field


        @dataclass
        class CacheConfig:
            block_size: int = 16
            enable_prefix_caching: bool = True
            ignore_patterns: list[str] = field(default_factory=lambda: ["original/**/*"])
    """,
    "vllm/config/vllm.py": """
        from dataclasses import dataclass, field

        from vllm.config.cache import CacheConfig
        from vllm.config.observability import ObservabilityConfig
        from vllm.config.scheduler import SchedulerConfig


        @dataclass
        class VllmConfig:
            scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
            cache_config: CacheConfig = field(default_factory=CacheConfig)
            observability_config: ObservabilityConfig = field(default_factory=ObservabilityConfig)

            def __post_init__(self):
                if self.scheduler_config.async_scheduling is None:
                    self.scheduler_config.async_scheduling = False
                self._set_partial_prefills()

            def _set_partial_prefills(self):
                if self.cache_config.block_size > 8:
                    self.scheduler_config.max_num_partial_prefills = 4
    """,
    "vllm/v1/core/sched/scheduler.py": """
        class Scheduler:
            def __init__(self, vllm_config):
                self.scheduler_config = vllm_config.scheduler_config
                self.cache_config = vllm_config.cache_config
                self.caching = self.cache_config.enable_prefix_caching

            def schedule(self):
                if not self.scheduler_config.enable_chunked_prefill:
                    return "whole prompts"
                return "chunks"
    """,
}

CONSUMER = """
    from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler


    def run(options):
        config = VllmConfig(
            scheduler_config=SchedulerConfig(max_num_seqs=4),
            cache_config=CacheConfig(block_size=16),
            observability_config=None,
        )
        scheduler = Scheduler(config)
        return scheduler.schedule()
"""


@pytest.fixture
def trees(tmp_path, monkeypatch):
    """(written-for surface, audited surface), each opened from a directory with ``open_build``."""
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    old = open_build(str(write_tree(tmp_path / "old", OLD))).surface
    new = open_build(str(write_tree(tmp_path / "new", NEW))).surface
    return old, new


def _findings(tmp_path: Path, trees, consumer: str = CONSUMER, written_for: bool = True) -> list[Finding]:
    path = tmp_path / "consumer" / "gen.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(consumer).lstrip("\n"))
    old, new = trees
    ctx = ProbeContext(scan_tree(tree_from_path(path)), new, old if written_for else None)
    return list(PROBE.run(ctx))


def _by_symbol(findings: list[Finding]) -> dict[str, Finding]:
    return {f.symbol: f for f in findings}


def test_opening_a_directory_gives_the_build_its_declared_version(trees):
    old, new = trees
    assert (old.build.version, new.build.version) == ("9.0.0", "9.1.0")


def test_the_fact_reads_defaults_rewrites_copies_and_reads(trees):
    old, new = trees
    before = old.fact(defaults.FACT, "vllm.config.SchedulerConfig")
    after = new.fact(defaults.FACT, "vllm.config.SchedulerConfig")
    assert before.config == "vllm.config.scheduler.SchedulerConfig" and before.attribute == "scheduler_config"
    chunked_before, chunked_after = before.get("enable_chunked_prefill"), after.get("enable_chunked_prefill")
    assert (chunked_before.default, chunked_after.default) == ("None", "True")
    assert chunked_before.declared_at == "vllm/config/scheduler.py:7"
    # 0.11.0's copy: the scheduler reads chunked_prefill_enabled, which __post_init__ makes from the field
    assert chunked_before.copies == ("chunked_prefill_enabled",)
    assert defaults.Read("vllm.v1.core.sched.scheduler.Scheduler.schedule", "vllm/v1/core/sched/scheduler.py:8",
                         "chunked_prefill_enabled") in chunked_before.reads
    # later: a one-line property is the copy, and the scheduler reads the field itself
    assert chunked_after.copies == ("chunked_prefill_enabled",)
    assert defaults.Read("vllm.v1.core.sched.scheduler.Scheduler.schedule",
                         "vllm/v1/core/sched/scheduler.py:8") in chunked_after.reads
    # the construction fills in max_num_seqs when it is None: the effective default is 128 in both
    fill = before.get("max_num_seqs").rewrites
    assert [(r.value, r.condition, r.applies) for r in fill] == [("128", "self.max_num_seqs is None", True)]
    assert before.get("max_num_seqs").effective == after.get("max_num_seqs").effective == "128"
    assert before.get("max_num_seqs").default != after.get("max_num_seqs").default
    # VllmConfig's rewrite of a sub-config's field, with the method it calls on itself and its test
    partial = after.get("max_num_partial_prefills").rewrites
    assert [(r.value, r.by, r.condition, r.applies) for r in partial] == [
        ("4", "vllm.config.vllm.VllmConfig._set_partial_prefills", "self.cache_config.block_size > 8", None)]
    resolved = after.get("async_scheduling")
    assert (resolved.default, resolved.effective) == ("None", "False")
    assert "vllm.config.vllm.VllmConfig._set_partial_prefills" in new.fact(
        defaults.FACT, "vllm.config.VllmConfig").constructor


def test_factories_and_references_render_what_they_make(trees):
    old, new = trees
    assert new.fact(defaults.FACT, "vllm.config.VllmConfig").get("observability_config").default == \
        "ObservabilityConfig()"
    assert new.fact(defaults.FACT, "vllm.config.CacheConfig").get("ignore_patterns").default == "['original/**/*']"
    # EngineArgs' default names CacheConfig's: a change there is a change here
    engine = [s.fact(defaults.FACT, "vllm.engine.arg_utils.EngineArgs").get("enable_prefix_caching").default
              for s in (old, new)]
    assert engine == ["None", "True"]


def test_readers_can_be_asked_for_a_few_fields(trees):
    _, new = trees
    some = new.fact(defaults.FACT, "vllm.config.SchedulerConfig", "enable_chunked_prefill")
    assert some.get("enable_chunked_prefill").reads and not some.get("stream_interval").reads
    assert not new.fact(defaults.FACT, "vllm.config.SchedulerConfig", "").get("enable_chunked_prefill").reads


def test_a_changed_default_read_by_code_the_consumer_calls_is_changed(tmp_path, trees):
    found = _by_symbol(_findings(tmp_path, trees))
    chunked = found["vllm.config.SchedulerConfig.enable_chunked_prefill"]
    assert chunked.status is Status.CHANGED and chunked.check == "defaults"
    # each field its own identity (a matrix row, a bisection): fields of one call change at different builds
    assert chunked.touchpoint == "vllm.config.SchedulerConfig.enable_chunked_prefill"
    assert chunked.consumer_location == "gen.py:7" and chunked.vllm_location == "vllm/config/scheduler.py:7"
    assert chunked.message.startswith("SchedulerConfig.enable_chunked_prefill defaults to True in this build (None "
                                      "in vLLM 9.0.0, the build the consumer was written for)")
    assert "read by Scheduler.schedule (vllm/v1/core/sched/scheduler.py:8), which the consumer calls at gen.py:12" \
        in chunked.message
    assert (chunked.evidence.written_for, chunked.evidence.audited) == ("None", "True")
    assert chunked.evidence.written_for_build == "9.0.0"
    assert "enable_chunked_prefill=False" in (chunked.fix or "")
    caching = found["vllm.config.CacheConfig.enable_prefix_caching"]
    assert caching.status is Status.CHANGED and "Scheduler.__init__" in caching.message


def test_a_rewrite_that_always_applies_is_the_default(tmp_path, trees):
    found = _by_symbol(_findings(tmp_path, trees))
    # declared 1 in both, but VllmConfig now sets 4 under a test of its own: not always, so not the default
    assert "vllm.config.SchedulerConfig.max_num_partial_prefills" not in found
    # declared None now, but VllmConfig always sets the None back to False: the same default as before
    assert "vllm.config.SchedulerConfig.async_scheduling" not in found


def test_a_default_read_only_by_code_the_consumer_does_not_call_is_ok(tmp_path, trees):
    stream = _by_symbol(_findings(tmp_path, trees))["vllm.config.SchedulerConfig.stream_interval"]
    assert stream.status is Status.OK
    assert "no code the consumer calls reads it directly (read by OutputProcessor.process_outputs " \
           "(vllm/v1/engine/output_processor.py:6))" in stream.message


def test_an_unchanged_default_a_new_field_and_a_passed_field_give_nothing(tmp_path, trees):
    found = _by_symbol(_findings(tmp_path, trees))
    assert "vllm.config.SchedulerConfig.policy" not in found  # the same default
    assert "vllm.config.SchedulerConfig.max_num_seqs" not in found  # passed (and the same effective default)
    assert "vllm.config.SchedulerConfig.new_field" not in found  # only in one build: no default to have changed
    assert "vllm.config.VllmConfig.observability_config" not in found  # passed, though its default changed
    assert "vllm.config.CacheConfig.block_size" not in found
    passing = CONSUMER.replace("SchedulerConfig(max_num_seqs=4)", "SchedulerConfig(4, False)").replace(
        "CacheConfig(block_size=16)", "CacheConfig(block_size=16, enable_prefix_caching=False)")
    again = _by_symbol(_findings(tmp_path, trees, passing))
    assert "vllm.config.SchedulerConfig.enable_chunked_prefill" not in again  # passed positionally
    assert "vllm.config.CacheConfig.enable_prefix_caching" not in again
    assert "vllm.config.SchedulerConfig.stream_interval" in again


def test_opaque_keyword_arguments_give_no_field_finding(tmp_path, trees):
    opaque = CONSUMER.replace("SchedulerConfig(max_num_seqs=4)", "SchedulerConfig(**options)")
    findings = [f for f in _findings(tmp_path, trees, opaque) if f.touchpoint == "vllm.config.SchedulerConfig"]
    assert [(f.symbol, f.status) for f in findings] == [("vllm.config.SchedulerConfig", Status.OK)]
    assert "opaque *args/**kwargs" in findings[0].message and "enable_chunked_prefill (None -> True)" in \
        findings[0].message


def test_without_the_build_it_was_written_for_there_is_nothing_to_compare(tmp_path, trees):
    assert _findings(tmp_path, trees, written_for=False) == []


def test_engine_args_are_compared_on_their_own_defaults(tmp_path, trees):
    consumer = "from vllm.engine.arg_utils import EngineArgs\n\nargs = EngineArgs(model='m')\n"
    found = _by_symbol(_findings(tmp_path, trees, consumer))
    assert set(found) == {"vllm.engine.arg_utils.EngineArgs.enable_prefix_caching"}
    assert found["vllm.engine.arg_utils.EngineArgs.enable_prefix_caching"].status is Status.OK


# ---- the real releases ----------------------------------------------------------------------------------------

SPECULATORS_BUILDS = {"vllm.config.SchedulerConfig.enable_chunked_prefill": ("scheduler", "SchedulerConfig"),
                      "vllm.config.CacheConfig.enable_prefix_caching": ("cache", "CacheConfig")}
RELEASES = ["0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0"]


def _declaration(version: str, module: str, cls: str, name: str) -> str:
    """What a config field's declaration in a release's own source assigns (its default; the annotation may be
    spelt differently without changing it), read here with ast, not with the fact."""
    tree = ast.parse((sources.tree_from_release("vllm", version).root / "vllm" / "config" / f"{module}.py")
                     .read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    stmt = next(s for s in body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                and s.target.id == name)
    return ast.unparse(stmt.value) if stmt.value is not None else "<no default>"


def _defaults(result) -> dict[str, Finding]:
    return {f.symbol: f for f in result.findings if f.check == "defaults"}


@pytest.mark.network
@pytest.mark.slow
def test_speculators_against_its_own_build_has_no_changed_default(audit, build):
    assert _defaults(audit("0.11.0", written_for=build("0.11.0").surface)) == {}


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.11.1", "0.32.0"])
def test_speculators_leaves_chunked_prefill_and_prefix_caching_to_changed_defaults(audit, build, version):
    found = _defaults(audit(version, written_for=build("0.11.0").surface))
    chunked = found["vllm.config.SchedulerConfig.enable_chunked_prefill"]
    assert chunked.status is Status.CHANGED and (chunked.evidence.written_for, chunked.evidence.audited) == \
        ("None", "True")
    assert "Scheduler.schedule" in chunked.message and "vllm_hidden_states_generator.py:253" in chunked.message
    caching = found.get("vllm.config.CacheConfig.enable_prefix_caching")
    if _declaration(version, "cache", "CacheConfig", "enable_prefix_caching") == \
            _declaration("0.11.0", "cache", "CacheConfig", "enable_prefix_caching"):
        assert caching is None  # 0.11.1 still declares None: nothing changed for this call
    else:
        assert caching is not None and caching.status is Status.CHANGED
        assert caching.evidence.written_for == "None" and caching.evidence.audited == "True"
        assert "Scheduler.__init__" in caching.message


@pytest.mark.network
@pytest.mark.slow
def test_the_first_release_of_each_changed_default_is_where_its_declaration_changed(audit, build):
    """Audit each release in order; the first with each finding must declare the field differently from the last
    release without it (read with ast here), and every release before agrees with 0.11.0's declaration."""
    reference = build("0.11.0").surface
    reported = {version: _defaults(audit(version, written_for=reference)) for version in RELEASES}
    for symbol, (module, cls) in SPECULATORS_BUILDS.items():
        field = symbol.rsplit(".", 1)[1]
        first = next(v for v in RELEASES if symbol in reported[v])
        last = RELEASES[RELEASES.index(first) - 1]
        before, after = _declaration(last, module, cls, field), _declaration(first, module, cls, field)
        print(f"{symbol}: first in {first}: {before!r} ({last}) -> {after!r} ({first})")
        assert before != after, (symbol, last, first)
        assert all(_declaration(v, module, cls, field) == _declaration("0.11.0", module, cls, field)
                   for v in RELEASES[: RELEASES.index(first)])
        assert all(symbol in reported[v] for v in RELEASES[RELEASES.index(first):])


ENVS = """
    import os

    environment_variables = {
        "VLLM_USE_V1": lambda: bool(int(os.getenv("VLLM_USE_V1", "1"))),
        "VLLM_OFF": lambda: os.getenv("VLLM_OFF", "0").lower() in ("1", "true"),
        "VLLM_PATH": lambda: os.getenv("VLLM_PATH"),
    }
"""
MODEL = """
    from dataclasses import dataclass

    from vllm import envs

    @dataclass
    class ModelConfig:
        seed: int | None = None
        note: int | None = None

        def __post_init__(self):
            if envs.VLLM_USE_V1 and self.seed is None:
                self.seed = 0
            if envs.VLLM_OFF and self.note is None:
                self.note = 1
"""


def test_a_rewrite_under_an_environment_variable_applies_as_the_variable_defaults(tmp_path, monkeypatch):
    """vLLM 0.11.0 sets ``seed = 0`` under ``envs.VLLM_USE_V1``, whose default is on: its default seed is 0, as in
    0.11.1, where the test is gone. A variable whose default is off keeps the field's declared default."""
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    tree = write_tree(tmp_path / "tree", {"vllm/__init__.py": "", "vllm/envs.py": ENVS,
                                      "vllm/config/__init__.py": "from vllm.config.model import ModelConfig\n",
                                      "vllm/config/model.py": MODEL})
    surface = open_build(str(tree)).surface
    assert defaults.env_defaults(surface.inner) == {"envs.VLLM_USE_V1": True, "envs.VLLM_OFF": False,
                                                   "envs.VLLM_PATH": None}
    found = surface.fact(defaults.FACT, "vllm.config.ModelConfig", "")
    assert found.get("seed").effective == "0"
    assert found.get("note").effective == "None"


def test_a_class_method_that_only_builds_the_class_reads_as_the_class_default(tmp_path, monkeypatch):
    """vLLM 0.12.0 on: ``field(default_factory=SchedulerConfig.default_factory)``, a static method that fills
    the ``InitVar``s and returns ``SchedulerConfig(**kwargs)``; a caller leaving the field out is given
    ``SchedulerConfig()`` as before, so the field must not read as changed. A method that builds anything else
    keeps its own name."""
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    factory = """
        @staticmethod
        def default_factory(**kwargs):
            if "max_model_len" not in kwargs:
                kwargs["max_model_len"] = 8192
            return SchedulerConfig(**kwargs)

        @staticmethod
        def tuned():
            return SchedulerConfig(max_num_seqs=TUNED)
"""
    scheduler = textwrap.dedent(NEW["vllm/config/scheduler.py"]).replace(
        "    @property", textwrap.indent(textwrap.dedent(factory), "    ") + "\n    @property")
    config = NEW["vllm/config/vllm.py"].replace(
        "field(default_factory=SchedulerConfig)", "field(default_factory=SchedulerConfig.default_factory)").replace(
        "field(default_factory=CacheConfig)", "field(default_factory=SchedulerConfig.tuned)")
    new = open_build(str(write_tree(tmp_path / "new", NEW | {"vllm/config/scheduler.py": scheduler,
                                                          "vllm/config/vllm.py": config}))).surface
    made = new.fact(defaults.FACT, "vllm.config.VllmConfig")
    assert made.get("scheduler_config").default == "SchedulerConfig()"
    assert made.get("cache_config").default == "SchedulerConfig.tuned()"


@pytest.mark.network
@pytest.mark.slow
def test_a_new_switch_the_build_decides_per_platform_is_named_with_the_code_that_decides_it(audit, build):
    """vLLM 0.34.0 adds CacheConfig.enable_extensible_kv_cache (declared None), which its own construction turns
    on on CUDA and off on CPU, and ParallelConfig.numa_bind (None, auto), which the executor decides when it starts
    a worker (numa_utils.configure_subprocess); both are on the consumer's path, both appear in the full audit.
    VllmConfig.kv_transfer_config stays None for speculators (the rewrite to KVTransferConfig() sits after an early
    return unless kv_offloading_size is set): not a finding."""
    found = _defaults(audit("0.34.0", written_for=build("0.11.0").surface))
    extensible = found["vllm.config.CacheConfig.enable_extensible_kv_cache"]
    assert extensible.status is Status.CHANGED, extensible.message
    assert dict(extensible.evidence.extra)["platform_cuda"].startswith("True (vllm/config/vllm.py:")
    assert dict(extensible.evidence.extra)["platform_cpu"].startswith("False (vllm/config/vllm.py:")
    assert "Worker.initialize_from_config" in extensible.message
    numa = found["vllm.config.ParallelConfig.numa_bind"]
    assert numa.status is Status.CHANGED, numa.message
    assert "numa_utils.configure_subprocess decides it at run time (vllm/utils/numa_utils.py:" in numa.message
    assert "the build the consumer was written for" in numa.message
    assert "vllm.config.VllmConfig.kv_transfer_config" not in found
    assert "vllm.config.ParallelConfig.numa_bind_nodes" not in found  # a list, not a switch


@pytest.mark.network
@pytest.mark.slow
def test_an_upgrade_audit_names_its_baseline_as_the_baseline(audit, build):
    found = _defaults(audit("0.34.0", written_for=build("0.33.0").surface))
    numa = found["vllm.config.ParallelConfig.numa_bind"]
    assert "the baseline; the consumer was written for vLLM 0.11.0" in numa.message
    assert "numa_utils.configure_subprocess" in numa.message or "numa_bind" in numa.message
