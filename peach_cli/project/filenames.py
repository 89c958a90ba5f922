"""The names of a project's files: its conf files, its ``.env``, its case files.

Every module that looks for one of them takes its name from here (the loader, the reloader's
watch, ``peach init``, ``peach test`` and its pytest plugin, the shell completion), so they
cannot disagree. Standard library only and cheap to import: a <TAB> and the pytest plugin
import it::

    conf_files(Path("examples/quickstart"))   # [PosixPath('examples/quickstart/peach.yaml')]
    find_conf_files(Path("examples/quickstart"))   # (root, files); UsageError if none
    is_project_folder(Path("examples/quickstart"))                          # True
    "tests/greet.peach-test.yaml".endswith(CASE_SUFFIX)                      # True
"""

from __future__ import annotations

from pathlib import Path

from peach_cli.errors import UsageError

CONF_FILES = ("peach.yaml", "peach.yml")
"""The project's conf files in its folder, merged in this order."""
CONF_FOLDER = "peach.conf"
"""A folder whose YAML files are merged after them, by name (or a single conf file)."""
YAML_SUFFIXES = (".yaml", ".yml")
"""What a conf file's name ends with, in ``peach.conf/``."""
DOTENV = ".env"
"""The secrets' values, besides peach's environment (SPEC §10)."""
CASE_SUFFIX = ".peach-test.yaml"
"""What a case file's name ends with (``peach test``, the pytest plugin)."""


def conf_files(folder: Path) -> list[Path]:
    """The conf files of the project folder ``folder``, in merge order ([] when none)."""
    files = [folder / name for name in CONF_FILES if (folder / name).is_file()]
    conf_folder = folder / CONF_FOLDER
    if conf_folder.is_dir():
        files += sorted(
            (p for p in conf_folder.iterdir() if p.suffix in YAML_SUFFIXES and p.is_file()),
            key=lambda p: p.name,
        )
    elif conf_folder.is_file():
        files.append(conf_folder)
    return files


def find_conf_files(path: Path) -> tuple[Path, list[Path]]:
    """The project root and its conf files in merge order; ``UsageError`` if there are none.

    A single YAML file is a project of one file, rooted at its folder (or, for a file of
    ``peach.conf/``, at the folder holding ``peach.conf/``, where its notebook paths start).
    """
    if not path.exists():
        raise UsageError(
            f"{path} does not exist", hint="give the project folder, or run peach inside it"
        )
    if path.is_file():  # one file of peach.conf/ belongs to the folder holding peach.conf/
        return (path.parent.parent if path.parent.name == CONF_FOLDER else path.parent), [path]
    if not path.is_dir():
        raise UsageError(f"{path} is neither a folder nor a file")
    files = conf_files(path)
    if not files:
        raise UsageError(
            f"{path} is not a peach project: it has no peach.yaml and no peach.conf/ folder",
            hint="create one here with `peach init`, or give the project folder",
        )
    return path, files


def is_project_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a conf file or a ``peach.conf`` (a project's root)."""
    return any((folder / name).exists() for name in (*CONF_FILES, CONF_FOLDER))
