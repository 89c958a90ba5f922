"""Which of a project's files `peach deploy` uploads to the cluster.

The project folder minus:

* what a ``.gitignore`` or ``.rayignore`` excludes (gitignore syntax, matched by
  ``pathspec``; a file in a sub-folder applies below that folder, as git does, and a later,
  deeper rule wins — ``!keep.csv`` re-includes);
* dot-files and dot-folders (``.env``, ``.aws/``, ``.git/``, ``.peach/``, …);
* virtual environments (a folder holding ``pyvenv.cfg`` or ``conda-meta/``) and caches
  (``__pycache__``, ``node_modules``, a folder tagged with ``CACHEDIR.TAG``, ``*.pyc``);
* notebooks and the conf files: a replica runs the code extracted into its spec.

A symlink whose real target leaves the project (``/etc/passwd``, ``~/.ssh/id_rsa``) is never
uploaded: ``Selection.skipped`` lists it, with why, for ``--dry-run``. Inside a git
repository, whatever git ignores for the project's files (every ``.gitignore`` from the
repository's root down, ``.git/info/exclude``, ``core.excludesFile``) is left out too, as
``git check-ignore`` decides (``peach_cli.deploy.gitignored``).

Nothing is read here but names and sizes; ``check_size`` refuses a selection over Ray's
package limit before any file is zipped or uploaded, naming the largest files.

Example::

    selection = select_files(Path("examples/quickstart"), excluded={"peach.yaml"})
    selection.total_bytes, [f.path for f in selection.files]
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.errors import DeployError
from peach_cli.wording import human_size

if TYPE_CHECKING:
    import pathspec

IGNORE_FILES = (".gitignore", ".rayignore")
CACHE_DIRS = frozenset({"__pycache__", "node_modules", "site-packages"})
VENV_MARKERS = ("pyvenv.cfg", "conda-meta")
CACHE_TAG = "CACHEDIR.TAG"
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".ipynb")
MAX_UPLOAD_BYTES = 500 * 1024 * 1024
"""Ray's limit on one ``runtime_env`` package (``GCS_STORAGE_MAX_SIZE``)."""
LARGEST_SHOWN = 5


@dataclass(frozen=True)
class UploadFile:
    path: str
    """Relative posix path inside the project (and inside the zip)."""
    source: Path
    size: int


@dataclass(frozen=True)
class Selection:
    """The files to upload, in path order."""

    root: Path
    files: tuple[UploadFile, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    """``(path, why)`` of files never uploaded for safety (a link leaving the project)."""

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def largest(self, count: int = LARGEST_SHOWN) -> list[UploadFile]:
        return sorted(self.files, key=lambda f: (-f.size, f.path))[:count]


@dataclass
class _Rules:
    """The ignore files of one folder: patterns relative to ``base``."""

    base: str
    spec: pathspec.GitIgnoreSpec

    def decide(self, relative: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included (``!…``), None: no rule says."""
        inner = relative[len(self.base) + 1 :] if self.base else relative
        return self.spec.check_file(inner + "/" if is_dir else inner).include


def _folder_rules(folder: Path, base: str) -> _Rules | None:
    import pathspec

    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            lines += (folder / name).read_text(errors="replace").splitlines()
        except OSError:
            continue
    if not lines:
        return None
    return _Rules(base, pathspec.GitIgnoreSpec.from_lines(lines))


def _ignored(rules: list[_Rules], relative: str, is_dir: bool) -> bool:
    for item in reversed(rules):  # the deepest folder's rules win, as in git
        decision = item.decide(relative, is_dir)
        if decision is not None:
            return decision
    return False


def _is_venv_or_cache(folder: Path, name: str) -> bool:
    if name in CACHE_DIRS:
        return True
    return any((folder / marker).exists() for marker in (*VENV_MARKERS, CACHE_TAG))


def select_files(root: Path, excluded: Iterable[str] = ()) -> Selection:
    """The files of ``root`` that a deploy uploads (see the module docstring).

    ``excluded`` are relative posix paths left out too (the conf files).
    """
    from peach_cli.deploy.gitignored import GitIgnored

    root = Path(root)
    real_root = root.resolve()
    skip = set(excluded)
    files: list[UploadFile] = []
    skipped: list[tuple[str, str]] = []
    # (folder, its relative posix path, the rules in force there)
    pending: list[tuple[Path, str, list[_Rules]]] = [(root, "", [])]
    while pending:
        folder, relative, inherited = pending.pop()
        rules = list(inherited)
        own = _folder_rules(folder, relative)
        if own is not None:
            rules.append(own)
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError as error:
            raise DeployError(f"cannot read {folder}: {error.strerror}") from None
        for entry in entries:
            name = entry.name
            path = f"{relative}/{name}" if relative else name
            if name.startswith("."):
                continue
            if entry.is_symlink():
                why = _link_problem(Path(entry.path), real_root)
                if why is not None:
                    skipped.append((path, why))
                    continue
            if entry.is_dir(follow_symlinks=False):
                child = Path(entry.path)
                if _is_venv_or_cache(child, name) or _ignored(rules, path, True):
                    continue
                pending.append((child, path, rules))
                continue
            if not entry.is_file() or name.endswith(SKIPPED_SUFFIXES) or path in skip:
                continue
            if _ignored(rules, path, False):
                continue
            files.append(UploadFile(path, Path(entry.path), entry.stat().st_size))
    ignored = GitIgnored(root).of([f.path for f in files])
    files = [f for f in files if f.path not in ignored]
    files.sort(key=lambda f: f.path)
    return Selection(root, tuple(files), tuple(sorted(skipped)))


def _link_problem(path: Path, real_root: Path) -> str | None:
    """Why the link at ``path`` is not uploaded: its target leaves the project, or is a
    dot-file (``config.txt -> .env``) that would not be uploaded itself; else None."""
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # a loop of links
        return "a link that does not resolve"
    if not target.is_relative_to(real_root):
        return "a link to outside the project"
    if any(part.startswith(".") for part in target.relative_to(real_root).parts):
        return "a link to a dot-file"
    return None


def check_size(selection: Selection, limit: int = MAX_UPLOAD_BYTES) -> None:
    """Raise ``DeployError`` when the selection is over Ray's package limit."""
    total = selection.total_bytes
    if total <= limit:
        return
    largest = ", ".join(f"{f.path} ({human_size(f.size)})" for f in selection.largest())
    raise DeployError(
        f"the project's files come to {human_size(total)}, over Ray's limit of "
        f"{human_size(limit)} per package; the largest: {largest}",
        hint="add large data to .gitignore or .rayignore and load it in init "
        "(from object storage or a path on the cluster)",
    )


def read_files(selection: Selection) -> list[tuple[str, bytes]]:
    """The selected files as ``(posix path, bytes)``."""
    contents = []
    for item in selection.files:
        try:
            contents.append((item.path, item.source.read_bytes()))
        except OSError as error:
            raise DeployError(f"cannot read {item.source}: {error.strerror}") from None
    return contents
