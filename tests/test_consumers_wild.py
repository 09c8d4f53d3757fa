"""The audit on heavy real consumers of vLLM's internals (arctic-inference, vllm-ascend), each at the vLLM it
pins, where its code is known to work: what they define on vLLM's objects themselves is theirs, not a broken
vLLM API; and recall where their code does break. Small fixtures test the scan's logic for each cause."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from compat import sources
from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer.scan import scan_tree
from compat.sources import tree_from_path


@pytest.fixture(scope="module")
def arctic_020():
    return scan_tree(sources.tree_from_release("arctic-inference", "0.2.0"))


def _audit(scan, build, vllm: str, written_for: str | None = None):
    return Auditor(AuditOptions(confirm="never")).run(scan, build(vllm),
                                                      written_for=build(written_for).surface if written_for else None)


def _at(result, location: str, check: str | None = None):
    return [f for f in result.findings if f.consumer_location == location and (check is None or f.check == check)]


@pytest.mark.slow
def test_what_arctic_adds_to_vllm_is_its_own_at_the_pinned_build(arctic_020, build):
    result = _audit(arctic_020, build, "0.18.0")
    # A patch class copies pad_for_cudagraph onto VllmConfig; a module patch adds parallel_state._SP; a consumer
    # subclass returned by a patched __new__ holds ulysses_sequence_parallel_size.
    for location, symbol in (("arctic_inference/vllm/swiftkv/llama_swiftkv.py:585", "pad_for_cudagraph"),
                             ("arctic_inference/vllm/ulysses.py:63", "ulysses_sequence_parallel_size"),
                             ("arctic_inference/vllm/spec_dec/vocab_parallel_embedding.py:26", "_SP")):
        found = [f for f in _at(result, location) if symbol in f.symbol or symbol in f.message]
        assert found and all(f.status.value == "ok" for f in found), (location, [f.message for f in found])
    # Scheduler.update_from_output(self, so, mro): self is passed explicitly through the class.
    (call,) = _at(result, "arctic_inference/vllm/patches.py:141", "call")
    assert call.status.value == "ok", call.message
    # collective_rpc("offload_model_weights") on a worker extension passed through engine_kwargs.setdefault.
    (rpc,) = _at(result, "arctic_inference/server/worker.py:292", "rpc")
    assert rpc.status.value in ("ok", "unknown"), rpc.message
    # Python's own attributes are not vLLM API.
    assert all(f.status.value == "ok" for f in _at(result, "arctic_inference/vllm/config.py:192"))
    # results = await self.llm.collective_rpc("sync_weights", ...); return results[0] if results else {}
    (reply,) = _at(result, "arctic_inference/server/worker.py:426", "reply-shape")
    assert "index [0] at arctic_inference/server/worker.py:431" in reply.message, reply.message


@pytest.mark.slow
def test_calls_on_self_in_a_patch_class_are_touchpoints(arctic_020, build):
    """ArcticPatch[GPUModelRunner] calls self._get_cumsum_and_arange(n), whose signature vLLM 0.26.0 changed."""
    calls = [tp for tp in arctic_020.touchpoints if tp.attribute == "_get_cumsum_and_arange"]
    assert calls and all(tp.receiver.symbol.endswith("GPUModelRunner") for tp in calls)
    pinned = _audit(arctic_020, build, "0.18.0")
    later = _audit(arctic_020, build, "0.26.0", written_for="0.18.0")
    where = {str(tp.location) for tp in calls}

    def statuses(result):
        return {f.status.value for f in result.findings if f.consumer_location in where and f.check == "call"}

    assert statuses(pinned) == {"ok"}
    assert statuses(later) & {"broken", "changed"}, [f.message for f in later.findings
                                                     if f.consumer_location in where]


@pytest.mark.slow
def test_a_file_starting_with_a_byte_order_mark_is_read_as_python_reads_it():
    scan = scan_tree(sources.tree_from_release("vllm-ascend", "0.13.0"))
    assert not [p for p in scan.problems if "mtp_proposer" in p.location.file]
    assert any(tp.location.file.endswith("spec_decode/mtp_proposer.py") for tp in scan.touchpoints)


@pytest.mark.slow
def test_tests_and_examples_of_an_sdist_are_left_out_unless_asked():
    from packaging.version import Version

    from compat.sources import index

    # The release itself is read from its wheel, which holds no tests: the sdist does.
    sdist = next(f for f in index.list_files("vllm-ascend") if f.version == Version("0.11.0") and f.is_sdist)
    tree = sources.tree_from_archive(index.download(sdist), "sdist vllm-ascend 0.11.0", "vllm_ascend")
    shipped, everything = scan_tree(tree), scan_tree(tree, everything=True)
    assert shipped.left_out and all(p.split("/")[0] in ("tests", "examples", "benchmarks", "docs")
                                    or "/tests/" in f"/{p}" for p in shipped.left_out)
    assert not any(tp.location.file.startswith("tests/") for tp in shipped.touchpoints)
    assert any(tp.location.file.startswith("tests/") for tp in everything.touchpoints)


# Small fixtures: the scan's logic for each cause ---------------------------------------------------------------


def _scan(tmp_path: Path, files: dict[str, str]):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return scan_tree(tree_from_path(tmp_path / "pkg"))


def test_patch_classes_and_subclasses_are_recorded(tmp_path):
    scan = _scan(tmp_path, {"patching.py": """
        class Patch:
            def __class_getitem__(cls, target): ...
        """, "mod.py": """
        from vllm.config import VllmConfig, ParallelConfig
        import vllm.distributed.parallel_state as ps
        from .patching import Patch
        from typing import Generic

        class Extra:
            added_field: int = 1

        class MyConfig(ParallelConfig, Extra):
            pass

        class ConfigPatch(Patch[VllmConfig]):
            def pad_for_cudagraph(self, n):
                return self.compilation_config.pad(n)

        class StatePatch(Patch[ps]):
            _SP = None

        class NotAPatch(Generic[VllmConfig]):
            pass
        """})
    patches = {(p.kind, p.target.rsplit(".", 1)[-1]): p.names for p in scan.class_patches}
    assert patches[("patch", "VllmConfig")] == ("pad_for_cudagraph",)
    assert patches[("patch", "parallel_state")] == ("_SP",)
    assert "added_field" in patches[("subclass", "ParallelConfig")]
    assert len(patches) == 3  # Generic[...] is typing's, not a patch
    # self inside the patch reaches the patched class for what the patch does not define
    (touch,) = [tp for tp in scan.touchpoints if tp.attribute == "compilation_config"]
    assert touch.receiver.kind == "self" and touch.receiver.symbol == "vllm.config.VllmConfig"


def test_worker_extensions_named_through_a_dict_are_found(tmp_path):
    scan = _scan(tmp_path, {"run.py": """
        from vllm import LLM

        def build(engine_kwargs, other):
            engine_kwargs.setdefault("worker_extension_cls", "pkg.ext.A")
            other["worker_extension_cls"] = "pkg.ext.B"
            return {"worker_extension_cls": "pkg.ext.C", "model": "m"}
        """})
    assert sorted(name for name, _ in scan.worker_extensions) == ["pkg.ext.A", "pkg.ext.B", "pkg.ext.C"]


def test_a_byte_order_mark_and_the_scope_of_a_tree(tmp_path):
    (tmp_path / "pkg" / "tests").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_bytes(b"\xef\xbb\xbfimport vllm.config\nvllm.config.VllmConfig()\n")
    (tmp_path / "pkg" / "tests" / "test_mod.py").write_text("import vllm.config\n")
    scan = scan_tree(tree_from_path(tmp_path / "pkg"))
    assert not scan.problems and scan.left_out == ("tests/test_mod.py",)
    assert {tp.location.file for tp in scan.touchpoints} == {"mod.py"}
    assert "tests/test_mod.py" in {tp.location.file for tp in scan_tree(tree_from_path(tmp_path / "pkg"),
                                                                          everything=True).touchpoints}


def test_an_optional_extras_upper_bound_is_the_build_written_for():
    from compat.consumer.scan import written_for

    assert written_for(('vllm>=0.8.5,<=0.11.0; extra == "vllm"',), "vllm") == "0.11.0"
    assert written_for(("vllm==0.9.2", "vllm<=0.11.0"), "vllm") == "0.9.2"
    assert written_for(("vllm==0.30.0+cpu",), "vllm") == "0.30.0"  # vllm-rbln 0.12.0: a build of 0.30.0
    assert written_for(("vllm>=0.8",), "vllm") is None


def test_checks_before_a_use_narrow_it(tmp_path):
    scan = _scan(tmp_path, {"mod.py": """
        from vllm.attention.backends.abstract import AttentionLayer
        from vllm.config import VllmConfig

        def forward(layer: AttentionLayer, config):
            plain = layer.plain
            if hasattr(layer, "quant_method") and layer.quant_method.ready:
                out = layer.quant_method.apply(layer)
            ok = not hasattr(layer, "scale") or layer.scale > 0
            try:
                extra = layer.extra
            except AttributeError:
                extra = None
            if isinstance(config, VllmConfig):
                config.model_config
            return out.view(1), ok, extra
        """})
    narrowed = {tp.code.strip(): tp.narrowed for tp in scan.touchpoints if tp.kind.value == "attribute"}
    assert all(narrowed[c] for c in narrowed if "quant_method" in c), narrowed
    assert not [n for c, n in narrowed.items() if c.startswith("plain = layer.plain")][0]
    assert any("layer.scale > 0" in c and n for c, n in narrowed.items())  # `not hasattr(...) or layer.scale`
    assert any("extra" in c and n.startswith("try/except AttributeError") for c, n in narrowed.items())
    (model,) = [tp for tp in scan.touchpoints if tp.attribute == "model_config"]
    assert model.receiver.render() == "vllm.config.VllmConfig(...)"  # isinstance: its class is known there
    # the value built from a checked attribute stays checked where it flows
    (view,) = [tp for tp in scan.touchpoints if tp.attribute == "view"]
    assert view.narrowed


def test_a_version_helper_with_an_override_is_read_for_the_default_run(tmp_path):
    scan = _scan(tmp_path, {"utils.py": """
        import os
        from packaging.version import Version

        def vllm_version_is(target):
            if os.environ.get("VLLM_VERSION") is not None:
                version = os.environ["VLLM_VERSION"]
            else:
                import vllm
                version = vllm.__version__
            try:
                return Version(version) == Version(target)
            except ValueError:
                raise ValueError("bad version")
        """, "mod.py": """
        from .utils import vllm_version_is

        if vllm_version_is("0.11.0"):
            from vllm.attention import Attention
        else:
            from vllm.attention.layer import MLAAttention
        """})
    guards = {tp.symbol: [(g.text, g.branch) for g in tp.guards] for tp in scan.touchpoints}
    assert guards["vllm.attention.Attention"] == [("vllm_version_is('0.11.0')", True)]
    assert guards["vllm.attention.layer.MLAAttention"] == [("vllm_version_is('0.11.0')", False)]


@pytest.mark.network
def test_one_missing_name_is_one_finding(tmp_path, build):
    """An import of a name the build lacks, and the calls of it, are one finding: the import."""
    scan = _scan(tmp_path, {"mod.py": """
        from vllm.utils import NoSuchThing

        def a():
            return NoSuchThing()

        def b():
            return NoSuchThing().method()
        """})
    result = _audit(scan, build, "0.11.0")
    failing = [f for f in result.findings if f.status.value in ("broken", "unknown")]
    assert [f.check for f in failing] == ["import"], [(f.check, f.message) for f in failing]
    assert failing[0].consumer_location == "mod.py:2"
    assert "2 later use(s) fail for the same reason (mod.py:5, mod.py:8)" in failing[0].message


@pytest.mark.slow
def test_vllm_ascend_at_the_build_it_targets(build):
    """vllm-ascend 0.11.0 at vLLM 0.11.0: what it stores on vLLM's objects, checks first, guards by its own
    version helper, or reaches through other libraries' objects is not a broken vLLM API."""
    scan = scan_tree(sources.tree_from_release("vllm-ascend", "0.11.0"))
    result = _audit(scan, build, "0.11.0")
    # forward_context.fused_moe_state = ... on vLLM's ForwardContext, and the reads of it
    stores = _at(result, "vllm_ascend/ascend_forward_context.py:104", "attribute")
    assert stores and all(f.status.value == "ok" for f in stores), [f.message for f in stores]
    # elif hasattr(layer, 'quant_method') and ...: layer.quant_method.apply(...)
    checked = _at(result, "vllm_ascend/attention/attention_v1.py:609")
    assert checked and all(f.status.value == "ok" for f in checked), [f.message for f in checked]
    # if vllm_version_is("0.11.0"): ... else: from vllm.attention.layer import MLAAttention (a newer vLLM's)
    (newer,) = _at(result, "vllm_ascend/models/layers/mla.py:42", "import")
    assert newer.status.value == "ok" and "not run with this build" in newer.message
    # nothing about other libraries' objects is reported as unknown
    unknown = [f.message for f in result.findings if f.status.value == "unknown"]
    for other in ("hf_config", "triton.language", "logger", "zmq.", "typing.Any", "torch.nn.Module"):
        assert not [m for m in unknown if other in m], other


