"""compat.facts.resolution on small builds: a field's value once VllmConfig is built, per platform, from the code
that decides it (platform predicates, flags, aliases, early returns), and unknown where that code does not
decide it."""

from __future__ import annotations

import pytest

from compat.facts import resolution

PLATFORMS = {
    "vllm/platforms/__init__.py": "",
    "vllm/platforms/interface.py": (
        "import enum\n\n\n"
        "class PlatformEnum(enum.Enum):\n    CUDA = enum.auto()\n    ROCM = enum.auto()\n    CPU = enum.auto()\n\n\n"
        "class Platform:\n    _enum: PlatformEnum\n\n"
        "    def is_cuda_alike(self) -> bool:\n        return self._enum in (PlatformEnum.CUDA, PlatformEnum.ROCM)\n\n"
        "    def is_cpu(self) -> bool:\n        return self._enum == PlatformEnum.CPU\n"),
    "vllm/platforms/cuda.py": ("from vllm.platforms.interface import Platform, PlatformEnum\n\n\n"
                               "class CudaPlatformBase(Platform):\n    _enum = PlatformEnum.CUDA\n\n"
                               "    def check_and_update_config(cls, vllm_config):\n"
                               "        vllm_config.parallel_config.worker_cls = 'vllm.worker.GpuWorker'\n"),
    "vllm/platforms/cpu.py": ("from vllm.platforms.interface import Platform, PlatformEnum\n\n\n"
                              "class CpuPlatform(Platform):\n    _enum = PlatformEnum.CPU\n"),
}

CONFIG = (
    "import enum\nfrom dataclasses import dataclass, field\n\n\n"
    "class Access(enum.IntFlag):\n    IN_PROCESS = 0\n    REGISTERS = enum.auto()\n    EXPORTS = enum.auto()\n\n\n"
    "@dataclass\nclass CacheConfig:\n    block_size: int = 16\n    extensible: bool = None\n"
    "    memory_bytes: int | None = None\n    offloading: int | None = None\n\n\n"
    "@dataclass\nclass KVTransferConfig:\n    role: str = 'both'\n\n\n"
    "@dataclass\nclass VllmConfig:\n    cache_config: CacheConfig = field(default_factory=CacheConfig)\n"
    "    kv_transfer_config: KVTransferConfig | None = None\n\n"
    "    def __post_init__(self):\n        self._transfer()\n        self._resolve()\n\n"
    "    def _transfer(self):\n        if (size := self.cache_config.offloading) is None:\n            return\n"
    "        self.kv_transfer_config = KVTransferConfig()\n\n"
    "    def _resolve(self):\n        from vllm.platforms import current_platform\n\n"
    "        cache_config = self.cache_config\n        requested = cache_config.extensible\n"
    "        access = Access.IN_PROCESS if self.kv_transfer_config is None else unknown_access()\n"
    "        unsupported = None\n"
    "        if not current_platform.is_cuda_alike():\n            unsupported = 'cuda only'\n"
    "        elif cache_config.memory_bytes is not None:\n            unsupported = 'memory given'\n"
    "        exports = Access.EXPORTS in access\n"
    "        if requested is None:\n            cache_config.extensible = unsupported is None and not exports\n"
    "        elif requested and unsupported is not None:\n            raise ValueError(unsupported)\n")


def _build(trees, config: str = CONFIG):
    files = {**PLATFORMS, "vllm/config/__init__.py": "from vllm.config.vllm import CacheConfig, VllmConfig, "
             "KVTransferConfig\n", "vllm/config/vllm.py": config}
    return trees.vllm(files).inner


