"""`peach dev`'s gateway from two checkouts, serving at once, measured in alternating slices.

``benchmarks/gateway.py --repo`` measures one checkout per run; on a busy machine two runs
see different loads, and their ratios to bare Starlette drift with it. Here both checkouts
serve the same project (``gateway.py``'s) at the same time and take turns: each round
measures this checkout's throughput, then the other's, for ``--slice`` seconds each (16
keep-alive clients), and the ratio is taken round by round (a load that changes between
rounds moves both sides). Printed: the median of the paired ratios (min and max say how
noisy the machine was), and each gateway process's CPU time per request (its own, not its
replicas'), for ``def`` and ``async def``.

``--against bare`` pairs this checkout with ``gateway.py``'s bare Starlette app instead (the
same two functions as plain routes, no process boundary), and ``--against floor`` with its
floor (bare Starlette over one standard-library worker process on a Unix socket).

Usage::

    python benchmarks/gateway_ab.py --against /work/main            # 8 rounds
    python benchmarks/gateway_ab.py --against /tmp/before --rounds 14 --json
    python benchmarks/gateway_ab.py --against bare --rounds 14

Targets (issue 36): this checkout's throughput ≥ 0.95× the other's, ``def`` and ``async def``;
``async def`` throughput ≥ 1.1× bare Starlette's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway import (  # noqa: E402
    ASYNC_PATH,
    REPO,
    SYNC_PATH,
    Server,
    measure_throughput,
    start_bare,
    start_floor,
    start_peach,
)

CLIENTS = 16


def slice_of(server: Server, path: str, seconds: float) -> tuple[float, float]:
    """Requests a second for ``seconds``, and the gateway's CPU microseconds a request."""
    process = psutil.Process(server.process.pid)
    before = sum(process.cpu_times()[:2])
    began = time.perf_counter()
    rps = measure_throughput(server, CLIENTS, seconds, path)
    used = sum(process.cpu_times()[:2]) - before
    return rps, used / (rps * (time.perf_counter() - began)) * 1e6


def start_other(folder: Path, against: str) -> Server:
    """The server measured against this checkout's `peach dev`: another checkout's, or
    ``bare`` Starlette, or the ``floor``."""
    if against == "bare":
        return start_bare(folder)
    if against == "floor":
        return start_floor(folder)
    repo = Path(against).resolve()
    return start_peach(folder, repo=repo, env={"PYTHONPATH": str(repo)})


def compare(against: str, rounds: int, seconds: float) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="peach-ab-") as tmp:
        servers: dict[str, Server] = {}
        try:
            for name in ("this", "other"):
                folder = Path(tmp) / name
                folder.mkdir()
                if name == "this":
                    servers[name] = start_peach(folder, repo=REPO, env={"PYTHONPATH": str(REPO)})
                else:
                    servers[name] = start_other(folder, against)
                servers[name].wait_ready()
            for label, path in (("def", SYNC_PATH), ("async def", ASYNC_PATH)):
                for server in servers.values():
                    measure_throughput(server, CLIENTS, 1.0, path)  # warm-up
                ratios: list[float] = []
                cpu: dict[str, list[float]] = {name: [] for name in servers}
                for _ in range(rounds):
                    rps = {}
                    for name, server in servers.items():
                        rps[name], cost = slice_of(server, path, seconds)
                        cpu[name].append(cost)
                    ratios.append(rps["this"] / rps["other"])
                figures[label] = {
                    "ratio_median": statistics.median(ratios),
                    "ratio_min": min(ratios),
                    "ratio_max": max(ratios),
                    "cpu_us_this": statistics.median(cpu["this"]),
                    "cpu_us_other": statistics.median(cpu["other"]),
                }
        finally:
            for server in servers.values():
                server.stop()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--against", required=True, help="the other checkout (e.g. main's), or bare, or floor"
    )
    parser.add_argument("--rounds", type=int, default=8, help="paired slices per function")
    parser.add_argument("--slice", type=float, default=1.5, help="seconds of one slice")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    options = parser.parse_args()
    figures = compare(options.against, options.rounds, options.slice)
    if options.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    else:
        for label, f in figures.items():
            sys.stdout.write(
                f"{label:>9}: throughput this/other {f['ratio_median']:.3f}× (paired median; "
                f"min {f['ratio_min']:.3f}, max {f['ratio_max']:.3f}); gateway CPU a request "
                f"{f['cpu_us_this']:.0f} µs against {f['cpu_us_other']:.0f} µs\n"
            )
    return 0 if all(f["ratio_median"] >= 0.95 for f in figures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