@pytest.mark.slow
def test_hugging_face_version_helpers_across_modules_on_trl(build):
    """TRL 1.16.0 (vLLM 0.22.0 to 0.31.0): `_HAS_STATEFUL_TRAINER_ENGINE = is_vllm_available(min_version="0.28.0")`,
    a helper in trl/import_utils.py that finds vLLM's version through importlib.util.find_spec and
    importlib.metadata in a further helper; each branch of `if _HAS_STATEFUL_TRAINER_ENGINE: ... elif
    is_vllm_available(): ...` imports names that only its own builds have."""
    scan = scan_tree(sources.tree_from_release("trl", "1.16.0"))
    new, old = "trl/generation/vllm_client.py:50", "trl/generation/vllm_client.py:53"
    for vllm, runs, skipped in (("0.31.0", new, old), ("0.22.0", old, new)):
        result = _audit(scan, build, vllm)
        ran = _at(result, runs, "import")
        assert ran and all(f.status.value == "ok" and "not run" not in f.message for f in ran), vllm
        not_run = _at(result, skipped, "import")
        assert not_run and all("not run with this build" in f.message and "0.28.0" in f.message
                               for f in not_run), (vllm, [f.message for f in not_run])
        assert not [f for f in result.findings if f.status.value == "broken"], vllm


