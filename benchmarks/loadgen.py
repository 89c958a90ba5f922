"""`peach bench`'s own costs, against baselines measured in the same run (issue: bench).

1. **Not the bottleneck**: against a bare Starlette app on uvicorn (``benchmarks/gateway.py``'s),
   `peach bench --concurrency 16` against `wrk -t1 -c16` on the same app, alternately, the
   requests per second of each. Target ≥ 0.7×.
2. **The open loop keeps its rate**: `peach bench --rate R` at a rate the bare app holds; the
   achieved rate within 2 % of R.
3. **The generator's own latency**: at the same rate, `peach bench`'s p50 against a blocking
   client on one keep-alive connection sending the same requests at the same pace (``socket``,
   no event loop: the floor). Target: ≤ 0.1 ms more at p50.
4. **`/_peach/metrics`' cost**: the time ``DevMetrics.observe`` takes per request (what every
   answered request pays), against `peach dev`'s median latency for a trivial ``def`` in the
   same run. Target ≤ 3 %.

`wrk` comes from the distribution's packages: when it is not on PATH and this runs as root,
the set-up installs it (``apt-get install -y wrk``); otherwise it says how and skips 1.

Usage::

    python benchmarks/loadgen.py            # about a minute
    python benchmarks/loadgen.py --seconds 3 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway import REPO, SYNC_PATH, measure_latency, start_bare, start_peach  # noqa: E402


def ensure_wrk() -> str | None:
    found = shutil.which("wrk")
    if found or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return found
    print("installing wrk from the distribution's packages (apt-get install -y wrk) ...")
    subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=False, capture_output=True)
    return shutil.which("wrk")


def run_wrk(wrk: str, url: str, seconds: float) -> float:
    out = subprocess.run(
        [wrk, "-t1", "-c16", f"-d{seconds:g}s", url], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match, out
    return float(match.group(1))


def run_bench(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", "bench", *args, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    return json.loads(out)


def paced_floor(host: str, port: int, path: str, rate: float, seconds: float) -> float:
    """p50 (ms) of a blocking client sending ``path`` at ``rate`` on one connection."""
    connection = socket.create_connection((host, port))
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    samples = []
    interval = 1.0 / rate
    due = time.perf_counter()
    end = due + seconds
    while due < end:
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        began = time.perf_counter()
        connection.sendall(request)
        data = b""
        while True:
            data += connection.recv(65536)
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
                if len(body) >= length:
                    break
        samples.append(time.perf_counter() - began)
        due += interval
    connection.close()
    return statistics.median(samples) * 1000


def metrics_cost_us(calls: int = 20000) -> float:
    from simulator.metrics import DevMetrics

    metrics = DevMetrics(lambda: [], lambda: "bench")
    began = time.perf_counter()
    for n in range(calls):
        metrics.observe("GET", "/hello", 200, 0.001, "hello", "main", f"hello/main#{n % 2 + 1}")
    return (time.perf_counter() - began) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=500.0)
    options = parser.parse_args()
    wrk = ensure_wrk()
    results: dict[str, list[float]] = {"wrk": [], "bench": [], "rate": [], "p50": [], "floor": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bare = start_bare(folder)
        try:
            bare.wait_ready()
            url = f"{bare.url}{SYNC_PATH}"
            for round_ in range(options.rounds):
                order = ["wrk", "bench"] if round_ % 2 == 0 else ["bench", "wrk"]
                for tool in order:
                    if tool == "wrk" and wrk:
                        results["wrk"].append(run_wrk(wrk, url, options.seconds))
                    elif tool == "bench":
                        figures = run_bench(url, "-c", "16", "--duration", str(options.seconds))
                        results["bench"].append(figures["throughput"])
                figures = run_bench(
                    url, "--rate", str(options.rate), "--duration", str(options.seconds)
                )
                results["rate"].append(figures["rate_achieved"])
                results["p50"].append(figures["latency_ms"]["p50"])
                results["floor"].append(
                    paced_floor(bare.host, bare.port, SYNC_PATH, options.rate, options.seconds)
                )
        finally:
            bare.stop()
        (folder / "dev").mkdir()
        dev = start_peach(folder / "dev")
        try:
            dev.wait_ready()
            dev_median_ms = statistics.median(measure_latency(dev, 2000, SYNC_PATH)) * 1000
        finally:
            dev.stop()
    cost_us = metrics_cost_us()
    ok = True
    print(f"{'figure':<44} {'value':>12}  target")
    if results["wrk"]:
        ratio = statistics.median(results["bench"]) / statistics.median(results["wrk"])
        print(
            f"{'peach bench -c16 / wrk -t1 -c16 (req/s)':<44} {ratio:>11.2f}×  ≥ 0.7×"
            f"   ({statistics.median(results['bench']):,.0f} against"
            f" {statistics.median(results['wrk']):,.0f})"
        )
        ok &= ratio >= 0.7
    else:
        print("wrk not found: install it (apt-get install wrk) to compare throughput")
    rate = statistics.median(results["rate"])
    off = abs(rate - options.rate) / options.rate * 100
    print(
        f"{f'open loop at {options.rate:g}/s: achieved':<44} {rate:>10.1f}/s  within 2 % ({off:.2f} %)"
    )
    ok &= off <= 2
    added = statistics.median(results["p50"]) - statistics.median(results["floor"])
    print(
        f"{'open loop p50 − blocking client p50':<44} {added:>9.3f} ms  ≤ 0.1 ms"
        f"   ({statistics.median(results['p50']):.3f} against"
        f" {statistics.median(results['floor']):.3f} ms)"
    )
    ok &= added <= 0.1
    share = cost_us / (dev_median_ms * 1000) * 100
    print(
        f"{'/_peach/metrics per request / dev median':<44} {share:>10.2f} %  ≤ 3 %"
        f"   ({cost_us:.1f} µs against {dev_median_ms:.3f} ms)"
    )
    ok &= share <= 3
    print("targets met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
