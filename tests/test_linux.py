"""What only Linux offers and each fallback (``peach_cli.runtime.linux``), the fallbacks run
on Linux by ``PEACH_LINUX_WITHOUT``: real processes, read back with psutil.

The parent-death and fork fallbacks are run whole by ``peach dev`` in
``test_replica_procs.py`` and ``test_dev_template.py``; ``peach doctor``'s naming of them in
``test_doctor.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from waiting import poll

from peach_cli.runtime import linux, tree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's own")
ROOT = Path(__file__).resolve().parent.parent


def run_python(script: str) -> str:
    """What ``script`` prints, run by this Python with this checkout's peach."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(params=["linux", "fallback"])
def without(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: with what Linux offers, and with every fallback forced."""
    if request.param == "fallback":
        monkeypatch.setenv(linux.WITHOUT_ENV, "all")
    else:
        monkeypatch.delenv(linux.WITHOUT_ENV, raising=False)
    return str(request.param)


@pytest.fixture
def family() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A child that started a grandchild; both sleep. (child, grandchild pid)."""
    script = "import subprocess, sys, time\n"
    script += "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    script += "print(g.pid, flush=True); time.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    try:
        yield child, grandchild
    finally:
        for pid in (grandchild, child.pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        child.wait()


def test_the_knob_names_what_to_do_without(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(linux.WITHOUT_ENV, raising=False)
    assert linux.missing() == []
    monkeypatch.setenv(linux.WITHOUT_ENV, "proc, fork")
    assert [f.name for f in linux.missing()] == ["proc", "fork"]
    monkeypatch.setenv(linux.WITHOUT_ENV, "all")
    assert [f.name for f in linux.missing()] == list(linux.NAMES)


def test_a_process_tree_is_read_from_proc_or_ps(
    without: str, family: tuple[subprocess.Popen[bytes], int]
) -> None:
    child, grandchild = family
    assert tree.descendants(child.pid) == [grandchild]
    assert child.pid in linux.children()
    table = linux.parents()
    assert table[grandchild] == child.pid and table[child.pid] == os.getpid()


def test_kill_descendants_kills_the_whole_tree(without: str) -> None:
    """A process kills what it started, and what that started, with either table."""
    script = textwrap.dedent(
        """
        import json, subprocess, sys
        from peach_cli.runtime.tree import kill_descendants
        sleep = [sys.executable, "-c", "import subprocess, sys, time; "
                 "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                 "time.sleep(60)"]
        first = subprocess.Popen(sleep)
        import psutil, time
        deadline = time.monotonic() + 30
        while not psutil.Process(first.pid).children() and time.monotonic() < deadline:
            time.sleep(0.02)
        below = [first.pid] + [c.pid for c in psutil.Process(first.pid).children()]
        print(json.dumps({"below": below, "killed": kill_descendants()}))
        """
    )
    seen = json.loads(run_python(script))
    assert len(seen["below"]) == 2 and seen["killed"] == 2
    for pid in seen["below"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_an_orphan_is_adopted_by_a_subreaper_or_by_someone_else(without: str) -> None:
    """With the subreaper, a process's orphaned grandchild becomes its child; without
    (the fallback), it does not, and ``become_subreaper`` says so."""
    script = textwrap.dedent(
        """
        import json, os, subprocess, sys, time
        from peach_cli.runtime.linux import become_subreaper
        became = become_subreaper()
        middle = subprocess.run([sys.executable, "-c",
            "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)'], start_new_session=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"],
            capture_output=True, text=True, check=True)
        print(json.dumps({"became": became, "orphan": int(middle.stdout)}), flush=True)
        time.sleep(60)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert process.stdout is not None
        seen = json.loads(process.stdout.readline())
        orphan = psutil.Process(seen["orphan"])
        parent = poll(orphan.ppid, "the orphan's new parent", tolerate=())
        assert seen["became"] is (without == "linux")
        assert (parent == process.pid) is (without == "linux")
    finally:
        for pid in (seen["orphan"], process.pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        process.wait()


def test_the_parent_death_signal_is_set_only_with_linux(without: str) -> None:
    """The fallback (a worker exits when its socket to peach closes) runs whole in
    ``test_replica_procs.py``; here, that the signal is really set, or not."""
    script = textwrap.dedent(
        """
        import ctypes, signal
        from peach_cli.runtime.linux import set_parent_death_signal
        said = set_parent_death_signal(signal.SIGTERM)
        value = ctypes.c_int()
        ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
        print(said, value.value)
        """
    )
    assert run_python(script).split() == (["True", "15"] if without == "linux" else ["False", "0"])


def test_fork_templates_only_with_linux(without: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from simulator.spawn import keepers_possible
    from simulator.template import templates_possible

    monkeypatch.delenv("PEACH_NO_TEMPLATE", raising=False)
    monkeypatch.delenv("PEACH_NO_KEEPER", raising=False)
    assert templates_possible() is (without == "linux")
    assert keepers_possible() is (without == "linux")