@pytest.mark.slow
def test_engine_args_built_by_a_classmethod_on_verl(build):
    """verl 0.9.1 at the vLLM it pins: `engine_args = AsyncEngineArgs.from_cli_args(args)` builds the class it was
    reached through (`return cls(...)`, no annotation), so what is read from it is checked, not unknown."""
    scan = scan_tree(sources.tree_from_release("verl", "0.9.1"))
    result = _audit(scan, build, "0.24.0")
    where = "verl/workers/rollout/vllm_rollout/vllm_async_server.py"
    for line, symbol in ((484, "AsyncEngineArgs.create_engine_config"), (490, "AsyncEngineArgs.enable_log_requests")):
        found = [f for f in _at(result, f"{where}:{line}", "attribute") if f.symbol.endswith(symbol)]
        assert found and all(f.status.value == "ok" for f in found), (line, [f.message for f in found])
    (call,) = _at(result, f"{where}:484", "call")
    assert call.status.value == "ok", call.message


@pytest.mark.network
def test_a_classmethod_returning_cls_gives_the_class_reached_through(tmp_path, build):
    scan = _scan(tmp_path, {"mod.py": """
        from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

        def make(ns):
            args = EngineArgs.from_cli_args(ns)
            print(args.model, args.no_such_field)
            other = AsyncEngineArgs.from_cli_args(ns)
            print(other.no_such_field)
        """})
    result = _audit(scan, build, "0.11.0")
    statuses = {(f.consumer_location, f.symbol.rsplit(".", 2)[-2] + "." + f.symbol.rsplit(".", 1)[-1]): f.status.value
                for f in result.findings if f.check == "attribute"}
    assert statuses[("mod.py:6", "EngineArgs.model")] == "ok"
    assert statuses[("mod.py:6", "EngineArgs.no_such_field")] == "broken"
    assert statuses[("mod.py:8", "AsyncEngineArgs.no_such_field")] == "broken"


