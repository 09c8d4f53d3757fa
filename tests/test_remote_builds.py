"""Builds named by URL, served on loopback (the real nightly index and GitHub are not reachable here): a
nightly-style wheel of a real vLLM release read with HTTP range requests (and whole, from a server that
ignores ranges), found through a PEP 503 index by unearth, and one commit of a git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile

import pytest

from compat import sources
from compat.audit.pipeline import AuditOptions
from compat.consumer.scan import scan_tree
from compat.matrix.run import Request, run
from compat.sources import remote
from tests.loopback import serve

VERSION = "0.12.0"
NIGHTLY = "0.12.1.dev7+g0123abc"
BLOB_MB = 96


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A nightly-style wheel (a real release's Python files beside compiled-code-sized binaries) and a PEP 503
    index page for it, on two loopback servers: one honours Range, one ignores it."""
    root = tmp_path_factory.mktemp("served")
    release = sources.tree_from_release("vllm", VERSION).root
    name = f"vllm-{NIGHTLY}-cp38-abi3-manylinux1_x86_64.whl"
    wheel = root / "wheels" / name
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        files = sorted((release / "vllm").rglob("*.py"))
        for i, path in enumerate(files):
            zf.write(path, path.relative_to(release).as_posix())
            if i % (len(files) // 4) == 0:  # compiled kernels, incompressible, between the Python files
                zf.writestr(zipfile.ZipInfo(f"vllm/_C{i}.abi3.so"), os.urandom(BLOB_MB // 5 * 2**20))
        zf.writestr(f"vllm-{NIGHTLY}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {NIGHTLY}\n")
    simple = root / "simple" / "vllm"
    simple.mkdir(parents=True)
    (simple / "index.html").write_text(f'<html><body><a href="../../wheels/{name}">{name}</a></body></html>')
    with_ranges, url = serve(root, True)
    without, plain = serve(root, False)
    yield {"wheel": wheel, "url": f"{url}/wheels/{name}", "plain": f"{plain}/wheels/{name}", "index": f"{url}/simple"}
    with_ranges.shutdown()
    without.shutdown()


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.slow
def test_a_nightly_wheel_is_read_with_a_tenth_of_its_bytes(served, cache):
    transfer = remote.Transfer()
    tree = remote.wheel_sources(served["url"], transfer)
    release = sources.tree_from_release("vllm", VERSION).root
    expected = sorted(p.relative_to(release).as_posix() for p in (release / "vllm").rglob("*.py"))
    assert sorted(p.relative_to(tree).as_posix() for p in (tree / "vllm").rglob("*.py")) == expected
    assert (tree / "vllm" / "v1" / "request.py").read_bytes() == (release / "vllm" / "v1" / "request.py").read_bytes()
    assert transfer.ranged and transfer.size == served["wheel"].stat().st_size
    assert transfer.fetched < transfer.size / 10, (transfer.fetched, transfer.size)


@pytest.mark.slow
def test_a_server_that_ignores_ranges_gives_the_whole_wheel(served, cache):
    transfer = remote.Transfer()
    tree = remote.wheel_sources(served["plain"], transfer)
    assert not transfer.ranged and transfer.fetched == served["wheel"].stat().st_size
    assert (tree / "vllm" / "v1" / "request.py").is_file()


@pytest.mark.slow
def test_the_matrix_reads_a_wheel_url_and_an_index_like_the_release(served, cache):
    scan = scan_tree(sources.tree_from_release("speculators", "0.3.0"))
    options = AuditOptions(confirm="never")
    by_url = run(scan, Request([VERSION, served["url"]]), options, show_progress=False)
    release, nightly = (c.label for c in by_url.columns)
    assert by_url.columns[1].version == NIGHTLY and by_url.columns[1].error is None
    assert all(r.cells[release].status == r.cells[nightly].status for r in by_url.rows)
    found = run(scan, Request([">=0.12", ], index_urls=[served["index"]], pre=True), options, show_progress=False)
    assert [c.label for c in found.columns] == [NIGHTLY] and found.columns[0].error is None
    assert {r.key: r.cells[NIGHTLY].status for r in found.rows} == {r.key: r.cells[nightly].status for r in by_url.rows}


@pytest.mark.slow
def test_one_commit_of_a_git_repository(tmp_path, cache):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    shutil.copytree(sources.tree_from_release("vllm", VERSION).root / "vllm", repo / "vllm")
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", VERSION], check=True)
    subprocess.run(git + ["tag", "v" + VERSION], check=True)
    scan = scan_tree(sources.tree_from_release("speculators", "0.3.0"))
    matrix = run(scan, Request([VERSION, f"git+{repo.as_uri()}@v{VERSION}"]), AuditOptions(confirm="never"),
                 show_progress=False)
    release, commit = matrix.columns
    assert commit.label == f"repo@v{VERSION}" and commit.error is None, commit.error
    assert all(r.cells[release.label].status == r.cells[commit.label].status for r in matrix.rows)
    missing = run(scan, Request([f"git+{repo.as_uri()}@no-such-ref"]), AuditOptions(confirm="never"),
                  show_progress=False)
    assert "cannot read" in (missing.columns[0].error or "")


@pytest.mark.slow
@pytest.mark.network
def test_a_release_with_only_compiled_wheels_is_read_with_range_requests(cache):
    """vLLM 0.15.0 has no sdist, only wheels of about 460 MB: its Python files are all that is fetched."""
    tree = sources.tree_from_release("vllm", "0.15.0")
    assert "range requests" in tree.origin and (tree.root / "vllm" / "v1" / "request.py").is_file()
    cached = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    assert cached < 100 * 2**20, cached


def test_a_release_is_read_from_what_pip_installs(monkeypatch):
    """A pure-Python wheel, else a compiled wheel (Linux x86-64 first), and the sdist only without wheels."""
    from packaging.version import Version

    from compat.sources import index

    def listing(*names):
        return [index._to_index_file({"filename": n, "url": f"https://x/{n}"}) for n in names]

    compiled = ("vllm-1.0-cp38-abi3-manylinux_2_28_aarch64.whl", "vllm-1.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                "vllm-1.0-cp38-abi3-macosx_11_0_arm64.whl")
    cases = [((*compiled, "vllm-1.0.tar.gz"), "vllm-1.0-cp38-abi3-manylinux_2_28_x86_64.whl"),
             (("vllm-1.0-cp311-cp311-macosx_11_0_arm64.whl", "vllm-1.0.tar.gz"),
              "vllm-1.0-cp311-cp311-macosx_11_0_arm64.whl"),
             (("vllm-1.0.tar.gz", "vllm-1.0-py3-none-any.whl", compiled[1]), "vllm-1.0-py3-none-any.whl"),
             (("vllm-1.0.zip", "vllm-1.0.tar.gz"), "vllm-1.0.tar.gz")]
    for names, expected in cases:
        monkeypatch.setattr(index, "list_files", lambda project, names=names: listing(*names))
        assert index.choose_file("vllm", Version("1.0")).filename == expected, names
