"""The README and docs/: short, every link leading somewhere in the repository, no path of one machine, and every
sample output what the tools print today (scripts/docs_samples.py regenerates them; these tests re-run them)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MACHINE_PATH = re.compile(r"(?<![\w.~])(/(?:work|tmp|root|home|mnt|Users)/[\w.-]+|\.\./shared\b)")


def _samples_module():
    spec = importlib.util.spec_from_file_location("docs_samples", ROOT / "scripts" / "docs_samples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_samples"] = module
    spec.loader.exec_module(module)
    return module


samples = _samples_module()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens and underscores dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)}


def test_the_readme_is_at_most_250_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines"


def test_every_docs_page_is_linked_from_the_readme():
    text = README.read_text(encoding="utf-8")
    linked = {ROOT / m for m in LINK.findall(text)}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_or_heading_of_the_repository(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if not path.exists() or ROOT not in path.parents and path != ROOT:
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{page.name}: links to nothing in the repository: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_path_of_one_machine(page):
    found = [(n, m.group(1)) for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             for m in MACHINE_PATH.finditer(line)]
    assert not found, f"{page.name}: paths that exist on one machine only (line, path): {found}"


def test_the_machine_path_rule_can_fail():
    assert MACHINE_PATH.search("report: /work/scratch/final/report.json")
    assert MACHINE_PATH.search("as ../shared/docs/GPU.md says")
    assert not MACHINE_PATH.search("cached in ~/.cache/compat; python -m compat.audit --vllm ~/src/vllm")


def test_every_sample_block_is_a_registered_sample_and_every_sample_is_shown():
    shown = samples.where_shown()
    assert set(shown) <= set(samples.BY_NAME), f"markers naming no sample: {set(shown) - set(samples.BY_NAME)}"
    assert set(samples.BY_NAME) <= set(shown), f"samples shown nowhere: {set(samples.BY_NAME) - set(shown)}"


def test_each_sample_block_starts_with_its_command_and_holds_its_output():
    for name, pages in samples.where_shown().items():
        for page in pages:
            block = samples.current_block(page, name)
            assert block and block[0] == f"$ {samples.BY_NAME[name].command}", (page.name, name, block[:1])
            assert len(block) > 1, f"{page.name}: sample {name} holds no output (run scripts/docs_samples.py)"


def test_check_mode_masks_digits_and_size_units_only(tmp_path):
    assert samples.masked(["took 2.5 s, 17 builds"]) == samples.masked(["took 31.0 s, 9 builds"])
    assert samples.masked(["17 broken"]) != samples.masked(["17 changed"])
    assert samples.masked(["cache 3.5 MiB (3,634,123 bytes)"]) == samples.masked(["cache 812.0 KiB (831,488 bytes)"])
    assert samples.masked(["0.30.0-0.33.0 (4 builds), 3"]) == ["N-N (N builds), N"]
    assert samples.masked(["cache 3.5 MiB used"]) != samples.masked(["cache 3.5 MiB kept"])


def test_a_cache_kept_elsewhere_is_shown_where_it_is_by_default(tmp_path, monkeypatch):
    """A run with ``COMPAT_CACHE_DIR`` set prints that directory; the samples show the default one."""
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    sample = samples.Sample("echo", f"python -c \"print('used in {tmp_path / 'cache'} (3 entries)')\"")
    assert samples.shown(sample, tmp_path, {})[1:] == ["used in ~/.cache/compat (3 entries)"]


def _check(*names: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_samples.py"), "--check", *names],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.network
def test_the_static_samples_are_what_the_tools_print_today():
    _check(*[s.name for s in samples.SAMPLES if set(s.needs) <= {"network"} and not s.name.startswith("fix")])


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.runtime
def test_the_fix_and_seed_gate_samples_are_what_the_tools_print_today():
    """The ``extract`` and ``gate`` samples are checked by tests/test_extract.py, on the extraction it runs."""
    _check("fix", "fix-full", "gate-seed")