@pytest.mark.network
def test_a_version_helper_in_another_module_is_run_for_the_build(tmp_path, build):
    """The Hugging Face pattern, as a fixture: the version comes from importlib.metadata in a helper of a helper
    in another module; a helper the scan cannot run makes its branches unknown, never broken."""
    scan = _scan(tmp_path, {"import_utils.py": """
        import importlib.metadata
        import importlib.util
        from packaging.version import Version

        MAPPING = importlib.metadata.packages_distributions()

        def _available(name, return_version=False):
            exists = importlib.util.find_spec(name) is not None
            version = "N/A"
            if exists and return_version:
                try:
                    dists = MAPPING[name]
                    dist = name.replace("_", "-") if name in dists else dists[0]
                    version = importlib.metadata.version(dist)
                except KeyError:
                    pass
            return exists, version

        def is_vllm_available(min_version=None):
            ok, version = _available("vllm", return_version=True)
            if ok and min_version is not None and Version(version) < Version(min_version):
                return False
            return ok

        def vllm_is_new():
            for part in ("0", "12"):
                return part == "12"
        """, "mod.py": """
        from .import_utils import is_vllm_available, vllm_is_new

        NEW = is_vllm_available(min_version="0.12.0")
        if NEW:
            from vllm.sampling_params import NotIn0110
        elif is_vllm_available():
            from vllm.sampling_params import SamplingParams

        if vllm_is_new():
            from vllm.sampling_params import AlsoNotIn0110
        """})
    result = _audit(scan, build, "0.11.0")
    (skipped,) = _at(result, "mod.py:6", "import")
    assert skipped.status.value == "ok" and "not run with this build" in skipped.message, skipped.message
    (ran,) = _at(result, "mod.py:8", "import")
    assert ran.status.value == "ok" and "not run" not in ran.message, ran.message
    (unrun,) = _at(result, "mod.py:11", "import")
    assert unrun.status.value == "unknown", unrun.message
    assert "could not run: it returns from inside a loop" in unrun.message, unrun.message


