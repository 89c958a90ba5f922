"""What a replica's code starts dies with the replica and with peach (SPEC §6 process trees).

A real `peach dev` serves a notebook whose method starts two processes and answers their
pids: one in a session of its own (``setsid``), and one that ignores SIGTERM. They must die
when the replica restarts, when peach is stopped (SIGTERM, SIGINT), and within 5 s when peach
is killed with SIGKILL; and they run with default signal dispositions. Read back from /proc.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import DevProcess, start_peach_dev
from projectkit import write_project
from reload_support import edit_cell
from waiting import assert_gone, poll

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc")

CONF = """codops: procs
endpoints:
  spawn:
    url: /spawn
    components:
      main: {notebook: nb.ipynb, method: spawn}
  orphan:
    url: /orphan
    components:
      main: {notebook: nb.ipynb, method: orphan}
  stuck:
    url: /stuck
    components:
      main: {notebook: nb.ipynb, method: stuck}
"""
CELLS = [
    # version 1
    "def spawn():\n"
    "    import os, subprocess, sys\n"
    "    stubborn = (\n"
    '        "import signal, time\\n"\n'
    '        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"\n'
    "        \"print('ready', flush=True)\\n\"\n"
    '        "time.sleep(600)\\n"\n'
    "    )\n"
    '    loner = subprocess.Popen(["sleep", "600"], start_new_session=True)\n'
    "    deaf = subprocess.Popen([sys.executable, '-c', stubborn], stdout=subprocess.PIPE)\n"
    "    deaf.stdout.readline()  # it ignores SIGTERM from now on\n"
    '    return {"replica": os.getpid(), "setsid": loner.pid, "deaf": deaf.pid}\n',
    # a child that starts a grandchild in a session of its own and exits: an orphan
    "def orphan():\n"
    "    import os, subprocess, sys\n"
    "    code = (\n"
    '        "import subprocess\\n"\n'
    "        \"p = subprocess.Popen(['sleep', '600'], start_new_session=True, stdout=-3, stderr=-3)\\n\"\n"
    '        "print(p.pid)\\n"\n'
    "    )\n"
    "    run = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)\n"
    '    return {"replica": os.getpid(), "orphan": int(run.stdout)}\n',
    # an event loop blocked until killed
    "async def stuck():\n"
    "    import time\n"
    '    open("stuck.flag", "w").close()\n'
    "    time.sleep(600)\n",
]
SIGNALS_IGNORED = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "procs", CONF, {"nb.ipynb": CELLS})


def started(dev: DevProcess, url: str = "/spawn") -> dict[str, int]:
    """The pids the method answers (each call starts new processes)."""
    response = httpx.get(f"{dev.url}{url}", timeout=30)
    assert response.status_code == 200, response.text
    pids: dict[str, int] = response.json()["result"]
    return pids


def ignored_signals(pid: int) -> set[int]:
    """The signals ``pid`` ignores (``SigIgn`` of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    raise AssertionError(f"no SigIgn line for {pid}")


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def seconds_until_gone(pids: list[int], timeout_s: float) -> float:
    """How long until every process of ``pids`` is gone (polled; fails after ``timeout_s``)."""
    begun = time.monotonic()
    poll(lambda: not any(running(p) for p in pids), f"exit of {pids}", timeout_s, tolerate=())
    return time.monotonic() - begun


@pytest.fixture
def dev(project: Path, tmp_path: Path):
    dev = start_peach_dev(project, tmp_path / "dev.log")
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


def test_what_user_code_starts_runs_with_default_signal_dispositions(dev: DevProcess) -> None:
    pids = started(dev)
    assert not ignored_signals(pids["setsid"]) & set(SIGNALS_IGNORED)
    assert not ignored_signals(pids["replica"]) & set(SIGNALS_IGNORED)  # handled, not ignored


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_replicas_tree_dies_when_peach_dev_is_stopped(dev: DevProcess, number: int) -> None:
    pids = started(dev)
    assert all(running(p) for p in pids.values())
    os.kill(dev.process.pid, number)  # peach alone: what its own stop does, not the group's
    assert dev.process.wait(timeout=30) == 0
    seconds_until_gone(list(pids.values()), 10)


def test_a_replicas_tree_is_gone_within_5_s_after_peach_dev_is_killed(dev: DevProcess) -> None:
    pids = started(dev)
    os.kill(dev.process.pid, signal.SIGKILL)  # peach cannot stop anything itself
    dev.process.wait(timeout=10)
    took = seconds_until_gone(list(pids.values()), 10)
    assert took < 5, f"gone {took:.2f} s after peach was killed"


def test_without_what_only_linux_offers_a_killed_peach_dev_leaves_no_tree(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS's fallbacks, forced (``peach_cli.runtime.linux``): no keeper, no template, no
    subreaper, no parent-death signal, ``ps`` for the tree. The replica learns that peach
    died when its socket closes, and kills what it started."""
    monkeypatch.setenv("PEACH_LINUX_WITHOUT", "all")
    dev = start_peach_dev(project, tmp_path / "dev.log")
    try:
        dev.wait_ready()
        pids = started(dev)
        assert psutil.Process(pids["replica"]).ppid() == dev.process.pid  # spawned by peach
        os.kill(dev.process.pid, signal.SIGKILL)
        dev.process.wait(timeout=10)
        took = seconds_until_gone(list(pids.values()), 10)
        assert took < 5, f"gone {took:.2f} s after peach was killed"
    finally:
        dev.stop()


@pytest.mark.parametrize("keeper", [True, False], ids=["keeper", "no-keeper"])
def test_an_orphan_of_a_replica_is_adopted_or_gone(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keeper: bool
) -> None:
    """An orphan stays in peach's tree: adopted by its replica (a subreaper). Once the
    replica is killed, the keeper adopts it and kills it at once; where no keeper runs,
    peach dev adopts it (a subreaper too) and kills it when it stops."""
    if not keeper:
        monkeypatch.setenv("PEACH_NO_KEEPER", "1")
    dev = start_peach_dev(project, tmp_path / "dev.log")
    try:
        dev.wait_ready()
        pids = started(dev, "/orphan")
        assert psutil.Process(pids["orphan"]).ppid() == pids["replica"]
        os.kill(pids["replica"], signal.SIGKILL)  # as if it crashed
        dev.wait_for_output(r"orphan/main#1 .*was killed by SIGKILL")
        if keeper:
            took = seconds_until_gone([pids["orphan"]], 10)
            assert took < 5, f"gone {took:.2f} s after its replica was killed"
            assert dev.process.poll() is None  # while peach dev runs on
            return
        assert psutil.Process(pids["orphan"]).ppid() == dev.process.pid
        os.kill(dev.process.pid, signal.SIGTERM)
        assert dev.process.wait(timeout=30) == 0
        took = seconds_until_gone([pids["orphan"]], 10)
        assert took < 5, f"gone {took:.2f} s after peach dev stopped"
    finally:
        dev.stop()


def test_a_replica_restarted_by_a_reload_takes_its_tree_with_it(
    project: Path, tmp_path: Path
) -> None:
    dev = start_peach_dev(project, tmp_path / "dev.log", "--reload", "restart", reload=True)
    try:
        dev.wait_ready()
        pids = started(dev)
        dev.mark()
        edit_cell(
            project,
            "# it ignores SIGTERM from now on",
            "# it ignores SIGTERM, v2",
            notebook="nb.ipynb",
        )
        dev.wait_for_output(r"restarted spawn/main \(code changed\)", 60)
        seconds_until_gone(list(pids.values()), 10)
        assert started(dev)["replica"] != pids["replica"]
    finally:
        dev.stop()


@pytest.mark.slow  # the stop waits its 3 s for the blocked replica
def test_a_replica_whose_loop_is_blocked_is_killed_when_peach_dev_stops(
    dev: DevProcess, project: Path
) -> None:
    (replica,) = [
        r["pid"]
        for c in httpx.get(f"{dev.url}/_peach/health", timeout=10).json()["components"]
        for r in c["replicas"]
        if c["component"] == "stuck/main"
    ]

    def call() -> None:
        try:
            httpx.get(f"{dev.url}/stuck", timeout=60)
        except httpx.HTTPError:
            pass  # peach stopped with the call in flight

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    poll(lambda: (project / "stuck.flag").exists(), "the blocked call", 30, tolerate=())
    begun = time.monotonic()
    os.kill(dev.process.pid, signal.SIGTERM)
    try:
        code = dev.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("peach dev did not stop with a blocked replica") from None
    assert code == 0
    assert_gone(replica)
    assert time.monotonic() - begun < 30
    caller.join(timeout=60)
