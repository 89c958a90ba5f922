"""What a task leaves behind: nothing. Its output is bounded, and every process it starts —
one that starts its own session and forks too — dies at its timeout, and when peach itself is
killed. Real `peach task run` and `peach dev --tasks` processes, the processes the task's code
really starts, read back from /proc (psutil).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from cli_support import PEACH, run_peach_process
from conftest import REPO, start_peach_dev
from projectkit import write_project
from waiting import assert_gone, poll

CONF = """codops: procs
tasks:
  shout: {notebook: Tasks.ipynb, method: shout}
  escape: {notebook: Tasks.ipynb, method: escape, timeout_s: 2}
"""
CELLS = [
    # a 100 MiB line, then a short one
    'def shout():\n    import sys\n    sys.stdout.write("x" * (100 * 1024 * 1024) + "\\nafter\\n")\n'
    '    return "shouted"\n',
    # a daemon, as `setsid` and a double fork make one: its parent exits at once, so it is
    # nobody's child but the task's process (or init's); then the task hangs
    "def escape():\n"
    "    import os, sys, time\n"
    "    if os.fork() == 0:\n"
    "        os.setsid()\n"
    "        if os.fork() == 0:\n"
    '            with open("daemon.pid", "w") as out:\n'
    "                out.write(str(os.getpid()))\n"
    "            time.sleep(600)\n"
    "        os._exit(0)\n"
    "    os.wait()\n"
    '    print("daemon started", flush=True)\n'
    "    time.sleep(600)\n",
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "procs", CONF, {"Tasks.ipynb": CELLS})


def daemon_pid(project: Path) -> int:
    path = project / "daemon.pid"
    # the daemon writes it after the task said it started: wait for it
    read = lambda: path.read_text().strip() or None  # noqa: E731
    return int(poll(read, "the daemon's pid", 30, tolerate=(OSError,)))


@pytest.mark.slow
def test_a_100_mib_line_of_output_is_cut_with_a_marker_saying_how_much(project: Path) -> None:
    # a real process: 100 MiB of output through a pipe, as a user's terminal gets it
    result = run_peach_process("task", "run", "shout", str(project), "--shared-env", timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    cut = [line for line in lines if line.startswith("shout | xxx")]
    assert len(cut) == 1, [line[:80] for line in lines]
    assert cut[0] == (
        "shout | "
        + "x" * 4096
        + f" … ({100 * 1024 * 1024 - 4096} more bytes of this line not shown)"
    )
    assert "shout | after" in lines
    assert len(result.stdout) < 10_000


@pytest.mark.serial  # a 1 s timeout and a 10 s bound on the kill
def test_a_daemon_a_task_starts_dies_at_its_timeout(project: Path) -> None:
    # a real process: the daemon the task starts must die with peach's process tree
    result = run_peach_process("task", "run", "escape", str(project), "--shared-env", timeout=120)
    assert result.returncode == 1, result.stderr
    assert "timed out after 2 s" in result.stderr
    assert "daemon started" in result.stdout
    assert_gone(daemon_pid(project))


def test_peach_dev_killed_during_a_forking_task_leaves_no_process_behind(tmp_path: Path) -> None:
    conf = CONF.replace("timeout_s: 2", "timeout_s: 600").replace("  shout:", "  # shout:")
    project = write_project(tmp_path / "procs", conf, {"Tasks.ipynb": CELLS})
    dev = start_peach_dev(project, tmp_path / "dev.log", "--tasks", "--shared-env")
    try:
        dev.wait_for_output(r"escape \| daemon started", 60)
        daemon = daemon_pid(project)
        import psutil

        worker = psutil.Process(daemon).parent()  # adopted by the task's process
        assert worker is not None
        keeper = worker.parent()  # which peach's keeper started
        assert keeper is not None and keeper.ppid() == dev.process.pid
        os.kill(dev.process.pid, signal.SIGKILL)  # peach only: no Ctrl-C, no cleanup
        dev.process.wait(timeout=10)
        assert_gone(daemon)
        assert_gone(worker.pid)
    finally:
        dev.stop()


def test_ctrl_c_during_a_task_kills_the_daemon_it_started(project: Path) -> None:
    process = subprocess.Popen(
        # a real process: the test sends it SIGINT
        [*PEACH, "task", "run", "escape", str(project)] + ["--shared-env", "--timeout-s", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ, NO_COLOR="1"),
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the task printed (or exited)
        assert line.startswith("escape | daemon started"), line
        daemon = daemon_pid(project)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert_gone(daemon)