@pytest.mark.slow
def test_patches_are_checked_against_what_they_replace_on_arctic(arctic_020, build):
    """arctic-inference 0.2.0 patches GPUModelRunner and parallel_state for vLLM 0.18.0; vLLM 0.26.0 passes new
    arguments to three of the methods it replaces, and arctic-inference 0.3.0 (written for 0.26.0) takes them."""
    later = _audit(arctic_020, build, "0.26.0", written_for="0.18.0")
    broken = {f.symbol.rsplit(".", 1)[-1]: f for f in later.findings
              if f.check == "patch" and f.status.value == "broken"}
    assert {"initialize_kv_cache", "_capture_cudagraphs", "graph_capture"} <= set(broken), sorted(broken)
    assert "is_profiling" in broken["initialize_kv_cache"].message
    assert "graph_capture_context" in broken["graph_capture"].message
    pinned = _audit(arctic_020, build, "0.18.0", written_for="0.18.0")
    patches = [f for f in pinned.findings if f.check == "patch"]
    assert len(patches) > 50 and not [f for f in patches if f.status.value == "broken"]
    fixed = _audit(scan_tree(sources.tree_from_release("arctic-inference", "0.3.0")), build, "0.26.0",
                   written_for="0.18.0")
    still = {f.symbol.rsplit(".", 1)[-1] for f in fixed.findings if f.check == "patch" and f.status.value == "broken"}
    assert not still & {"initialize_kv_cache", "_capture_cudagraphs", "graph_capture"}, still


