"""Which top-level modules the distributions installed in a built env provide.

    installed_modules(site_packages)   # {'six': {'six'}, 'pyyaml': {'yaml', '_yaml'}, ...}

Read from each ``*.dist-info``: ``top_level.txt`` when there is one, else the first path
component of every file in ``RECORD`` (``six.py`` → ``six``, ``yaml/__init__.py`` →
``yaml``). Nothing is imported. What a folder holds is read once per change of the folder
(its mtime): `peach dev` re-validates on every save, and an env never changes once built.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

from peach_cli.envs.spec import normalize_name

_SKIPPED = {"__pycache__", "..", "."}


def _module_of(first: str) -> str | None:
    if first in _SKIPPED or first.endswith((".dist-info", ".data", ".pth", ".egg-info")):
        return None
    if first.endswith(".py"):
        return first[:-3]
    if first.endswith((".so", ".pyd")):
        return first.split(".", 1)[0]
    if "." in first:
        return None
    return first


def _distribution_name(info: Path) -> str:
    metadata = info / "METADATA"
    try:
        with metadata.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Name:"):
                    return normalize_name(line[5:].strip())
                if not line.strip():
                    break
    except OSError:
        pass
    return normalize_name(info.name.removesuffix(".dist-info").rsplit("-", 1)[0])


def installed_modules(site_packages: Path) -> dict[str, set[str]]:
    """Distribution name (normalised) → the top-level modules its files provide (shared
    between calls: read it, do not change it)."""
    try:
        stamp = site_packages.stat().st_mtime_ns
    except OSError:
        return {}
    return _provided(site_packages, stamp)


@lru_cache(maxsize=32)
def _provided(site_packages: Path, stamp: int) -> dict[str, set[str]]:
    """What ``site_packages`` provides while its mtime is ``stamp`` (read once per change:
    `peach dev` re-validates on every save)."""
    return _read_modules(site_packages)


def _read_modules(site_packages: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    try:
        infos = sorted(site_packages.glob("*.dist-info"))
    except OSError:
        return found
    for info in infos:
        modules: set[str] = set()
        top_level = info / "top_level.txt"
        try:
            if top_level.is_file():
                modules = {line.strip() for line in top_level.read_text().splitlines()}
            else:
                with (info / "RECORD").open(newline="", encoding="utf-8") as handle:
                    for row in csv.reader(handle):
                        if row:
                            module = _module_of(row[0].replace("\\", "/").split("/")[0])
                            if module:
                                modules.add(module)
        except OSError:
            continue
        found[_distribution_name(info)] = {m for m in modules if m and m.isidentifier()}
    return found
