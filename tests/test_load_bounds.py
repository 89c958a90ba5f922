"""Bounds on a load (SPEC §6, issue 49): ``nan``, ``inf``, zero and negative rates and
durations are usage errors (exit 2) for `peach bench` and `peach profile`; an open loop
asked for more than it can send (``--rate 1e9`` against a server that never answers) holds
at most a second of its schedule, its memory flat, and Ctrl-C stops it.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import psutil
import pytest
from cli_support import run_peach, start_peach


@pytest.mark.parametrize(
    "command, option, value",
    [
        ("bench", "--rate", "nan"),
        ("bench", "--rate", "inf"),
        ("bench", "--rate", "0"),
        ("bench", "--duration", "nan"),
        ("bench", "--duration", "inf"),
        ("bench", "--duration", "-1"),
        ("bench", "--warmup", "nan"),
        ("profile", "--rate", "nan"),
        ("profile", "--duration", "inf"),
    ],
)
def test_a_rate_or_duration_that_is_no_positive_number_is_a_usage_error(
    command: str, option: str, value: str
) -> None:
    done = run_peach(command, "/x", "--url", "http://127.0.0.1:9", f"{option}={value}")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert option in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A server that takes connections and reads requests, and never answers."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for connection in held:
            connection.close()


@pytest.mark.slow  # 6 s of a bench spinning a core, its memory read meanwhile
@pytest.mark.timeout(90)
def test_an_open_loop_that_cannot_keep_up_holds_a_bounded_queue_and_ctrl_c_stops_it(
    black_hole: int,
) -> None:
    bench = start_peach(  # a real process: the test reads its memory and sends it SIGINT
        "bench", "/x", "--url", f"http://127.0.0.1:{black_hole}", "--rate", "1e9",
        "--duration", "60", text=False, start_new_session=True,
    )  # fmt: skip
    try:
        process = psutil.Process(bench.pid)
        samples = []
        deadline = time.monotonic() + 6.0
        while time.monotonic() < deadline and bench.poll() is None:
            samples.append(process.memory_info().rss)
            time.sleep(0.25)
        assert bench.poll() is None, bench.communicate()
        settled = samples[len(samples) // 3]  # after its start-up and first second
        growth = max(samples) - settled
        assert growth < 40 * 2**20, f"RSS grew {growth / 2**20:.0f} MiB in 4 s"
        began = time.monotonic()
        os.kill(bench.pid, signal.SIGINT)
        _, err = bench.communicate(timeout=20)
        took = time.monotonic() - began
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    assert took < 15, took
    assert "Traceback" not in err.decode(errors="replace")