@pytest.mark.network
def test_what_a_patch_replaces_must_exist_and_take_vllms_arguments(tmp_path, build):
    scan = _scan(tmp_path, {"patch.py": """
        from vllm.attention.backends.abstract import AttentionBackend
        from vllm.platforms.interface import Platform

        class MyBackend(AttentionBackend):
            @staticmethod
            def get_metadata_cls():
                return None

            def my_own_helper(self):
                return 1

        class MyPlatform(Platform):
            @classmethod
            def get_attn_backend_cls(cls, selected_backend, head_size, dtype, kv_cache_dtype, block_size, use_v1,
                                     use_mla, has_sink, use_sparse):
                return ""

        def my_supported_dtypes(self):
            return []

        Platform.supported_dtypes = my_supported_dtypes
        """})
    kinds = {tp.symbol.rsplit(".", 1)[-1]: tp.replacement.how for tp in scan.touchpoints if tp.kind.value == "patch"}
    assert kinds == {"get_metadata_cls": "subclass", "my_own_helper": "subclass",
                     "get_attn_backend_cls": "subclass", "supported_dtypes": "replace"}
    pinned = _audit(scan, build, "0.11.0", written_for="0.11.0")
    assert {f.status.value for f in pinned.findings if f.check == "patch"} == {"ok"}
    later = _audit(scan, build, "0.13.0", written_for="0.11.0")
    by_name = {f.symbol.rsplit(".", 1)[-1]: f for f in later.findings if f.check == "patch"}
    assert "my_own_helper" not in by_name  # the consumer's own addition is not a touchpoint of vLLM's
    assert by_name["get_metadata_cls"].status.value == "changed"  # an override vLLM stops calling fails nothing
    assert "gone from this build" in by_name["get_metadata_cls"].message
    assert by_name["get_attn_backend_cls"].status.value == "broken"
    assert "attn_selector_config" in by_name["get_attn_backend_cls"].message
    assert by_name["supported_dtypes"].status.value == "ok"


@pytest.mark.network
def test_names_imported_for_type_checking_give_annotations_their_class(tmp_path, build):
    """vllm-ascend's pattern: `if TYPE_CHECKING: from vllm.config import VllmConfig` / `else: VllmConfig = None`.
    The annotation means vLLM's class (a store on it is the consumer's own, a missing member is found); a name
    that import no longer finds breaks nothing at run time (unknown, not broken)."""
    scan = _scan(tmp_path, {"platform.py": """
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from vllm.config import VllmConfig
            from vllm.utils import NoLongerHere
        else:
            VllmConfig = None
            NoLongerHere = None

        def update(vllm_config: VllmConfig, parser: NoLongerHere) -> None:
            vllm_config.scheduler_config.my_limit = 4
            print(vllm_config.scheduler_config.my_limit, vllm_config.no_such_config)
            parser.add_argument("--x")
        """})
    result = _audit(scan, build, "0.11.0")
    statuses = {(f.consumer_location, f.symbol.rsplit(".", 1)[-1]): f.status.value
                for f in result.findings if f.check == "attribute"}
    assert statuses[("platform.py:12", "my_limit")] == "ok"
    assert statuses[("platform.py:13", "my_limit")] == "ok"
    assert statuses[("platform.py:13", "no_such_config")] == "broken"
    (parser,) = [f for f in result.findings if f.consumer_location == "platform.py:14" and f.check == "attribute"]
    assert parser.status.value == "unknown" and "only for type checking" in parser.message, parser.message


