"""What `peach fuzz` costs on the quickstart, against `peach test` on the same project.

- ``peach fuzz examples/quickstart --seed S`` at the default ``--examples`` (50 per
  endpoint), process start to exit. Target: under 30 s.
- Baseline, same run, alternating with it: ``peach test examples/quickstart`` (the same
  simulator started and stopped, its 4 cases instead of the generated requests).
- Also printed: the requests fuzz sent, and what importing Hypothesis (the ``fuzz`` extra)
  costs a process, against the CLI's own start (``peach --version``).

Usage::

    python benchmarks/fuzz.py                 # 3 runs of each
    python benchmarks/fuzz.py --runs 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"
TARGET_S = 30.0
SUMMARY = re.compile(r"in (\d+) endpoints?, (\d+) requests? \(([\d.]+) s, seed (\d+)\)")


def timed(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "NO_COLOR": "1"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return time.perf_counter() - started, done


def import_cost(statement: str, runs: int) -> float:
    """The median seconds of ``python -c STATEMENT`` (a fresh interpreter each time)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    fuzz_s: list[float] = []
    test_s: list[float] = []
    requests = 0
    for _ in range(options.runs):  # alternating: the machine's drift hits both alike
        seconds, done = timed("fuzz", str(QUICKSTART), "--seed", str(options.seed))
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"peach fuzz exited {done.returncode}: it found something")
        match = SUMMARY.search(done.stderr)
        requests = int(match.group(2)) if match else 0
        fuzz_s.append(seconds)
        seconds, done = timed("test", str(QUICKSTART))
        if done.returncode != 0:
            raise SystemExit(f"peach test exited {done.returncode}: {done.stdout}{done.stderr}")
        test_s.append(seconds)
    hypothesis_s = import_cost("import peach_cli.cli, hypothesis.strategies", options.runs * 2)
    cli_s = import_cost("import peach_cli.cli", options.runs * 2)
    fuzz, test = statistics.median(fuzz_s), statistics.median(test_s)
    figures = {
        "fuzz_s": round(fuzz, 2),
        "fuzz_runs_s": [round(s, 2) for s in fuzz_s],
        "requests": requests,
        "test_s": round(test, 2),
        "ratio": round(fuzz / test, 2),
        "import_hypothesis_s": round(hypothesis_s - cli_s, 3),
        "load_average": os.getloadavg(),
        "target_s": TARGET_S,
        "met": fuzz < TARGET_S,
    }
    if options.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    else:
        sys.stdout.write(
            f"peach fuzz examples/quickstart (50 examples per endpoint, {requests} requests): "
            f"{fuzz:.2f} s median of {options.runs} (runs: "
            f"{', '.join(f'{s:.2f}' for s in fuzz_s)})\n"
            f"peach test examples/quickstart (same run): {test:.2f} s median → "
            f"{fuzz / test:.1f}× its time\n"
            f"importing Hypothesis adds {hypothesis_s - cli_s:.3f} s to a process\n"
            "load average: {:.2f} {:.2f} {:.2f}\n".format(*os.getloadavg())
        )
    met = fuzz < TARGET_S
    sys.stdout.write("targets met\n" if met else f"TARGETS MISSED: peach fuzz took {fuzz:.1f} s\n")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