@pytest.mark.parametrize(("platform", "passed", "expected"), [
    ("CUDA", "", True),
    ("CPU", "", False),
    ("CUDA", "CacheConfig.memory_bytes=1024", False),
    ("CUDA", "CacheConfig.memory_bytes=<passed>", resolution.UNKNOWN),
    ("CUDA", "CacheConfig.extensible=False", False),
    ("CUDA", "CacheConfig.offloading=4", resolution.UNKNOWN),
])
def test_a_field_resolves_per_platform_from_the_code_that_decides_it(trees, platform, passed, expected):
    surface = _build(trees)
    resolved = resolution.read(surface, platform, passed)
    assert not resolved.error
    value, at = resolution.field_value(surface, resolved, "vllm.config.CacheConfig", "extensible",
                                       resolution.parse_passed(passed))
    assert value is expected or value == expected and type(value) is type(expected)
    assert at


def test_an_early_return_leaves_the_declared_default(trees):
    surface = _build(trees)
    resolved = resolution.read(surface, "CUDA", "")
    value, at = resolution.field_value(surface, resolved, "vllm.config.VllmConfig", "kv_transfer_config", {})
    assert value is None and at.startswith("vllm/config/vllm.py:")
    offloading = resolution.read(surface, "CUDA", "CacheConfig.offloading=4")
    value, _ = resolution.field_value(surface, offloading, "vllm.config.VllmConfig", "kv_transfer_config",
                                      resolution.parse_passed("CacheConfig.offloading=4"))
    assert value is not None


def test_a_guard_is_evaluated_on_the_resolved_fields(trees):
    surface = _build(trees)
    for platform, truth in (("CUDA", True), ("CPU", False)):
        resolved = resolution.read(surface, platform, "")
        assert resolution.evaluate(surface, "vllm_config.cache_config.extensible", resolved, {}) is truth
        assert resolution.evaluate(surface, "not vllm_config.cache_config.extensible", resolved, {}) is (not truth)
    resolved = resolution.read(surface, "CUDA", "")
    # Two reads of one field at different points are not taken to be equal.
    assert resolution.evaluate(surface, "vllm_config.cache_config.block_size != vllm_config.cache_config.block_size",
                               resolved, {}) is resolution.UNKNOWN


def test_the_platform_names_its_worker_class(trees):
    surface = _build(trees)
    assert resolution.worker_class(surface, "CUDA") == "vllm.worker.GpuWorker"
    assert resolution.worker_class(surface, "CPU") is None


def test_a_build_without_the_platform_class_says_so(trees):
    files = {"vllm/config/__init__.py": "from vllm.config.vllm import VllmConfig\n",
             "vllm/config/vllm.py": "from dataclasses import dataclass\n\n\n@dataclass\nclass VllmConfig:\n"
                                    "    x: int = 1\n"}
    resolved = resolution.read(trees.vllm(files).inner, "CUDA", "")
    assert "PlatformEnum.CUDA" in resolved.error


REACH = {
    **PLATFORMS,
    "vllm/config/__init__.py": "from vllm.config.vllm import CacheConfig, VllmConfig, KVTransferConfig\n",
    "vllm/config/vllm.py": CONFIG,
    "vllm/executor.py": (
        "class Executor:\n    def __init__(self, vllm_config):\n        self.vllm_config = vllm_config\n"
        "        self._init_executor()\n\n    def _init_executor(self):\n        raise NotImplementedError\n\n"
        "    def initialize(self):\n        self.collective_rpc('initialize_from_config')\n\n\n"
        "class Multi(Executor):\n    def __init__(self, vllm_config):\n        super().__init__(vllm_config)\n\n"
        "    def _init_executor(self):\n        start(self.vllm_config)\n\n\n"
        "def start(vllm_config):\n    cache_config = vllm_config.cache_config\n"
        "    cache_config.extensible = probe()\n\n\ndef probe():\n    return True\n"),
    "vllm/worker.py": ("class GpuWorker:\n    def initialize_from_config(self):\n"
                       "        if self.cache_config.extensible:\n            self.commit()\n\n"
                       "    def commit(self):\n        pass\n"),
}


