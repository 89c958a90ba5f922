"""The keeper (``simulator.spawn.Keeper``): it starts a worker as peach would — output, exit
code, working directory, environment, default signals — and what is left below it dies
when it is let go. Real processes, read back from /proc."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from waiting import assert_gone

from simulator.spawn import Keeper, WorkerLaunch, start_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

PROBE = (
    "import os, signal, socket, subprocess, sys\n"
    "print(os.getcwd(), os.environ.get('PROBE'), flush=True)\n"
    "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)\n"
    "left = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "print(left.pid, flush=True)\n"
    "socket.socket(fileno=int(sys.argv[1])).recv(1)  # until the test has looked\n"
    "sys.exit(3)\n"
)


def test_a_worker_started_by_the_keeper_is_started_as_peach_would(tmp_path: Path) -> None:
    launch = WorkerLaunch(tmp_path, env=(("PROBE", "seen"),))

    async def scenario() -> tuple[int, list[str], int, int | None]:
        keeper = Keeper()
        ours, theirs = socket.socketpair()  # the worker's socket to peach, passed as is
        with ours, theirs:
            fd = theirs.fileno()
            command = [sys.executable, "-c", PROBE, str(fd)]
            process = await start_process(
                launch, command, fd, output=subprocess.PIPE, keeper=keeper
            )
            with pytest.raises(FileNotFoundError):  # the keeper tells why exec failed
                await start_process(launch, ["/nonexistent/python"], fd, output=None, keeper=keeper)
            assert process.stdout is not None
            lines = [(await process.stdout.readline()).decode().strip() for _ in range(3)]
            assert keeper.pid is not None and psutil.Process(process.pid).ppid() == keeper.pid
            ours.send(b"x")
            code = await process.wait()
        keeper_pid = keeper.pid
        await keeper.close()  # what is left below it (the setsid sleep) dies
        return code, lines, int(lines[2]), keeper_pid

    code, lines, left, keeper_pid = asyncio.run(scenario())
    assert code == 3
    assert lines[:2] == [f"{tmp_path.resolve()} seen", "True"]
    assert_gone(left, 5)
    assert keeper_pid is not None and not psutil.pid_exists(keeper_pid)
