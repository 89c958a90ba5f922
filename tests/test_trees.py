"""Ending a worker's process tree: every process that dies with it is counted.

A task's end line says how many processes its kill took ("killed its process tree (2
processes)"); a worker forking at the moment of the kill must not make that count short.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from simulator.trees import kill_tree, reap

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process trees on Linux")

FORKER = """
import os, sys, time
out = open(sys.argv[1], "a", buffering=1)
while True:                      # fork a sleeping child every moment, and say which
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    out.write(f"{pid}\\n")
"""


def test_a_worker_forking_while_it_is_killed_has_every_child_counted(tmp_path: Path) -> None:
    """The worker forks without pause; the kill must stop it first and then count what it
    kills, not look, let it fork, then kill its group uncounted."""
    for attempt in range(5):
        said = tmp_path / f"children-{attempt}"
        worker = subprocess.Popen([sys.executable, "-c", FORKER, str(said)], start_new_session=True)
        deadline = time.monotonic() + 30
        while len(_lines(said)) < 20:  # forking at full speed by now
            assert time.monotonic() < deadline, "the worker never forked"
            time.sleep(0.01)
        killed = kill_tree(worker.pid)
        worker.wait(timeout=30)
        reap(killed - {worker.pid})
        started = {int(pid) for pid in _lines(said)}
        assert worker.pid in killed
        missed = started - killed
        assert not missed, f"run {attempt}: {len(missed)} of {len(started)} children uncounted"
        deadline = time.monotonic() + 30  # SIGKILLed: gone once the kernel has ended it
        while alive := {pid for pid in started if _alive(pid)}:
            assert time.monotonic() < deadline, f"still running after the kill: {alive}"
            time.sleep(0.01)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