def test_the_path_follows_super_the_subclass_and_rpcs_into_the_worker(trees):
    from compat.facts import reach

    surface = trees.vllm(REACH).inner
    found = reach.read(surface, "vllm.executor.Multi,vllm.executor.Executor.initialize", "vllm.worker.GpuWorker")
    paths = found.paths()
    # super().__init__ runs Executor.__init__, whose self._init_executor() is the subclass's, not the base's.
    assert {"vllm.executor.Executor.__init__", "vllm.executor.Multi._init_executor", "vllm.executor.start"} <= paths
    assert "vllm.executor.Executor._init_executor" not in paths
    # collective_rpc("initialize_from_config") runs the worker's method, and what it calls on self.
    assert {"vllm.worker.GpuWorker.initialize_from_config", "vllm.worker.GpuWorker.commit"} <= paths
    assert found.chain("vllm.worker.GpuWorker.commit").endswith(
        "GpuWorker.initialize_from_config -> GpuWorker.commit")
    writes = [(w.field, w.function, w.value) for w in found.writes]
    assert ("extensible", "vllm.executor.start", "probe()") in writes
    assert all(w.config == "vllm.config.vllm.CacheConfig" for w in found.writes if w.kind == reach.CONFIG)


LEVELS = (
    "import enum\nfrom dataclasses import dataclass, field\n\n\n"
    "class Level(enum.IntEnum):\n    O0 = 0\n    O2 = 2\n\n\n"
    "@dataclass\nclass KernelConfig:\n    autotune: bool | None = None\n\n\n"
    "@dataclass\nclass CacheConfig:\n    block_size: int = 16\n    offloading: int | None = None\n\n\n"
    "@dataclass\nclass ModelConfig:\n    eager: bool = False\n\n\n"
    "DEFAULTS = {Level.O0: {'kernel_config': {'autotune': False}}, Level.O2: {'kernel_config': {'autotune': True}}}\n"
    "\n\n@dataclass\nclass VllmConfig:\n    model_config: ModelConfig = field(default_factory=ModelConfig)\n"
    "    cache_config: CacheConfig = field(default_factory=CacheConfig)\n"
    "    kernel_config: KernelConfig = field(default_factory=KernelConfig)\n    level: Level = Level.O2\n\n"
    "    def __post_init__(self):\n"
    "        if self.level > Level.O0 and self.model_config.eager:\n            self.level = Level.O0\n"
    "        self._apply(DEFAULTS[{key}])\n"
    "        if self.kernel_config.autotune is None:\n            raise ValueError('autotune must be set')\n\n"
    "    def _apply(self, defaults):\n"
    "        def apply(obj, table):\n"
    "            for key, value in table.items():\n"
    "                current = getattr(obj, key)\n"
    "                if isinstance(value, dict):\n                    apply(current, value)\n"
    "                elif getattr(obj, key) is None:\n                    setattr(obj, key, value)\n"
    "        apply(self, defaults)\n")


@pytest.mark.parametrize(("key", "passed", "autotune", "offloading"), [
    ("self.level", "", True, None),
    ("self.level", "ModelConfig.eager=True", False, None),  # an IntEnum compared by value: level becomes O0
    # A table not known here: getattr(self, key) hands any sub-config to code that sets fields by name.
    ("unknown_table()", "", resolution.UNKNOWN, resolution.UNKNOWN),
])
def test_defaults_set_by_name_on_a_sub_config_stay_set(trees, key, passed, autotune, offloading):
    """vLLM 0.16.0's ``_apply_optimization_level_defaults``: a sub-config read with ``getattr(self, key)`` is the
    one object later reads see (every path raised before: the value set on it was lost), and a key not known
    here leaves every sub-config's fields unknown rather than their declared defaults."""
    surface = _build(trees, LEVELS.replace("{key}", key))
    resolved = resolution.read(surface, "CUDA", passed)
    assert not resolved.error, resolved.error
    given = resolution.parse_passed(passed)
    assert resolution.field_value(surface, resolved, "vllm.config.KernelConfig", "autotune", given)[0] is autotune
    assert resolution.field_value(surface, resolved, "vllm.config.CacheConfig", "offloading", given)[0] is offloading
