"""Which files a gate run checks: data files under the given paths, in natural order, their common root, and
speculators' ``data_config.json`` when one is there."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from compat.errors import CompatError
from compat.gate.read.files import DATA_SUFFIXES
from compat.gate.read.metadata import system_path
from compat.gate.read.source import exists, is_url, listing

DATA_CONFIG = "data_config.json"
_DIGITS = re.compile(r"(\d+)")
_SUFFIXES = tuple(DATA_SUFFIXES)


def natural_key(path: str) -> tuple:
    """``data_2.pt`` before ``data_10.pt`` (directories compare as text, names by their numbers)."""
    head, _, name = path.rpartition(os.sep)
    parts = _DIGITS.split(name)  # text, digits, text, ...: the digits at odd places
    parts[1::2] = map(int, parts[1::2])
    return head, tuple(parts)


def _outside(path: str, roots: tuple[str, ...], follow: bool) -> str | None:
    """Why the link ``path`` is not followed: it resolves into ``/proc``, ``/sys`` or ``/dev`` (never), or, unless
    ``follow``, out of every root given (``roots``: their real paths); None where it may be."""
    real = os.path.realpath(path)
    if system_path(real):
        return f"a link to {real}, a system file: never read"
    if not follow and not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
        return f"a link to {real}, outside the dataset's root: not read (--follow-links reads it)"
    return None


def _walk(top: str, files: list[str], loops: list[str], regular: set[str], refused: dict[str, str],
          roots: tuple[str, ...] = (), follow: bool = False, configs: dict[str, Path | str] | None = None) -> None:
    """Data files under ``top``, depth first; a directory reached twice (a symlink loop, or two links to one
    directory) is walked once and the later link listed in ``loops``. Those the listing itself says are regular
    files (no link, no FIFO or device: the directory entry's type, read without a system call) go in ``regular``
    too, so reading them needs no ``stat`` first. A link (to a file or a directory) that leads out of ``roots``
    is not followed unless ``follow``, one into ``/proc``, ``/sys`` or ``/dev`` never: each goes in ``refused``
    with the reason. Each ``data_config.json`` goes in ``configs`` by its directory (whatever kind of file it is:
    reading it refuses what is no file)."""
    # os.scandir, not os.walk + pathlib: listing 100k files must cost less than checking them. A stack, not
    # recursion: a tree nested thousands deep is not a reason to crash.
    seen: set[tuple[int, int]] = set()
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            info = os.stat(directory)
        except OSError:
            loops.append(directory)  # a link that loops onto itself, or vanished since it was listed
            continue
        if (info.st_dev, info.st_ino) in seen:
            loops.append(directory)
            continue
        seen.add((info.st_dev, info.st_ino))
        subdirs = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue  # dot-files are other tools' in-progress writes (atomic renames), not data
                if entry.is_symlink() and (entry.name.endswith(_SUFFIXES) or entry.name == DATA_CONFIG or _is_dir(
                        entry)) and (why := _outside(entry.path, roots, follow)):
                    refused[entry.path] = why
                    continue
                if entry.name == DATA_CONFIG and configs is not None:
                    configs.setdefault(directory, Path(entry.path))
                    continue
                if _is_dir(entry):
                    subdirs.append(entry.path)
                elif entry.name.endswith(_SUFFIXES):  # the name's suffix: it does not begin with "."
                    files.append(entry.path)  # whatever it is: reading says when it is not a regular file
                    if _is_regular(entry):
                        regular.add(entry.path)
        stack.extend(sorted(subdirs, reverse=True))


def _is_regular(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False  # a looping link: not a directory to walk; reading it reports the loop


@dataclass(frozen=True)
class Discovered:
    files: list[str]
    """Data files (by suffix, whatever kind of file they are), in natural order."""
    root: Path | str
    """A directory, or the URL all URLs given lie under."""
    data_config: Path | str | None
    """The ``data_config.json`` at the top (or beside the first file): the one whose expectations are shown."""
    loops: list[str] = field(default_factory=list)
    """Directory links that lead back to a directory already walked: not followed, each reported."""
    regular: frozenset[str] = frozenset()
    """Files the directory listing says are regular files (not links): read without a ``stat`` first."""
    refused: dict[str, str] = field(default_factory=dict)
    """Links not followed (out of the roots given, or into ``/proc``, ``/sys``, ``/dev``), each with why."""
    configs: dict[str, Path | str] = field(default_factory=dict)
    """Every ``data_config.json`` found, by its directory: each governs the files under it (the nearest wins)."""
    stamps: dict[str, tuple[int, int, str | None]] = field(default_factory=dict)
    """Files named by URL, each with what its listing says makes it unchanged (``source.listed_stamp``: size and
    ETag, or size and modification time): what ``--state`` records them by, with no request of its own."""


def discover(paths: tuple[Path | str, ...], follow_links: bool = False) -> Discovered:
    """Data files under ``paths`` (natural order), their common root, and a data_config.json if one is there.
    Paths are local, or all URLs (``compat.gate.read.source``): then so are the files, root and config."""
    urls = [p for p in paths if is_url(p)]
    if urls:
        if len(urls) < len(paths):
            raise CompatError("give local paths or URLs, not both: "
                              f"{', '.join(map(str, (p for p in paths if not is_url(p))))}")
        return _discover_urls(urls)
    local = [Path(p) for p in paths]  # no URL among them: each is a Path already
    files: list[str] = []
    loops: list[str] = []
    regular: set[str] = set()
    configs: list[Path] = []
    refused: dict[str, str] = {}
    found: dict[str, Path | str] = {}
    roots = tuple(os.path.realpath(p if _is_dir_path(p) else p.parent) for p in local)
    for path in local:
        if not os.path.lexists(path):
            raise CompatError(f"{path}: no such file or directory")
        if not _is_dir_path(path):
            if path.name == DATA_CONFIG:
                configs.append(path)
                found[os.path.dirname(os.path.abspath(path))] = path
            else:
                files.append(os.path.abspath(path))  # named explicitly: read whatever its suffix
            continue
        config = path / DATA_CONFIG
        if os.path.lexists(config) and not (os.path.islink(config) and _outside(str(config), roots, follow_links)):
            configs.append(config)
            found[os.path.abspath(path)] = config  # as given: reports name it so
        _walk(os.path.abspath(path), files, loops, regular, refused, roots, follow_links, found)
    if not files and not loops and not refused:
        shown = ", ".join(map(str, paths))
        raise CompatError(f"no hidden-state files ({', '.join(sorted(DATA_SUFFIXES))}) under {shown}")
    files = sorted(set(files), key=natural_key)
    root = Path(os.path.commonpath([os.path.abspath(p if _is_dir_path(p) else p.parent) for p in local]))
    beside = Path(os.path.dirname(files[0])) / DATA_CONFIG if files else None
    if not configs and beside is not None and os.path.lexists(beside):
        if os.path.islink(beside) and (why := _outside(str(beside), roots, follow_links)):
            refused[str(beside)] = why
        else:
            configs.append(beside)
            found.setdefault(os.path.dirname(os.path.abspath(beside)), beside)
    return Discovered(files, root, configs[0] if configs else None, sorted(set(loops), key=natural_key),
                      frozenset(regular), refused=refused, configs=found)


def _is_dir_path(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _discover_urls(urls: list[str]) -> Discovered:
    """``discover`` over URLs: each one file, or every file under it (one listing of all its keys), by the same
    rules as a local walk (dot-files and dot-directories skipped, the suffixes, natural order); each file's URL
    is the given one joined with its path below it, so reports name files relative to it as for local paths."""
    files: list[str] = []
    configs: list[str] = []
    listed: set[str] = set()
    governs: dict[str, Path | str] = {}
    stamps: dict[str, tuple[int, int, str | None]] = {}
    parents = []
    for url in urls:
        single, found = listing(url)
        if single:
            parents.append(url.rpartition("/")[0])
            (configs if url.rpartition("/")[2] == DATA_CONFIG else files).append(url)
            if url.rpartition("/")[2] == DATA_CONFIG:
                governs[url.rpartition("/")[0]] = url
            if (stamp := found[""]) is not None:
                stamps[url] = stamp
            continue
        top = url.rstrip("/")
        parents.append(top)
        for rel in found:
            parts = rel.split("/")
            if any(part.startswith(".") for part in parts):
                continue
            listed.add(f"{top}/{rel}")
            if parts[-1] == DATA_CONFIG:
                governs[f"{top}/{rel}".rpartition("/")[0]] = f"{top}/{rel}"
                if rel == DATA_CONFIG:
                    configs.append(f"{top}/{rel}")
            elif parts[-1].endswith(_SUFFIXES):
                files.append(f"{top}/{rel}")
                if (stamp := found[rel]) is not None:
                    stamps[f"{top}/{rel}"] = stamp
    if not files:
        raise CompatError(f"no hidden-state files ({', '.join(sorted(DATA_SUFFIXES))}) under {', '.join(urls)}")
    files = sorted(set(files), key=natural_key)
    if not configs:
        beside = f"{files[0].rpartition('/')[0]}/{DATA_CONFIG}"
        if beside in listed or (not listed and exists(beside)):
            configs.append(beside)
            governs.setdefault(beside.rpartition("/")[0], beside)
    return Discovered(files, _common(parents), configs[0] if configs else None, stamps=stamps, configs=governs)


def _common(urls: list[str]) -> str:
    """The longest URL every one of ``urls`` lies under (whole path segments)."""
    parts = [u.split("/") for u in urls]
    common = []
    for segments in zip(*parts):
        if len(set(segments)) > 1:
            break
        common.append(segments[0])
    return "/".join(common)
