"""What `peach fuzz` costs on the quickstart and on the tour's streaming project, against
`peach test` on the same projects.

- ``peach fuzz examples/quickstart --seed S`` at the default ``--examples`` (50 per
  endpoint), process start to exit. Target: under 30 s.
- ``peach init shop --streaming && cd shop && peach fuzz --seed S`` (the README's tour; its
  ``/story`` takes a ``delay_s`` the fuzzer makes large: each stream is read for 0.25 s of
  the clock, then closed). Target: under 30 s. Before streams were read by the clock it
  took 506 s with ``--seed 1`` (914 s with another seed); ``--before DIR`` measures that
  again, in the same run, with the code of the checkout at DIR (once: it takes minutes).
- Baselines, same run, alternating with each: ``peach test`` on the same project (the same
  simulator started and stopped, its own cases instead of the generated requests).
- Also printed: the requests fuzz sent, and what importing Hypothesis (the ``fuzz`` extra)
  costs a process, against the CLI's own start (``peach --version``).

Usage::

    python benchmarks/fuzz.py                 # 3 runs of each
    python benchmarks/fuzz.py --runs 5 --json
    python benchmarks/fuzz.py --runs 1 --before /path/to/an/older/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"
TARGET_S = 30.0
BEFORE_S = 506.0
"""The tour project's `peach fuzz --seed 1` before streams were read by the clock."""
SUMMARY = re.compile(r"in (\d+) endpoints?, (\d+) requests? \(([\d.]+) s, seed (\d+)\)")


def timed(
    *args: str, cwd: Path = ROOT, code: Path = ROOT
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """`peach ARGS` in ``cwd``, with the code of the checkout at ``code``: seconds, result."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(code)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return time.perf_counter() - started, done


def fuzz_and_test(project: Path, seed: int, runs: int) -> dict[str, object]:
    """``runs`` of `peach fuzz PROJECT --seed S` and of `peach test PROJECT`, alternating
    (the machine's drift hits both alike)."""
    fuzz_s: list[float] = []
    test_s: list[float] = []
    requests = 0
    for _ in range(runs):
        seconds, done = timed("fuzz", str(project), "--seed", str(seed), cwd=project)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"peach fuzz exited {done.returncode}: it found something")
        match = SUMMARY.search(done.stderr)
        requests = int(match.group(2)) if match else 0
        fuzz_s.append(seconds)
        seconds, done = timed("test", str(project), cwd=project)
        if done.returncode != 0:
            raise SystemExit(f"peach test exited {done.returncode}: {done.stdout}{done.stderr}")
        test_s.append(seconds)
    fuzz, test = statistics.median(fuzz_s), statistics.median(test_s)
    return {
        "fuzz_s": round(fuzz, 2),
        "fuzz_runs_s": [round(s, 2) for s in fuzz_s],
        "requests": requests,
        "test_s": round(test, 2),
        "ratio": round(fuzz / test, 2),
        "met": fuzz < TARGET_S,
    }


def tour_project(folder: Path) -> Path:
    """`peach init shop --streaming` in ``folder``: the README tour's project."""
    seconds, done = timed("init", "shop", "--streaming", cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"peach init exited {done.returncode}: {done.stdout}{done.stderr}")
    return folder / "shop"


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
    parser.add_argument("--before", type=Path, help="a checkout whose code to measure once")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    quickstart = fuzz_and_test(QUICKSTART, options.seed, options.runs)
    with tempfile.TemporaryDirectory(prefix="peach-fuzz-bench-") as folder:
        shop = tour_project(Path(folder))
        tour = fuzz_and_test(shop, options.seed, options.runs)
        before_s, measured = BEFORE_S, False
        if options.before is not None:
            seconds, done = timed(
                "fuzz", "--seed", str(options.seed), cwd=shop, code=options.before
            )
            before_s, measured = seconds, True
            if done.returncode != 0:
                raise SystemExit(f"the older peach fuzz exited {done.returncode}: {done.stderr}")
    hypothesis_s = import_cost("import peach_cli.cli, hypothesis.strategies", options.runs * 2)
    cli_s = import_cost("import peach_cli.cli", options.runs * 2)
    figures = {
        "quickstart": quickstart,
        "tour": {**tour, "before_s": round(before_s, 2), "before_measured": measured},
        "import_hypothesis_s": round(hypothesis_s - cli_s, 3),
        "load_average": os.getloadavg(),
        "target_s": TARGET_S,
    }
    met = bool(quickstart["met"] and tour["met"])
    if options.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    else:
        for name, run in (
            ("examples/quickstart", quickstart),
            ("the tour's shop --streaming", tour),
        ):
            sys.stdout.write(
                f"peach fuzz {name} (50 examples per endpoint, {run['requests']} requests): "
                f"{run['fuzz_s']:.2f} s median of {options.runs} (runs: "
                f"{', '.join(f'{s:.2f}' for s in run['fuzz_runs_s'])})\n"  # type: ignore[attr-defined]
                f"  peach test on it (same run): {run['test_s']:.2f} s median → "
                f"{run['ratio']:.1f}× its time\n"
            )
        how = "measured in this run" if measured else "recorded in benchmarks/RESULTS.md"
        sys.stdout.write(
            f"the tour's fuzz before streams were read by the clock: {before_s:.1f} s ({how}) → "
            f"{before_s / float(tour['fuzz_s']):.0f}× the time it takes now\n"  # type: ignore[arg-type]
            f"importing Hypothesis adds {hypothesis_s - cli_s:.3f} s to a process\n"
            "load average: {:.2f} {:.2f} {:.2f}\n".format(*os.getloadavg())
        )
    sys.stdout.write("targets met\n" if met else "TARGETS MISSED: a fuzz took 30 s or more\n")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
