"""What each test of the suite costs the machine: CPU-seconds (every process's, from
``/proc/stat``) and wall seconds per test, as a pytest plugin; then a table by file.

Run the suite one test at a time on an otherwise quiet machine (the counters are the whole
machine's, so tests running side by side would be charged for each other)::

    python -m pytest -n 0 -p benchmarks.suite_cpu -p no:randomly     # writes the JSONL
    python benchmarks/suite_cpu.py benchmarks/out/suite_cpu.jsonl [TOP]        # the table

``SUITE_CPU_OUT`` names the JSONL (default ``benchmarks/out/suite_cpu.jsonl``, appended to).
A session fixture's set-up is charged to the first test that uses it, and what a cluster or
server burns while idle to the tests that run meanwhile. Linux only.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("SUITE_CPU_OUT", Path(__file__).parent / "out" / "suite_cpu.jsonl"))


def machine_cpu_s() -> float:
    """user + nice + system + irq + softirq + steal of every CPU, in seconds."""
    with open("/proc/stat") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


_out: Any = None

try:
    import pytest
except ImportError:  # the table alone needs no pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
        global _out
        if _out is None:
            OUT.parent.mkdir(parents=True, exist_ok=True)
            _out = OUT.open("a", buffering=1)
        cpu, wall = machine_cpu_s(), time.monotonic()
        yield
        cpu, wall = machine_cpu_s() - cpu, time.monotonic() - wall
        _out.write(json.dumps({"id": item.nodeid, "cpu": round(cpu, 2), "wall": round(wall, 2)}))
        _out.write("\n")


def table(path: Path, top: int) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        entry = files[row["id"].partition("::")[0]]
        entry[0] += row["cpu"]
        entry[1] += row["wall"]
        entry[2] += 1
    cpu = sum(r["cpu"] for r in rows)
    wall = sum(r["wall"] for r in rows)
    lines = [f"{len(rows)} tests: {cpu:.0f} CPU-s, {wall:.0f} s", "   CPU-s   wall-s  tests  file"]
    for name, (c, w, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{c:8.1f} {w:8.1f} {n:6d}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(
        table(
            Path(sys.argv[1]) if len(sys.argv) > 1 else OUT,
            int(sys.argv[2]) if len(sys.argv) > 2 else 30,
        )
    )
