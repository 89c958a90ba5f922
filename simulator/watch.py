"""Watching a project for saves: which file changes should trigger a reload.

``ProjectFilter`` is a ``watchfiles`` filter that lets through only the files a project is
made of — its conf files, the notebooks its plan uses, and the ``.py`` files in its folder
(a notebook may import a helper module), and ``.env`` (secrets' values) — and drops everything else: Jupyter's checkpoints
and temp copies, ``__pycache__``, ``.git``, hidden files, editor swap and backup files, and
any path the server itself writes.

``watch_project`` / ``awatch_project`` yield one set of changed project files per save.
Changes are grouped by watchfiles' debounce, and files that are filtered out never produce a
batch, so Jupyter's save (a hidden ``.~name`` copy or a temp file renamed over the notebook,
then ``.ipynb_checkpoints/name-checkpoint.ipynb``) gives exactly one batch. Both stop
promptly when their stop event is set::

    stop = threading.Event()
    for changed in watch_project(ProjectFilter(root, conf_files=["peach.yaml"]), stop_event=stop):
        print(sorted(changed))  # {'notebooks/Endpoints.ipynb'}

Nothing here prints.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncGenerator, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from watchfiles import Change, DefaultFilter, awatch, watch

from peach_cli.project.filenames import CONF_FILES, CONF_FOLDER, DOTENV, YAML_SUFFIXES

if TYPE_CHECKING:
    from peach_cli.runtime.plan import ProjectPlan

DEBOUNCE_MS = 1_600
"""The longest a burst of changes is grouped before it is reported (watchfiles' default)."""
STEP_MS = 5
"""How often the watcher looks for changes; a burst is reported once a look finds no new
change, so a save is seen 5 to 10 ms after it is written. This is most of a reload's own
latency: at 30 ms it was 51 ms of a trivial save's 58 ms (``benchmarks/reload.py``).
A save split over more than one step is still one reload: a half-written file is not
reported, and the rest supersedes it (``simulator.reload``)."""


class ProjectFilter(DefaultFilter):
    """Lets through the files a project is made of, relative to the project ``root``.

    A change passes when it is not ignored by ``watchfiles.DefaultFilter`` nor by the extra
    rules below, and it is one of: a conf file (``peach.yaml``, ``peach.yml``, a YAML file in
    ``peach.conf/``, or the single conf file a project was given as), a notebook the plan uses
    (any notebook while the project has errors, since a fix may name a new one), or a ``.py``
    file.

    >>> f = ProjectFilter("/p", notebooks=["nb/A.ipynb"])
    >>> f(Change.modified, "/p/nb/A.ipynb"), f(Change.modified, "/p/nb/.ipynb_checkpoints/A-checkpoint.ipynb")
    (True, False)
    """

    ignore_dirs = (*DefaultFilter.ignore_dirs, ".ipynb_checkpoints", ".ruff_cache", "site-packages")
    ignore_entity_patterns = (
        *DefaultFilter.ignore_entity_patterns,
        r"^\.",  # hidden files, Jupyter's `.~name` copies, emacs' `.#name` locks
        r"^#.*#$",  # emacs auto-save
        r"\.(tmp|temp|bak|orig|rej|swp|swx|crswap)$",
        r"^4913$",  # vim's write test
        r"\.~\d*~$",
    )

    def __init__(
        self,
        root: Path | str,
        *,
        conf_files: Iterable[str] = (),
        notebooks: Iterable[str] = (),
        single_file: bool = False,
        ignore_paths: Iterable[Path | str] = (),
    ) -> None:
        """
        Args:
            root: the project folder; paths outside it never pass.
            conf_files: the conf files, relative posix paths.
            notebooks: the notebooks the plan uses, relative posix paths.
            single_file: the project was given as one YAML file: no other conf file counts.
            ignore_paths: files or folders the server writes (logs, caches) to never report.
        """
        self.root = Path(os.path.abspath(root))
        self.single_file = single_file
        self.conf_files: frozenset[str] = frozenset()
        self.notebooks: frozenset[str] | None = None
        super().__init__(ignore_paths=[os.path.abspath(p) for p in ignore_paths])
        self.use(conf_files=conf_files, notebooks=notebooks)

    def use(
        self, *, conf_files: Iterable[str] | None = None, notebooks: Iterable[str] | None = None
    ) -> None:
        """Replace the conf files and notebooks that count (``notebooks=None``: any notebook)."""
        if conf_files is not None:
            self.conf_files = frozenset(conf_files)
        self.notebooks = None if notebooks is None else frozenset(notebooks)

    def use_plan(self, plan: ProjectPlan | None) -> None:
        """Follow a plan's files; ``None`` (the project has errors) lets any notebook through."""
        if plan is None:
            self.notebooks = None
            return
        files = set(plan.watched_files)
        for component in plan.components():
            files.add(component.notebook)
        confs = {f for f in files if PurePosixPath(f).suffix in YAML_SUFFIXES}
        self.use(conf_files=confs | set(self.conf_files), notebooks=files - confs)

    def relative(self, path: str) -> str | None:
        """``path`` relative to the root as a posix string, or None when it is outside."""
        relative = os.path.relpath(os.path.abspath(path), self.root)
        if (
            relative == os.curdir
            or relative.startswith(os.pardir + os.sep)
            or relative == os.pardir
        ):
            return None
        return PurePosixPath(*Path(relative).parts).as_posix()

    def __call__(self, change: Change, path: str) -> bool:
        relative = self.relative(path)
        if relative == DOTENV:  # hidden, but it holds the secrets' values (SPEC §10)
            return True
        if not super().__call__(change, path):
            return False
        return relative is not None and self.is_project_file(relative)

    def is_project_file(self, relative: str) -> bool:
        """Whether a root-relative posix path is part of the project (ignore rules aside)."""
        parts = PurePosixPath(relative).parts
        if any(part.startswith(".") for part in parts):
            return False
        if relative in self.conf_files:
            return True
        suffix = PurePosixPath(relative).suffix
        if suffix == ".py":
            return True
        if suffix == ".ipynb":
            return self.notebooks is None or relative in self.notebooks
        if self.single_file or suffix not in YAML_SUFFIXES:
            return False
        return (len(parts) == 1 and parts[0] in CONF_FILES) or (
            len(parts) == 2 and parts[0] == CONF_FOLDER
        )


def _relative_changes(project_filter: ProjectFilter, changes: set[tuple[Change, str]]) -> set[str]:
    return {r for _, path in changes if (r := project_filter.relative(path)) is not None}


def watch_project(
    project_filter: ProjectFilter,
    *,
    stop_event: threading.Event,
    debounce_ms: int = DEBOUNCE_MS,
    step_ms: int = STEP_MS,
    **options: Any,
) -> Iterator[set[str]]:
    """Yield the set of changed project files (root-relative posix paths) per save.

    Blocks between saves; returns within ``step_ms`` of ``stop_event`` being set. The filter
    may be updated between batches (``use_plan``) and applies to the next one.
    """
    for changes in watch(
        project_filter.root,
        watch_filter=project_filter,
        debounce=debounce_ms,
        step=step_ms,
        stop_event=stop_event,
        raise_interrupt=False,
        **options,
    ):
        yield _relative_changes(project_filter, changes)


async def awatch_project(
    project_filter: ProjectFilter,
    *,
    stop_event: Any = None,
    debounce_ms: int = DEBOUNCE_MS,
    step_ms: int = STEP_MS,
    **options: Any,
) -> AsyncGenerator[set[str], None]:
    """The asynchronous ``watch_project``: stops when ``stop_event`` (an asyncio or anyio
    event) is set or when the consuming task is cancelled."""
    async for changes in awatch(
        project_filter.root,
        watch_filter=project_filter,
        debounce=debounce_ms,
        step=step_ms,
        stop_event=stop_event,
        **options,
    ):
        yield _relative_changes(project_filter, changes)