def test_a_wheels_data_directory_is_read_where_it_installs(tmp_path, monkeypatch):
    """openrlhf's wheel keeps its package under openrlhf-0.11.2.data/purelib/: installed, that is the package."""
    import zipfile

    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    wheel = tmp_path / "pkg-1.0-cp310-cp310-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg-1.0.data/purelib/pkg/__init__.py", "")
        zf.writestr("pkg-1.0.data/purelib/pkg/ext.py", "import vllm\n\n\nclass Ext:\n    pass\n")
        zf.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n")
    tree = sources.tree_from_archive(wheel, "test wheel")
    assert (tree.root / "pkg" / "ext.py").is_file()
    scan = scan_tree(tree)
    assert [c.qualname for c in scan.classes] == ["pkg.ext.Ext"]


@pytest.mark.slow
def test_a_subclass_missing_a_new_abstract_method_cannot_be_built_on_vllm_ascend(build):
    """vLLM 0.18.0 made OffloadingHandler.wait abstract; vllm-ascend 0.13.0's CpuNpuOffloadingHandler does not
    define it, so building one raises TypeError there (vllm-ascend 0.18.0 added it)."""
    scan = scan_tree(sources.tree_from_release("vllm-ascend", "0.13.0"))
    later = _audit(scan, build, "0.18.0", written_for="0.13.0")
    (found,) = [f for f in later.findings if f.symbol.endswith(":abstract")]
    assert found.status.value == "broken" and found.consumer_location == "vllm_ascend/kv_offload/cpu_npu.py:46"
    assert "abstract method(s) wait" in found.message
    pinned = _audit(scan, build, "0.13.0", written_for="0.13.0")
    assert not [f for f in pinned.findings if f.symbol.endswith(":abstract")]


@pytest.mark.network
def test_a_subclass_of_an_abc_must_define_what_the_build_made_abstract(tmp_path, build):
    scan = _scan(tmp_path, {"offload.py": """
        from vllm.v1.kv_offload.worker.worker import OffloadingHandler

        class Partial(OffloadingHandler):
            def transfer_async(self, job_id, spec):
                return True

            def get_finished(self):
                return []

        class Complete(Partial):
            def wait(self, job_ids):
                pass

        class Forgotten(OffloadingHandler):
            def transfer_async(self, job_id, spec):
                return True

            def get_finished(self):
                return []
        """})
    later = _audit(scan, build, "0.18.0", written_for="0.13.0")
    # Partial is a base its subclass completes; Forgotten is built as it is.
    (found,) = [f for f in later.findings if f.symbol.endswith(":abstract")]
    assert found.consumer_location == "offload.py:15" and "Forgotten" in found.message, found.message
    assert "wait" in found.message
    assert not [f for f in _audit(scan, build, "0.13.0", written_for="0.13.0").findings
                if f.symbol.endswith(":abstract")]


