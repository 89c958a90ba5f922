"""The names of a project's files: its conf files, its ``.env``, its case files.

Every module that looks for one of them takes its name from here (the loader, the reloader's
watch, ``peach init``, ``peach test`` and its pytest plugin, the shell completion), so they
cannot disagree. Standard library only and cheap to import: a <TAB> and the pytest plugin
import it::

    conf_files(Path("examples/quickstart"))   # [PosixPath('examples/quickstart/peach.yaml')]
    is_project_folder(Path("examples/quickstart"))                          # True
    "tests/greet.peach-test.yaml".endswith(CASE_SUFFIX)                      # True
"""

from __future__ import annotations

from pathlib import Path

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


def is_project_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a conf file or a ``peach.conf`` (a project's root)."""
    return any((folder / name).exists() for name in (*CONF_FILES, CONF_FOLDER))
