"""The audit against real vLLM releases from the package index and the real speculators 0.3.0 release.

The first releases asserted here were established by reading each release's code:
- get_kv_cache_config_from_groups(kv_cache_specs=...): parameter gone in 0.12.0
  (vllm/v1/core/kv_cache_utils.py; 0.11.2 still declares it);
- SchedulerConfig.is_encoder_decoder: an InitVar with default False in 0.11.1 and 0.11.2,
  required (no default) from 0.12.0 (vllm/config/scheduler.py);
- Scheduler.__init__(..., block_size: int, ...): required from 0.11.1 (vllm/v1/core/sched/scheduler.py);
- Request.__init__(..., eos_token_id, ...): present up to 0.16.0, gone in 0.17.0 (vllm/v1/request.py);
- kv_cache_utils.get_kv_cache_config_from_groups and friends moved to kv_cache_planning in 0.33.0.
The tool itself has no table of versions; it derives every verdict from the code it reads.
"""

from __future__ import annotations

import textwrap

import pytest
from packaging.version import Version

from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer.scan import scan_tree
from compat.findings import Status
from compat.sources import index, tree_from_path

pytestmark = [pytest.mark.network]

CORE_PROBES = ("import", "call", "attribute", "rpc")

EXPECTED_FIRST = {
    # (callable, parameter named in the problem): first release
    ("vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups", "kv_cache_specs"): "0.12.0",
    ("vllm.config.SchedulerConfig", "is_encoder_decoder"): "0.12.0",
    ("vllm.v1.core.sched.scheduler.Scheduler", "block_size"): "0.11.1",
    ("vllm.v1.request.Request", "eos_token_id"): "0.17.0",
}


@pytest.mark.parametrize("version", ["0.11.0", "0.32.0", "0.33.0"])
def test_no_probe_errors(audit, version):
    """Every probe runs to a verdict on real releases: no crash, no unreadable build."""
    errors = [(f.check, f.message) for f in audit(version).findings if f.status is Status.ERROR]
    assert errors == []


def test_pinned_release_binds_everything(audit):
    """speculators 0.3.0 pinned vllm==0.11.0: nothing it imports or calls is broken there."""
    result = audit("0.11.0")
    bad = [f for f in result.findings if f.status in (Status.BROKEN, Status.ERROR) and f.check in CORE_PROBES]
    assert bad == []
    probes = {f.check for f in result.findings if f.status is Status.OK}
    assert {"import", "call", "attribute", "rpc"} <= probes


@pytest.mark.slow
def test_each_breakage_reported_first_where_it_appears(audit, build, speculators_scan):
    releases = index.resolve_range("vllm", ">=0.11.0")
    assert Version("0.33.0") in releases  # the index lists the releases this test is about
    first: dict[tuple[str, str], str] = {}
    evidence = {}
    for version in releases:
        result = audit(str(version))
        for f in result.findings:
            if f.check != "call" or f.status is not Status.BROKEN:
                continue
            for key in EXPECTED_FIRST:
                if f.touchpoint == key[0] and f"'{key[1]}'" in f.message and key not in first:
                    first[key] = str(version)
                    evidence[key] = f
    assert first == EXPECTED_FIRST
    source = {tp.location.line: tp.code for tp in speculators_scan.touchpoints}
    for key, f in evidence.items():
        name = key[0].rsplit(".", 1)[-1]
        file, _, line = f.consumer_location.rpartition(":")
        assert file == "speculators/data_generation/vllm_hidden_states_generator.py"
        assert name in source[int(line)]
        assert f.vllm_location and f.vllm_location.endswith(".py:" + f.vllm_location.rsplit(":", 1)[1])
        assert f.evidence.audited and f.fix
        parameter = key[1]
        if "no longer accepts" in f.message:
            assert parameter not in f.evidence.audited and parameter in f.fix
        else:
            assert parameter in f.evidence.audited


@pytest.mark.slow
def test_evidence_shows_the_signature_the_consumer_was_written_for(speculators_scan, build):
    assert speculators_scan.written_for == "0.11.0"  # read from speculators' metadata pin
    result = Auditor(AuditOptions()).run(speculators_scan, build("0.12.0"))
    f = next(f for f in result.findings if f.touchpoint.endswith("get_kv_cache_config_from_groups")
             and f.check == "call")
    assert f.status is Status.BROKEN
    assert "kv_cache_specs" in f.evidence.written_for and "kv_cache_specs" not in f.evidence.audited
    assert f.evidence.written_for_build == "0.11.0"


def test_moved_symbol_reports_new_module_and_fix(audit, build):
    result = audit("0.33.0")
    moved = [f for f in result.findings if f.check == "import" and f.status is Status.BROKEN]
    assert moved, "0.33.0 moved kv_cache_utils helpers speculators imports"
    for f in moved:
        name = f.touchpoint.rsplit(".", 1)[-1]
        new_module = f.fix.split()[1]
        # The new home must really define the name in that release.
        surface = build("0.33.0").surface
        assert surface.lookup(f"{new_module}.{name}").__class__.__name__ == "Found"
        assert new_module != "vllm.v1.core.kv_cache_utils"
        assert new_module in f.message and f.fix == f"from {new_module} import {name}"
        assert f.vllm_location.startswith(new_module.replace(".", "/"))