@pytest.mark.network
def test_replacements_and_branches_of_a_version_check(tmp_path, build):
    scan = _scan(tmp_path, {"patch.py": """
        import vllm.v1.core.sched.utils as sched_utils
        from vllm.v1.core.sched.scheduler import Scheduler

        def my_check_stop(request, max_model_len, pooler_output):
            return False

        def my_init(self, *args, **kwargs):
            pass

        sched_utils.check_stop = my_check_stop
        Scheduler.__init__ = my_init
        """, "use.py": """
        import vllm
        from vllm.v1.core.sched.utils import check_stop
        from vllm.v1.core.sched.scheduler import Scheduler

        if vllm.__version__ == "0.11.0":
            from vllm.v1.core.sched.utils import check_stop as chosen
        else:
            from vllm.v1.core.sched.utils import remove_all as chosen

        def run(request, spec):
            check_stop(request, 100, None)
            Scheduler(1, 2, 3, 4, 5, 6, 7, 8, 9)
            chosen(request)
            return spec.head_size if hasattr(spec, "head_size") else 0
        """})
    kinds = {(p.kind, p.names) for p in scan.class_patches}
    assert ("replace", ("check_stop",)) in kinds and ("replace", ("__init__",)) in kinds
    (chosen,) = [tp for tp in scan.touchpoints if tp.kind.value == "call" and "chosen" in tp.code
                 and tp.symbol.endswith("check_stop")]
    assert [g.branch for g in chosen.guards] == [True]
    result = _audit(scan, build, "0.11.0")
    # the replaced function and __init__ are the consumer's: no binding against vLLM's signatures
    assert not [f for f in result.findings if f.check == "call" and f.status.value != "ok"
                and ("check_stop" in f.symbol or "Scheduler" in f.symbol)], \
        [f.message for f in result.findings if f.check == "call"]


@pytest.mark.network
def test_an_awaited_reply_is_followed_to_its_uses(tmp_path, build):
    scan = _scan(tmp_path, {"server.py": """
        from vllm.v1.engine.async_llm import AsyncLLM

        async def first(llm: AsyncLLM):
            results = await llm.collective_rpc("report")
            return results[0] if results else {}

        async def total(llm: AsyncLLM):
            results = await llm.collective_rpc("report")
            return sum(r["n"] for r in results)

        async def ignored(llm: AsyncLLM):
            await llm.collective_rpc("report")
        """})
    uses = {tp.location.line: [(u.kind, u.detail) for u in tp.reply_uses]
            for tp in scan.touchpoints if tp.kind.value == "rpc"}
    assert uses == {5: [("index", "[0]")], 9: [("iterate", "for r in ...")], 13: []}
    result = _audit(scan, build, "0.11.0")
    (ignored,) = _at(result, "server.py:13", "reply-shape")
    assert "sees no index, unpack or iteration" in ignored.message


@pytest.mark.network
def test_an_interface_is_read_from_the_build():
    from compat.facts.abstract import FACT
    from compat.vllm.builds import open_build

    for version, path in (("0.18.0", "vllm.v1.kv_cache_interface.KVCacheSpec"),  # raises NotImplementedError
                          ("0.11.0", "vllm.attention.backends.abstract.AttentionLayer"),  # a Protocol
                          ("0.11.0", "vllm.v1.core.sched.request_queue.RequestQueue"),  # an ABC
                          ("0.11.0", "vllm.attention.backends.abstract.AttentionMetadata"),  # declares nothing
                          ("0.11.0", "vllm.v1.worker.lora_model_runner_mixin.LoRAModelRunnerMixin")):
        assert open_build(version).surface.fact(FACT, path).interface, path
    assert not open_build("0.18.0").surface.fact(FACT, "vllm.config.vllm.VllmConfig").interface


@pytest.mark.network
def test_a_module_getattr_serving_fixed_names_is_read(build):
    """vllm.platforms serves current_platform through a module __getattr__ (lazily built): importable; a name
    it does not serve is missing, not unknown."""
    surface = build("0.11.0").surface
    assert surface.lookup("vllm.platforms.current_platform").__class__.__name__ == "Found"
    missing = surface.lookup("vllm.platforms.no_such_platform")
    assert missing.__class__.__name__ == "Missing" and "serves only current_platform" in missing.reason


def test_which_names_a_module_getattr_serves():
    import ast

    from compat.vllm.modules import getattr_names as _getattr_names

    fixed = ast.parse("def __getattr__(name):\n    if name in ('a', 'b'):\n        return 1\n"
                      "    elif name in globals():\n        return globals()[name]\n    raise AttributeError(name)\n")
    assert sorted(_getattr_names(fixed)) == ["a", "b"]
    dynamic = ast.parse("def __getattr__(name):\n    return getattr(_impl, name)\n")
    assert _getattr_names(dynamic) is None
