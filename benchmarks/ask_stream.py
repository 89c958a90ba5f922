"""How much delay `peach ask --stream` adds per chunk compared with `curl -N`, and its start-up.

Serves ``tests/projects/streams`` with `peach dev` (or uses ``--url``), whose ``/ticks``
endpoint yields ``count`` lines ``"index send-time-ns"`` ``interval_ms`` apart, stamped with
CLOCK_MONOTONIC (shared by every process on the machine) just before each yield. Each client
runs as a child process writing to a pipe (and, with ``--tty``, to a pseudo-terminal); this
script stamps every read of that output. For each line, delay = time read from the client's
stdout - time the endpoint yielded it. The server, the relay and the reading are the same for
both clients, so the difference of the medians is what the client itself adds between a
chunk's arrival on its socket and its write to stdout.

Start-up is the wall time of a complete non-streaming ``peach ask /answer`` (process start to
exit, the request included), against ``curl`` and a bare ``python -c pass``.

    python benchmarks/ask_stream.py                 # 200 chunks 5 ms apart, 5 rounds each
    python benchmarks/ask_stream.py --tty --rounds 3
    python benchmarks/ask_stream.py --url http://127.0.0.1:8000   # a running `peach dev`
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "tests" / "projects" / "streams"
TARGET_ADDED_MS = 2.0
TARGET_STARTUP_S = 0.3


def start_dev(log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`peach dev tests/projects/streams --port 0`; return the process and its URL once ready."""
    import httpx

    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "peach_cli.cli", "dev", str(PROJECT), "--port", "0", "--no-reload"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, NO_COLOR="1", PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + 60
    url = ""
    while time.monotonic() < deadline and process.poll() is None:
        if not url:
            match = re.search(r"serving on (http://\S+)", log_path.read_text(errors="replace"))
            url = match.group(1) if match else ""
        if url:
            try:
                if httpx.get(f"{url}/_peach/health", timeout=2).json().get("ready"):
                    return process, url
            except (httpx.HTTPError, ValueError):
                pass
        time.sleep(0.05)
    stop(process)
    raise SystemExit(f"peach dev did not start:\n{log_path.read_text(errors='replace')}")


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def run_client(command: list[str], *, tty: bool, timeout_s: float = 60) -> list[float]:
    """Run ``command``; return, per tick line, (read time - yield time) in milliseconds."""
    master = None
    if tty:
        import pty

        master, slave = pty.openpty()
        process = subprocess.Popen(command, stdout=slave, stderr=subprocess.DEVNULL)
        os.close(slave)
        fd = master
    else:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert process.stdout is not None
        fd = process.stdout.fileno()
    reads: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # the pty's other end closed
                break
            now = time.monotonic_ns()
            if not data:
                break
            reads.append((now, data))
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if master is not None:
            os.close(master)
        if process.stdout:
            process.stdout.close()
    delays = []
    pending = b""
    for stamp, data in reads:
        pending += data.replace(b"\r\n", b"\n")
        *lines, pending = pending.split(b"\n")
        for line in lines:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                delays.append((stamp - int(parts[1])) / 1e6)
    return delays


def wall_time(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running `peach dev tests/projects/streams`")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--startup-runs", type=int, default=10)
    parser.add_argument("--tty", action="store_true", help="also measure on a pseudo-terminal")
    options = parser.parse_args()

    curl = shutil.which("curl")
    peach = [sys.executable, "-m", "peach_cli.cli", "ask"]
    server = None
    with tempfile.TemporaryDirectory() as folder:
        if options.url:
            url = options.url.rstrip("/")
        else:
            server, url = start_dev(Path(folder) / "dev.log")
        try:
            body = {"stream": True, "count": options.count, "interval_ms": options.interval_ms}
            clients: dict[str, list[str]] = {
                "peach ask": [
                    *peach,
                    f"{url}/ticks",
                    "--stream",
                    f"count:={options.count}",
                    f"interval_ms:={options.interval_ms}",
                ]
            }
            if curl:
                clients["curl -N"] = [
                    curl, "-N", "-s", "-X", "POST", "-H", "Content-Type: application/json",
                    "-d", json.dumps(body), f"{url}/ticks",
                ]  # fmt: skip
            modes = [False, True] if options.tty else [False]
            print(
                f"stream: {options.count} chunks {options.interval_ms:g} ms apart, "
                f"{options.rounds} rounds per client, server {url}"
            )
            if not curl:
                print("curl not found: peach ask measured alone, no comparison")
            results: dict[tuple[str, bool], list[float]] = {}
            for tty in modes:
                for _ in range(options.rounds):  # interleaved, so load affects both alike
                    for name, command in clients.items():
                        delays = run_client(command, tty=tty)
                        if len(delays) != options.count:
                            print(f"  {name}: got {len(delays)} of {options.count} lines")
                        results.setdefault((name, tty), []).extend(delays)
            for tty in modes:
                where = "terminal (pty)" if tty else "piped"
                print(f"\nper-chunk delay, yield -> client stdout, {where}:")
                for name in clients:
                    delays = results[(name, tty)]
                    print(
                        f"  {name:<10} median {statistics.median(delays):6.3f} ms   "
                        f"p95 {percentile(delays, 0.95):6.3f} ms   max {max(delays):7.3f} ms"
                    )
                if curl:
                    ours = statistics.median(results[("peach ask", tty)])
                    theirs = statistics.median(results[("curl -N", tty)])
                    added = ours - theirs
                    verdict = "ok" if added <= TARGET_ADDED_MS else "OVER TARGET"
                    print(
                        f"  added by peach ask: {added:+.3f} ms median per chunk "
                        f"(ratio {ours / theirs:.2f}x curl; target <= {TARGET_ADDED_MS} ms: "
                        f"{verdict})"
                    )

            print(f"\nstart-up: complete `peach ask /answer`, median of {options.startup_runs}:")
            python_s = statistics.median(
                wall_time([sys.executable, "-c", "pass"]) for _ in range(options.startup_runs)
            )
            ask_command = [shutil.which("peach") or sys.executable, f"{url}/answer"]
            if ask_command[0] == sys.executable:
                ask_command = [*peach, f"{url}/answer"]
            ask_s = statistics.median(wall_time(ask_command) for _ in range(options.startup_runs))
            print(f"  python -c pass   {python_s * 1000:6.0f} ms")
            print(f"  peach ask        {ask_s * 1000:6.0f} ms   ({ask_s / python_s:.1f}x python)")
            if curl:
                curl_s = statistics.median(
                    wall_time([curl, "-s", f"{url}/answer"]) for _ in range(options.startup_runs)
                )
                print(f"  curl             {curl_s * 1000:6.0f} ms   ({ask_s / curl_s:.1f}x curl)")
            verdict = "ok" if ask_s <= TARGET_STARTUP_S else "OVER TARGET"
            print(f"  target <= {TARGET_STARTUP_S * 1000:.0f} ms: {verdict}")
        finally:
            if server is not None:
                stop(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
