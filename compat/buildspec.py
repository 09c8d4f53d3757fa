"""What ``--vllm`` names, parsed once, with the same meaning in every tool (``compat.audit``, ``compat.matrix``,
``compat.fix``, the pytest plugin's ``--vllm-compat``):

- ``installed``: the vLLM installed in this Python, imported (names and signatures as ``inspect`` sees them);
- ``latest``: the newest release;
- a version (``0.12.0``): that release;
- a specifier (``>=0.12,<0.17``, or ``every:>=0.12,<0.17``): EVERY release matching it;
- ``newest:>=0.12,<0.17``: the newest release matching it, one build;
- a wheel, sdist or source directory (a checkout of some vLLM commit);
- a URL of a wheel or sdist (``https://...``, ``file://...``);
- ``git+URL@REF``: the files of one commit.

A tool that reads one build (``compat.audit``) refuses a spec that names several, rather than picking one.
No spec is not ``installed``: given no ``--vllm`` where vLLM is installed, ``compat.audit`` reads the installed
files statically, as it reads any source tree, without importing them (``compat.vllm.builds.open_build``); both
are the installed build, on which the runtime confirmation runs its engines.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from compat.errors import CompatError

EVERY, NEWEST = "every:", "newest:"
ARCHIVES = (".whl", ".tar.gz", ".zip", ".tgz")
FORMS = ("installed, latest, a version, a specifier (every matching release), every:SPEC, newest:SPEC, a wheel/sdist/"
         "source directory, a URL of a wheel or sdist, git+URL@REF")


class Form(str, Enum):
    INSTALLED = "installed"
    LATEST = "latest"
    VERSION = "version"
    RANGE = "range"
    PATH = "path"
    URL = "url"
    GIT = "git"


class Pick(str, Enum):
    """Which releases a specifier names."""

    EVERY = "every"
    NEWEST = "newest"


class BadBuildSpec(CompatError):
    """``--vllm`` names nothing this tool can read: one line, exit 2."""


@dataclass(frozen=True)
class BuildSpec:
    text: str
    """As the user wrote it."""
    form: Form
    value: str
    """The version, the specifier, the path, the URL (without ``git+`` and ``@REF``), or ``installed``/``latest``."""
    pick: Pick = Pick.NEWEST
    """For a specifier: every matching release or the newest; every other form names one build."""
    ref: str | None = None
    """For ``git+URL@REF``: the ref."""

    @property
    def releases(self) -> bool:
        """Whether the package index resolves it (latest, a version, a specifier)."""
        return self.form in (Form.LATEST, Form.VERSION, Form.RANGE)

    @property
    def many(self) -> bool:
        """Whether it may name more than one build."""
        return self.form is Form.RANGE and self.pick is Pick.EVERY

    @property
    def specifier(self) -> SpecifierSet | None:
        """The versions it admits (releases only): None for latest, ``==V`` for a version."""
        if self.form is Form.VERSION:
            return SpecifierSet(f"=={self.value}")
        if self.form is Form.RANGE:
            return SpecifierSet(self.value)
        return None

    def describe(self) -> str:
        """What it means, in words: ``every release matching >=0.12,<0.17``."""
        return {Form.INSTALLED: "the installed vLLM", Form.LATEST: "the newest release",
                Form.VERSION: f"release {self.value}",
                Form.RANGE: f"{'every release' if self.many else 'the newest release'}"
                            + (f" matching {self.value}" if self.value else ""),
                Form.PATH: f"the build at {self.value}", Form.URL: f"the build at {self.value}",
                Form.GIT: f"commit {self.ref} of {self.value}"}[self.form]


def _is_url(text: str) -> bool:
    return urllib.parse.urlparse(text).scheme in ("http", "https", "file")


def _looks_like_path(text: str) -> bool:
    return ("/" in text or "\\" in text or text.startswith((".", "~")) or text.endswith(ARCHIVES)
            or Path(text).exists())


def parse(text: str, flag: str = "--vllm") -> BuildSpec:
    """``text`` as a build spec; ``BadBuildSpec`` (one line naming every form) when it is none of them."""
    raw = str(text)
    spec = raw.strip()
    if not spec:
        raise BadBuildSpec(f"{flag} is empty: give {FORMS}")
    for prefix, pick in ((EVERY, Pick.EVERY), (NEWEST, Pick.NEWEST)):
        if spec.startswith(prefix):
            rest = spec[len(prefix):].strip()
            if rest == "latest":
                rest = ""
            if not rest and pick is Pick.NEWEST:
                return BuildSpec(raw, Form.LATEST, "latest")
            try:
                SpecifierSet(rest)
            except InvalidSpecifier:
                try:
                    Version(rest)
                except InvalidVersion:
                    raise BadBuildSpec(f"{flag} {raw!r}: {prefix} takes a specifier such as >=0.12,<0.17, not "
                                       f"{rest!r}") from None
                return BuildSpec(raw, Form.VERSION, rest)
            return BuildSpec(raw, Form.RANGE, rest, pick)
    if spec == "installed":
        return BuildSpec(raw, Form.INSTALLED, spec)
    if spec == "latest":
        return BuildSpec(raw, Form.LATEST, spec)
    if spec.startswith("git+"):
        url, _, ref = spec[4:].rpartition("@")
        if not url or not ref or not _is_url(url) and "://" not in url and not url.startswith(("git@", "/")):
            raise BadBuildSpec(f"{flag} {raw!r}: a git build is git+URL@REF (git+https://github.com/vllm-project/"
                               "vllm@v0.12.0)")
        return BuildSpec(raw, Form.GIT, url, ref=ref)
    if _is_url(spec):
        return BuildSpec(raw, Form.URL, spec)
    if _looks_like_path(spec):
        if not Path(spec).expanduser().exists():
            raise BadBuildSpec(f"{flag} {raw!r}: no such file or directory")
        return BuildSpec(raw, Form.PATH, str(Path(spec).expanduser().resolve()))
    if _version(spec):
        return BuildSpec(raw, Form.VERSION, spec)
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        raise BadBuildSpec(f"{flag} {raw!r}: not a version, specifier, path, URL or git+URL@REF (the forms: "
                           f"{FORMS})") from None
    return BuildSpec(raw, Form.RANGE, spec, Pick.EVERY)


def _version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True
