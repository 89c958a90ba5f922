"""How long `peach doctor` takes with a reachable index, and with a slow index and cluster.

In one run, on loopback: a package index answering ``HEAD /simple/`` and a Ray dashboard
stand-in answering every ``GET``, each after ``--delay`` seconds (network latency). It
times, as wall seconds from outside (start to exit), median of ``--runs``:

- ``peach --help``: the start-up every command pays, the baseline;
- ``peach doctor`` in a ``peach init`` project, the index reachable at once;
- ``peach doctor --address`` with the index and the dashboard ``--delay`` slow each.

Targets (issue 21): ``peach doctor`` with a reachable index ≤ 1.5 s; with slow services
it takes about the slowest chain of waits, not their sum — printed as the ratio of the
extra time over ``peach doctor`` to the dashboard's chain of requests (the index's wait
runs beside it).

Usage::

    python benchmarks/doctor.py            # 5 runs, 0.3 s delay
    python benchmarks/doctor.py --runs 9 --delay 0.5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

AS_PEACH = "import sys; sys.argv[0] = 'peach'; from peach_cli.cli import main; main()"
TARGET_S = 1.5


def serve(delay: float, requests: list[str]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: bytes) -> None:
            time.sleep(delay)
            requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(b"")

        def do_GET(self) -> None:  # noqa: N802
            self._answer(b'{"ray_version": "2.60.0", "version": "4"}')

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def wall(command: list[str], runs: int, cwd: Path, env: dict[str, str]) -> list[float]:
    subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=120)  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=120)
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.3)
    options = parser.parse_args()
    peach = [sys.executable, "-c", AS_PEACH]
    fast_requests: list[str] = []
    slow_index_requests: list[str] = []
    dashboard_requests: list[str] = []
    fast = serve(0.0, fast_requests)
    slow_index = serve(options.delay, slow_index_requests)
    dashboard = serve(options.delay, dashboard_requests)
    with tempfile.TemporaryDirectory(prefix="peach-bench-") as tmp:
        subprocess.run([*peach, "init", "shop"], cwd=tmp, check=True, capture_output=True)
        project = Path(tmp) / "shop"
        base = {**os.environ, "NO_COLOR": "1", "NO_PROXY": "127.0.0.1,localhost"}
        base.pop("PEACH_RAY_ADDRESS", None)
        base["PEACH_ENV_CACHE"] = str(Path(tmp) / "cache")
        index = f"http://127.0.0.1:{fast.server_address[1]}/simple/"
        slow = f"http://127.0.0.1:{slow_index.server_address[1]}/simple/"
        address = f"http://127.0.0.1:{dashboard.server_address[1]}"
        help_s = statistics.median(wall([*peach, "--help"], options.runs, project, base))
        doctor_s = statistics.median(
            wall([*peach, "doctor"], options.runs, project, {**base, "UV_DEFAULT_INDEX": index})
        )
        dashboard_requests.clear()
        slow_s = statistics.median(
            wall(
                [*peach, "doctor", "--address", address],
                options.runs,
                project,
                {**base, "UV_DEFAULT_INDEX": slow},
            )
        )
        chain = len(dashboard_requests) / (options.runs + 1) * options.delay
    for server in (fast, slow_index, dashboard):
        server.shutdown()
    print(f"{'wall seconds (median of ' + str(options.runs) + ')':46} {'s':>7} {'/help':>7}")
    print(f"{'peach --help':46} {help_s:7.3f} {1:7.2f}x")
    verdict = "ok" if doctor_s <= TARGET_S else "MISSED"
    print(
        f"{'peach doctor (index reachable)':46} {doctor_s:7.3f} {doctor_s / help_s:7.2f}x"
        f"  ≤ {TARGET_S} s {verdict}"
    )
    print(
        f"{f'peach doctor --address ({options.delay:g} s each)':46} {slow_s:7.3f} {slow_s / help_s:7.2f}x"
    )
    extra = slow_s - doctor_s
    print(
        f"extra over peach doctor: {extra:.3f} s for a dashboard chain of {chain:.2f} s and an "
        f"index wait of {options.delay:g} s beside it: {extra / (chain + options.delay):.2f}x "
        "their sum (1.0x: one after the other)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
