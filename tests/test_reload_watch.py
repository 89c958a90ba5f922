"""The file watcher of `peach dev`: which saves trigger a reload, and how many times.

Real files in tmp_path, a real watchfiles watcher in a thread. A change that must be ignored
is always followed by a sentinel change that must be seen: the next batch must then hold the
sentinel alone, which proves the ignored change was seen and dropped (no sleeping to prove
an absence).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from watchfiles import Change

from simulator.watch import ProjectFilter, awatch_project, watch_project

DEADLINE_S = 10.0

pytestmark = pytest.mark.timeout(60)


def notebook_bytes(code: str) -> bytes:
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": code}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(notebook, indent=1).encode()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "peach.yaml").write_text("codops: demo\n")
    (tmp_path / "notebooks" / "Endpoints.ipynb").write_bytes(
        notebook_bytes("def f():\n    return 1\n")
    )
    (tmp_path / "notebooks" / "Scratch.ipynb").write_bytes(notebook_bytes("x = 1\n"))
    (tmp_path / "helpers.py").write_text("X = 1\n")
    # Folders exist before the watcher starts: a file written into a folder created a moment
    # earlier may precede the watch on that folder.
    (tmp_path / "peach.conf").mkdir()
    return tmp_path


class Batches:
    """A watcher running in a thread; ``next()`` waits (with a deadline) for its next batch."""

    def __init__(self, project_filter: ProjectFilter) -> None:
        self.filter = project_filter
        self.queue: queue.Queue[set[str]] = queue.Queue()
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for batch in watch_project(self.filter, stop_event=self.stop, step_ms=30):
            self.queue.put(batch)

    def next(self) -> set[str]:
        try:
            return self.queue.get(timeout=DEADLINE_S)
        except queue.Empty:
            raise AssertionError("no change reported within the deadline") from None

    def prime(self, root: Path) -> None:
        """Wait until the watcher is live: touch a sentinel until a batch reports it."""
        deadline = time.monotonic() + DEADLINE_S
        sentinel = root / "sentinel.py"
        while time.monotonic() < deadline:
            sentinel.write_text(f"# {time.monotonic()}\n")
            try:
                batch = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            assert batch == {"sentinel.py"}
            while True:  # drain the duplicates of the priming writes
                try:
                    assert self.queue.get(timeout=0.3) == {"sentinel.py"}
                except queue.Empty:
                    return
        raise AssertionError("the watcher never started")

    def expect_only_sentinel(self, root: Path) -> None:
        """Touch the sentinel: the next batch must be the sentinel alone."""
        (root / "sentinel.py").write_text(f"# {time.monotonic()}\n")
        assert self.next() == {"sentinel.py"}


@pytest.fixture
def batches(project: Path) -> Iterator[Batches]:
    watcher = Batches(
        ProjectFilter(project, conf_files=["peach.yaml"], notebooks=["notebooks/Endpoints.ipynb"])
    )
    watcher.thread.start()
    try:
        watcher.prime(project)
        yield watcher
    finally:
        watcher.stop.set()
        watcher.thread.join(timeout=DEADLINE_S)
    assert not watcher.thread.is_alive(), "the watcher did not stop on its stop event"


# --- the filter alone ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("peach.yaml", True),
        ("peach.yml", True),
        ("peach.conf/10-endpoints.yaml", True),
        ("peach.conf/extra.yml", True),
        ("notebooks/Endpoints.ipynb", True),
        ("helpers.py", True),
        ("pkg/sub/util.py", True),
        ("notebooks/Scratch.ipynb", False),  # not used by the plan
        ("notebooks/.ipynb_checkpoints/Endpoints-checkpoint.ipynb", False),
        ("notebooks/.~Endpoints.ipynb", False),  # Jupyter's atomic-save copy
        ("__pycache__/helpers.cpython-311.pyc", False),
        ("pkg/__pycache__/util.cpython-311.pyc", False),
        (".git/index", False),
        (".hidden/secret.py", False),
        (".helpers.py", False),
        ("helpers.py~", False),
        (".helpers.py.swp", False),
        ("#helpers.py#", False),
        (".#helpers.py", False),
        ("4913", False),
        ("notebooks/Endpoints.ipynb.tmp", False),
        ("data/items.csv", False),
        ("other.yaml", False),  # not a conf file
        ("nested/peach.yaml", False),
        ("peach.conf/notes.txt", False),
        (".venv/lib/python3.11/site-packages/x.py", False),
    ],
)
def test_filter_lets_through_project_files_only(relative: str, expected: bool) -> None:
    root = Path("/srv/project")
    project_filter = ProjectFilter(
        root, conf_files=["peach.yaml"], notebooks=["notebooks/Endpoints.ipynb"]
    )
    assert project_filter(Change.modified, str(root / relative)) is expected


def test_filter_rejects_paths_outside_the_root_and_server_written_paths() -> None:
    project_filter = ProjectFilter(
        "/srv/project", conf_files=["peach.yaml"], ignore_paths=["/srv/project/logs"]
    )
    assert not project_filter(Change.modified, "/srv/other/helpers.py")
    assert not project_filter(Change.modified, "/srv/project/logs/today.py")
    assert project_filter(Change.modified, "/srv/project/tools.py")


def test_filter_under_a_hidden_parent_folder_still_works() -> None:
    root = Path("/home/me/.cache/project")
    project_filter = ProjectFilter(root, conf_files=["peach.yaml"])
    assert project_filter(Change.modified, str(root / "peach.yaml"))
    assert not project_filter(Change.modified, str(root / ".cache" / "x.py"))


def test_a_single_file_project_watches_that_file_and_not_other_confs() -> None:
    root = Path("/srv/project")
    project_filter = ProjectFilter(root, conf_files=["staging.yaml"], single_file=True)
    assert project_filter(Change.modified, str(root / "staging.yaml"))
    assert not project_filter(Change.modified, str(root / "peach.yaml"))


def test_while_the_project_is_broken_any_notebook_counts() -> None:
    root = Path("/srv/project")
    project_filter = ProjectFilter(root, notebooks=["a.ipynb"])
    assert not project_filter(Change.added, str(root / "b.ipynb"))
    project_filter.use_plan(None)
    assert project_filter(Change.added, str(root / "b.ipynb"))


# --- a real watcher on real files ---------------------------------------------------------


def test_a_jupyter_atomic_save_is_one_batch(project: Path, batches: Batches) -> None:
    """jupyter_server's save: copy to `.~name`, write the notebook, remove the copy, then
    write the checkpoint."""
    notebook = project / "notebooks" / "Endpoints.ipynb"
    copy = notebook.with_name(".~Endpoints.ipynb")
    shutil.copy2(notebook, copy)
    with open(notebook, "wb") as handle:
        handle.write(notebook_bytes("def f():\n    return 2\n"))
        handle.flush()
        os.fsync(handle.fileno())
    copy.unlink()
    checkpoints = notebook.parent / ".ipynb_checkpoints"
    checkpoints.mkdir()
    shutil.copy2(notebook, checkpoints / "Endpoints-checkpoint.ipynb")

    assert batches.next() == {"notebooks/Endpoints.ipynb"}
    batches.expect_only_sentinel(project)


def test_a_temp_file_renamed_over_the_notebook_is_one_batch(
    project: Path, batches: Batches
) -> None:
    notebook = project / "notebooks" / "Endpoints.ipynb"
    temp = notebook.with_name("Endpoints.ipynb.tmp")
    temp.write_bytes(notebook_bytes("def f():\n    return 3\n"))
    os.replace(temp, notebook)
    checkpoints = notebook.parent / ".ipynb_checkpoints"
    checkpoints.mkdir()
    (checkpoints / "Endpoints-checkpoint.ipynb").write_bytes(notebook.read_bytes())

    assert batches.next() == {"notebooks/Endpoints.ipynb"}
    batches.expect_only_sentinel(project)


def test_conf_and_helper_module_saves_are_reported(project: Path, batches: Batches) -> None:
    (project / "peach.yaml").write_text("codops: demo2\n")
    assert batches.next() == {"peach.yaml"}
    (project / "helpers.py").write_text("X = 2\n")
    assert batches.next() == {"helpers.py"}
    (project / "peach.conf" / "extra.yaml").write_text("endpoints: {}\n")
    assert batches.next() == {"peach.conf/extra.yaml"}


def test_ignored_writes_never_make_a_batch(project: Path, batches: Batches) -> None:
    """What Python, git, editors and unused notebooks write is never reported."""
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\0")
    (project / ".git").mkdir()
    (project / ".git" / "index").write_bytes(b"\0")
    (project / ".helpers.py.swp").write_bytes(b"\0")
    (project / "helpers.py~").write_text("X = 0\n")
    (project / "notebooks" / "Scratch.ipynb").write_bytes(notebook_bytes("x = 2\n"))
    (project / "data.csv").write_text("a,b\n")
    batches.expect_only_sentinel(project)


def test_a_new_plan_changes_which_notebooks_count(project: Path, batches: Batches) -> None:
    batches.filter.use(notebooks=["notebooks/Scratch.ipynb"])
    (project / "notebooks" / "Endpoints.ipynb").write_bytes(notebook_bytes("y = 1\n"))
    (project / "notebooks" / "Scratch.ipynb").write_bytes(notebook_bytes("x = 3\n"))
    assert batches.next() == {"notebooks/Scratch.ipynb"}


def test_the_watcher_stops_promptly_on_its_stop_event(project: Path) -> None:
    """Set while the watcher runs (it has reported a save), the stop event ends it."""
    stop = threading.Event()
    reported = threading.Event()
    done = threading.Event()

    def run() -> None:
        for _ in watch_project(ProjectFilter(project), stop_event=stop):
            reported.set()
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE_S
    while not reported.wait(0.1):  # the watcher starts in a thread: write until it reports
        assert time.monotonic() < deadline, "the watcher reported no save"
        (project / "helpers.py").write_text(f"X = {time.monotonic()}\n")
    assert not done.is_set()
    stop.set()
    assert done.wait(DEADLINE_S), "the watcher did not stop on its stop event"
    thread.join(timeout=DEADLINE_S)


def test_the_async_watcher_reports_a_save_and_stops(project: Path) -> None:
    async def main() -> set[str]:
        stop = asyncio.Event()
        project_filter = ProjectFilter(project, conf_files=["peach.yaml"])
        seen: asyncio.Queue[set[str]] = asyncio.Queue()

        async def consume() -> None:
            async for batch in awatch_project(project_filter, stop_event=stop):
                await seen.put(batch)

        task = asyncio.create_task(consume())
        try:
            async with asyncio.timeout(DEADLINE_S):
                while True:  # the watcher starts in a thread: write until it reports
                    (project / "helpers.py").write_text(f"X = {time.monotonic()}\n")
                    try:
                        return await asyncio.wait_for(seen.get(), 0.2)
                    except TimeoutError:
                        continue
        finally:
            stop.set()
            await asyncio.wait_for(task, DEADLINE_S)

    assert asyncio.run(main()) == {"helpers.py"}