GUARDED = """
import vllm
from packaging.version import Version
from vllm.config import SchedulerConfig
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

try:
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups
except ImportError:
    from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups

VLLM_VERSION = Version(vllm.__version__)


def vllm_at_least(minimum: str) -> bool:
    return VLLM_VERSION >= Version(minimum)


def build(vllm_config, kv_cache_config, manager, groups, memory):
    if vllm_at_least("0.12.0"):
        get_kv_cache_config_from_groups(vllm_config=vllm_config, kv_cache_groups=groups, available_memory=memory)
        config = SchedulerConfig(max_model_len=1, is_encoder_decoder=False)
    else:
        get_kv_cache_config_from_groups(vllm_config=vllm_config, kv_cache_groups=groups, kv_cache_specs={},
                                        available_memory=memory)
        config = SchedulerConfig(max_model_len=1)
    if Version(vllm.__version__) < Version("0.11.1"):
        scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                              structured_output_manager=manager)
    else:
        scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                              structured_output_manager=manager, block_size=16)
    if vllm.__version_tuple__ < (0, 17):
        request = Request(request_id="r", prompt_token_ids=[1], sampling_params=None, pooling_params=None,
                          eos_token_id=2)
    else:
        request = Request(request_id="r", prompt_token_ids=[1], sampling_params=None, pooling_params=None)
    return config, scheduler, request


def unguarded():
    return Request(request_id="r", prompt_token_ids=[1], sampling_params=None, pooling_params=None,
                   eos_token_id=2)
"""


@pytest.mark.parametrize("version", ["0.11.0", "0.11.1", "0.12.0", "0.17.0", "0.33.0"])
def test_guarded_consumer_has_no_false_alarms(tmp_path, build, version):
    path = tmp_path / "guarded.py"
    path.write_text(textwrap.dedent(GUARDED))
    scan = scan_tree(tree_from_path(path))
    result = Auditor(AuditOptions(consumer=str(path))).run(scan, build(version), written_for=None)
    broken = [f for f in result.findings if f.status in (Status.BROKEN, Status.ERROR, Status.UNKNOWN)
              and f.check in CORE_PROBES]
    control_line = next(tp.location.line for tp in scan.touchpoints if tp.context.endswith("unguarded"))
    # The only broken line is the unguarded control call, and only where eos_token_id is gone.
    expected = [f"guarded.py:{control_line}"] if Version(version) >= Version("0.17.0") else []
    assert sorted({f.consumer_location for f in broken}) == expected, [f.message for f in broken]
    skipped = [f for f in result.findings if f.message.startswith("not run with this build")]
    assert skipped, "the branches this build does not take are judged as not taken"
    optional = [f for f in result.findings if f.message.startswith("optional import")]
    assert bool(optional) == (Version(version) < Version("0.33.0"))


def _verdicts(result):
    return {(f.check, f.touchpoint, f.consumer_location, f.status) for f in result.findings}


def test_wheel_file_and_source_directory_read_like_the_release(audit, build):
    """A release is read from its wheel (what pip installs); the same wheel named as a file, and the directory
    it was read into, give the same verdicts and the version from vllm/_version.py."""
    from compat import sources

    version = index.resolve("vllm", "0.12.0")
    chosen = index.choose_file("vllm", version)
    assert chosen.filename.endswith(".whl") and "x86_64" in chosen.filename, chosen.filename
    tree = sources.tree_from_release("vllm", "0.12.0")
    assert "wheel" in tree.origin and "range requests" in tree.origin
    expected = _verdicts(audit("0.12.0"))
    from_directory = audit(str(tree.root))
    assert _verdicts(from_directory) == expected
    assert from_directory.build.version == "0.12.0"  # read from vllm/_version.py


def test_a_release_is_read_from_its_wheel_not_its_sdists_placeholders(tmp_path):
    """vLLM 0.26.0's sdist ships vllm/vllm_flash_attn without what its build copies in (layers/, ops/, cute/);
    its own rotary embedding imports vllm.vllm_flash_attn.layers.rotary.apply_rotary_emb from the wheel. A
    consumer importing it is fine against the release (its wheel) and broken only against the sdist."""
    from compat import sources

    sdist = next(f for f in index.list_files("vllm") if f.version == Version("0.26.0") and f.is_sdist)
    consumer = tmp_path / "rotary_user.py"
    consumer.write_text("from vllm.vllm_flash_attn.layers.rotary import apply_rotary_emb\n")
    scan = scan_tree(tree_from_path(consumer))
    statuses = {}
    for label, spec in (("release", "0.26.0"), ("sdist", str(index.download(sdist)))):
        result = Auditor(AuditOptions()).run(scan, open_build_for(spec))
        statuses[label] = {f.status for f in result.findings if f.touchpoint.endswith("apply_rotary_emb")}
    assert statuses == {"release": {Status.OK}, "sdist": {Status.BROKEN}}, statuses
    assert (sources.tree_from_release("vllm", "0.26.0").root / "vllm/vllm_flash_attn/layers/rotary.py").is_file()


def open_build_for(spec: str):
    from compat.vllm.builds import open_build

    return open_build(spec)


def test_git_checkout_version_comes_from_its_tags(tmp_path):
    import subprocess

    from compat.sources import tree_from_path

    package = tmp_path / "checkout" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")

    def git(*args):
        subprocess.run(["git", "-C", str(package.parent), *args], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "a")
    git("tag", "v0.20.0")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "b")
    version = tree_from_path(package.parent, "vllm").version
    assert version.startswith("0.20.0.post1+g")
    assert Version(version) > Version("0.20.0") and Version(version) < Version("0.20.1")
