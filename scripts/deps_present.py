"""Exit 0 when every requirement of pyproject.toml (with the ``test`` extra) is installed in
this Python at a version it allows, else 1: ``scripts/test --quick`` then skips pip."""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement

project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
name = project["project"]["name"]
extras = project["project"]["optional-dependencies"]
wanted = [*project["project"]["dependencies"], name]
seen: set[str] = set()
while wanted:
    requirement = Requirement(wanted.pop())
    if requirement.name == name:  # the project itself, with extras: expand them
        for extra in {"test", *requirement.extras} - seen:
            seen.add(extra)
            wanted += extras.get(extra, [])
        continue
    if requirement.marker is not None and not requirement.marker.evaluate():
        continue
    try:
        installed = version(requirement.name)
    except PackageNotFoundError:
        sys.exit(f"{requirement.name} is not installed")
    if installed not in requirement.specifier:
        sys.exit(f"{requirement.name} {installed} does not satisfy {requirement}")
try:
    version(name)
except PackageNotFoundError:
    sys.exit(f"{name} is not installed")
