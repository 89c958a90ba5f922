"""What endpoint tests and recording cost, against `peach dev` itself, in one run.

- ``peach test examples/quickstart`` from process start to exit, against ``peach dev
  examples/quickstart`` from process start to healthy (every replica started, polled on
  ``/_peach/health``): the simulator's start is the floor, the cases must cost little.
  Target: ≤ 2×.
- ``peach dev --record FILE`` against ``peach dev`` on the same project: the median latency
  of ``GET /recommend?item_id=apple``, both servers up at once and asked in alternating
  batches (so the machine's drift hits both alike). Target: recording adds ≤ 5 %.

Usage::

    python benchmarks/endpoint_tests.py              # 3 starts each, 20 x 100 requests
    python benchmarks/endpoint_tests.py --runs 5 --batches 40 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"
URL_LINE = re.compile(r"(http://127\.0\.0\.1:\d+)")
TARGET_RATIO = 2.0
TARGET_OVERHEAD = 0.05
BATCH = 100


def peach(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "peach_cli.cli", *args],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        **kwargs,
    )


class Dev:
    """A `peach dev --port 0 --no-reload` of the quickstart, its output in a file."""

    def __init__(self, *extra: str) -> None:
        self.log = Path(tempfile.mkstemp(suffix=".log")[1])
        self.started = time.perf_counter()
        with self.log.open("wb") as out:
            self.process = peach(
                "dev", str(QUICKSTART), "--port", "0", "--no-reload", *extra,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.url = ""

    def wait_healthy(self, timeout_s: float = 120) -> float:
        """Seconds from process start until every replica has started."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.url:
                match = URL_LINE.search(self.log.read_text(errors="replace"))
                self.url = match.group(1) if match else ""
            if self.url:
                try:
                    health = httpx.get(f"{self.url}/_peach/health", timeout=2).json()
                    if health.get("ready"):
                        return time.perf_counter() - self.started
                except httpx.HTTPError:
                    pass
            if self.process.poll() is not None:
                raise RuntimeError(f"peach dev exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.005)
        raise RuntimeError("peach dev did not become healthy")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.unlink(missing_ok=True)


def dev_start(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        dev = Dev()
        try:
            times.append(dev.wait_healthy())
        finally:
            dev.stop()
    return times


def peach_test_times(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        process = peach("test", str(QUICKSTART), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = process.communicate(timeout=300)
        if process.returncode != 0:
            raise RuntimeError(f"peach test failed: {err.decode()[-2000:]}")
        times.append(time.perf_counter() - started)
    return times


def latencies(batches: int) -> tuple[list[float], list[float], int]:
    """Per-request seconds without and with --record, asked in alternating batches."""
    record = Path(tempfile.mkstemp(suffix=".jsonl")[1])
    plain, recording = Dev(), Dev("--record", str(record))
    try:
        plain.wait_healthy()
        recording.wait_healthy()
        results: dict[str, list[float]] = {"plain": [], "record": []}
        with httpx.Client(timeout=10) as client:
            for dev in (plain, recording):  # warm-up: connections, the replicas' first calls
                for _ in range(50):
                    client.get(f"{dev.url}/recommend", params={"item_id": "apple"})
            for index in range(batches):
                order = [("plain", plain), ("record", recording)]
                for name, dev in order if index % 2 == 0 else reversed(order):
                    url = f"{dev.url}/recommend"
                    for _ in range(BATCH):
                        began = time.perf_counter()
                        client.get(url, params={"item_id": "apple"}).raise_for_status()
                        results[name].append(time.perf_counter() - began)
        deadline = time.monotonic() + 10
        expected = 50 + batches * BATCH
        lines = 0
        while time.monotonic() < deadline:
            lines = len(record.read_text().splitlines())
            if lines >= expected:
                break
            time.sleep(0.05)
        return results["plain"], results["record"], lines
    finally:
        plain.stop()
        recording.stop()
        record.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="starts of each command")
    parser.add_argument("--batches", type=int, default=20, help="batches of 100 requests each")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    dev_times = dev_start(args.runs)
    test_times = peach_test_times(args.runs)
    ratio = statistics.median(test_times) / statistics.median(dev_times)
    plain, recorded, lines = latencies(args.batches)
    plain_ms = statistics.median(plain) * 1000
    record_ms = statistics.median(recorded) * 1000
    overhead = record_ms / plain_ms - 1
    figures = {
        "peach_dev_start_to_healthy_s": round(statistics.median(dev_times), 3),
        "peach_test_start_to_exit_s": round(statistics.median(test_times), 3),
        "ratio": round(ratio, 2),
        "median_ms_plain": round(plain_ms, 3),
        "median_ms_record": round(record_ms, 3),
        "record_overhead": round(overhead, 4),
        "lines_recorded": lines,
        "requests_recorded": len(recorded) + 50,
    }
    missed = []
    if ratio > TARGET_RATIO:
        missed.append(f"peach test {ratio:.2f}x peach dev's start (target <= {TARGET_RATIO:g}x)")
    if overhead > TARGET_OVERHEAD:
        missed.append(f"recording adds {overhead:.1%} (target <= {TARGET_OVERHEAD:.0%})")
    if args.json:
        print(json.dumps({**figures, "missed": missed}, indent=2))
    else:
        print(
            f"peach dev examples/quickstart, start to healthy: median {figures['peach_dev_start_to_healthy_s']:.2f} s "
            f"({', '.join(f'{t:.2f}' for t in dev_times)})"
        )
        print(
            f"peach test examples/quickstart, start to exit:  median {figures['peach_test_start_to_exit_s']:.2f} s "
            f"({', '.join(f'{t:.2f}' for t in test_times)})"
        )
        print(f"ratio {ratio:.2f}x (target <= {TARGET_RATIO:g}x)")
        print(
            f"GET /recommend, {len(plain)} requests each: median {plain_ms:.3f} ms plain, "
            f"{record_ms:.3f} ms with --record ({overhead:+.1%}, target <= +{TARGET_OVERHEAD:.0%}); "
            f"{lines} lines recorded of {len(recorded) + 50}"
        )
        print("targets met" if not missed else "TARGETS MISSED: " + "; ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
