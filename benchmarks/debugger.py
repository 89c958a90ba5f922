"""How fast pdb answers over peach's relay, against local pdb on a terminal, in the same run.

- **first prompt**: a request reaches ``breakpoint()`` in a method under a real ``peach dev``
  (standard input a pty, its controlling terminal); the method records the time just before
  the call, the benchmark the time the ``(Pdb)`` prompt arrives on peach's output. Target:
  ≤ 0.1 s. The baseline: ``python -c`` reaching ``breakpoint()`` on the same kind of pty.
- **command round trip**: ``p 1`` typed, until its answer and the next prompt arrive,
  ``--commands`` times; the median. Target: ≤ 20 ms. Baseline: the same with local pdb.

Usage::

    python benchmarks/debugger.py                 # 5 stops, 50 commands each
    python benchmarks/debugger.py --stops 3 --json
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

CELL = (
    "import time\n\n"
    "def stop(n: int = 0):\n"
    "    reached = time.time()\n"
    "    breakpoint()\n"
    "    return n\n"
)
CONF = "codops: bench\nendpoints:\n  stop: {url: /stop, components: {main: {notebook: S.ipynb, method: stop}}}\n"
LOCAL = "import time\nfor n in range({stops}):\n    reached = time.time()\n    breakpoint()\n"
PROMPT = b"(Pdb) "


def _take_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Session:
    """A process on a pty (standard input) whose output is read from a pipe."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.primary, secondary = pty.openpty()
        self.process = subprocess.Popen(
            args,
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(os.environ, NO_COLOR="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT)),
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
        os.close(secondary)
        assert self.process.stdout is not None
        self.fd = self.process.stdout.fileno()
        self.buffer = b""

    def read_until(self, pattern: bytes, timeout_s: float = 30.0) -> tuple[re.Match[bytes], float]:
        """Wait for ``pattern`` in the output; the match and when its last byte came."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while True:
            match = regex.search(self.buffer)
            if match:
                arrived = time.time()
                self.buffer = self.buffer[match.end() :]
                return match, arrived
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit(f"timed out waiting for {pattern!r}: {self.buffer[-2000:]!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                data = os.read(self.fd, 1 << 16)
                if not data:
                    raise SystemExit(f"the process ended: {self.buffer[-2000:]!r}")
                self.buffer += data

    def type(self, line: str) -> None:
        os.write(self.primary, line.encode() + b"\n")

    def stop_at_prompt(self) -> tuple[float, list[float]]:
        """At a prompt: how late it came after ``reached``, then command round trips."""
        _, arrived = self.read_until(re.escape(PROMPT))
        self.type("p repr(reached)")
        match, _ = self.read_until(rb"'([0-9.]+)'\n" + re.escape(PROMPT))
        first = arrived - float(match.group(1))
        self.buffer = b""
        trips = []
        for n in range(COMMANDS):
            began = time.perf_counter()
            self.type(f"p {n} * 7")
            self.read_until(rb"\A%d\n" % (n * 7) + re.escape(PROMPT))
            trips.append(time.perf_counter() - began)
        self.type("c")
        return first, trips

    def close(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGINT)
            self.process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        os.close(self.primary)


COMMANDS = 50


def measure_local(stops: int, folder: Path) -> tuple[list[float], list[float]]:
    session = Session([sys.executable, "-c", LOCAL.format(stops=stops)], folder)
    firsts: list[float] = []
    trips: list[float] = []
    try:
        for _ in range(stops):
            first, more = session.stop_at_prompt()
            firsts.append(first)
            trips += more
    finally:
        session.close()
    return firsts, trips


def measure_peach(stops: int, folder: Path) -> tuple[list[float], list[float]]:
    import httpx
    from projectkit import write_project

    project = write_project(folder / "project", CONF, {"S.ipynb": [CELL]})
    args = [sys.executable, "-m", "peach_cli.cli", "dev", str(project), "--port", "0"]
    session = Session([*args, "--no-reload", "--shared-env"], ROOT)
    firsts: list[float] = []
    trips: list[float] = []
    try:
        match, _ = session.read_until(rb"serving on (http://\S+)")
        url = match.group(1).decode()
        session.read_until(rb"replicas healthy")
        for n in range(stops):
            answers: list[int] = []

            def ask(n: int = n, answers: list[int] = answers) -> None:
                answers.append(httpx.get(f"{url}/stop?n={n}", timeout=60).json()["result"])

            thread = threading.Thread(target=ask)
            thread.start()
            first, more = session.stop_at_prompt()
            firsts.append(first)
            trips += more
            thread.join(30)
            assert answers == [n], answers
    finally:
        session.close()
    return firsts, trips


def main() -> None:
    global COMMANDS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stops", type=int, default=5)
    parser.add_argument("--commands", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    COMMANDS = options.commands
    with tempfile.TemporaryDirectory(prefix="peach-bench-debug-") as folder:
        local_first, local_trips = measure_local(options.stops, Path(folder))
        peach_first, peach_trips = measure_peach(options.stops, Path(folder))
    results = {
        "first_prompt_s": {
            "peach_median": statistics.median(peach_first),
            "peach_max": max(peach_first),
            "local_median": statistics.median(local_first),
            "target": 0.1,
        },
        "command_round_trip_s": {
            "peach_median": statistics.median(peach_trips),
            "local_median": statistics.median(local_trips),
            "target": 0.02,
        },
    }
    first, trip = results["first_prompt_s"], results["command_round_trip_s"]
    missed = []
    if first["peach_max"] > first["target"]:
        missed.append(f"first prompt {first['peach_max'] * 1000:.1f} ms > 100 ms")
    if trip["peach_median"] > trip["target"]:
        missed.append(f"command round trip {trip['peach_median'] * 1000:.1f} ms > 20 ms")
    if options.json:
        print(json.dumps({**results, "missed": missed}, indent=2))
        sys.exit(1 if missed else 0)
    print(
        f"first (Pdb) prompt after breakpoint(): peach {first['peach_median'] * 1000:.1f} ms "
        f"median (max {first['peach_max'] * 1000:.1f} ms), local pdb "
        f"{first['local_median'] * 1000:.1f} ms: {first['peach_median'] / first['local_median']:.1f}× "
        f"(target ≤ 100 ms: {'ok' if first['peach_max'] <= 0.1 else 'MISSED'})"
    )
    print(
        f"pdb command round trip: peach {trip['peach_median'] * 1000:.2f} ms median, local pdb "
        f"{trip['local_median'] * 1000:.2f} ms: {trip['peach_median'] / trip['local_median']:.1f}× "
        f"(target ≤ 20 ms: {'ok' if trip['peach_median'] <= 0.02 else 'MISSED'})"
    )
    print("TARGETS MISSED: " + "; ".join(missed) if missed else "targets met")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
