"""How fast the `peach` command line starts, against the tools a user already waits for.

Measures, in one run and on the same machine, the wall time of:

- ``python -c "import typer"``: the floor any Typer command line pays;
- ``serve --help``: Ray Serve's own command line, for comparison;
- ``peach --help``;
- ``peach validate examples/quickstart``;
- ``peach validate`` on a generated project of 300 endpoints (10 notebooks of 30 functions).

Each command runs ``--runs`` times after one warm-up; the median is reported with the ratio
to ``import typer`` and to ``serve --help``, and each ``peach`` figure against its target
(``--help`` ≤ 0.25 s, quickstart ≤ 0.35 s, 300 endpoints ≤ 1.5 s).

Usage::

    python benchmarks/cli_startup.py            # 5 runs each
    python benchmarks/cli_startup.py --runs 10 --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"

TARGETS = {
    "peach --help": 0.25,
    "peach validate quickstart": 0.35,
    "peach validate 300 endpoints": 1.5,
}

ENDPOINTS = 300
NOTEBOOKS = 10


def peach_command() -> list[str]:
    """The installed console script, else the module (same code, same imports)."""
    script = shutil.which("peach")
    if script:
        return [script]
    return [sys.executable, "-c", "from peach_cli.cli import main; main()"]


def serve_command() -> list[str] | None:
    """``serve --help`` (Ray Serve's CLI), the baseline; None when Serve is not installed."""
    script = shutil.which("serve")
    return [script, "--help"] if script else None


def time_command(command: list[str], runs: int) -> tuple[list[float], int, str]:
    """Wall times of ``runs`` runs (after one untimed warm-up), the first non-zero exit
    code of any run (0 when every run succeeded) and the end of that run's stderr."""
    warm = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    times = []
    code, error = warm.returncode, warm.stderr.decode(errors="replace")[-500:]
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120
        )
        times.append(time.perf_counter() - start)
        if not code and done.returncode:
            code, error = done.returncode, done.stderr.decode(errors="replace")[-500:]
    return times, code, error if code else ""


def _notebook(cells: list[str]) -> str:
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "id": f"c{index}",
                    "metadata": {},
                    "outputs": [],
                    "source": source.splitlines(keepends=True),
                }
                for index, source in enumerate(cells)
            ],
            "metadata": {"language_info": {"name": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )


def generate_project(folder: Path, endpoints: int = ENDPOINTS, notebooks: int = NOTEBOOKS) -> Path:
    """A valid project of ``endpoints`` endpoints spread over ``notebooks`` notebooks.

    Every endpoint has an ``init`` and a ``method`` in their own cells; every third one has a
    fallback; half of them run in a named py_environment.
    """
    (folder / "notebooks").mkdir(parents=True, exist_ok=True)
    per_notebook = -(-endpoints // notebooks)
    for n in range(notebooks):
        cells = ["def popular(size: int = 3):\n    return list(range(size))\n"]
        for i in range(n * per_notebook, min(endpoints, (n + 1) * per_notebook)):
            cells.append(
                f"def init_{i}():\n"
                f'    """State for endpoint {i}."""\n'
                f"    return {{'scale': {i}, 'items': list(range(20))}}\n"
            )
            cells.append(
                f"import math\n\n\ndef method_{i}(model, item_id: int, size: int = 5):\n"
                f'    """Endpoint {i}."""\n'
                f"    items = model['items'][item_id % 7 : item_id % 7 + size]\n"
                f"    return [math.floor(x * model['scale']) for x in items]\n"
            )
        (folder / "notebooks" / f"Endpoints{n}.ipynb").write_text(_notebook(cells))
    lines = [
        "codops: bench",
        "timeout_s: 30",
        "py_environments:",
        "  base: {dependencies: [orjson]}",
        '  ml: {dependencies: ["numpy>=1.24"]}',
        "endpoints:",
    ]
    for i in range(endpoints):
        notebook = f"notebooks/Endpoints{i // per_notebook}.ipynb"
        lines += [
            f"  endpoint_{i}:",
            f"    url: /bench/endpoint-{i}",
            f"    py_env: {'ml' if i % 2 else 'base'}",
            "    components:",
            "      main:",
            f"        notebook: {notebook}",
            f"        init: init_{i}",
            f"        method: method_{i}",
            "        args: {size: 5}",
            "        replicas: 1",
            "        memory: 512Mi",
        ]
        if i % 3 == 0:
            lines += [
                "      fallback:",
                f"        notebook: {notebook}",
                "        method: popular",
            ]
    (folder / "peach.yaml").write_text("\n".join(lines) + "\n")
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (default 5)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    options = parser.parse_args()

    peach = peach_command()
    results: dict[str, dict[str, float | int]] = {}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="peach-bench-") as tmp:
        big = generate_project(Path(tmp) / "big")
        commands: list[tuple[str, list[str] | None, int]] = [
            ('python -c "import typer"', [sys.executable, "-c", "import typer"], options.runs),
            ("serve --help", serve_command(), max(2, options.runs // 2)),
            ("peach --help", [*peach, "--help"], options.runs),
            ("peach validate quickstart", [*peach, "validate", str(QUICKSTART)], options.runs),
            ("peach validate 300 endpoints", [*peach, "validate", str(big)], options.runs),
        ]
        for name, command, runs in commands:
            if command is None:
                print(f"skipped {name}: not installed", file=sys.stderr)
                continue
            times, code, error = time_command(command, runs)
            if code != 0:
                failures.append(f"{name} exited {code}")
                print(f"{name} exited {code}:\n{error}", file=sys.stderr)
            results[name] = {
                "median_s": statistics.median(times),
                "min_s": min(times),
                "runs": runs,
                "exit_code": code,
            }

    typer_s = results.get('python -c "import typer"', {}).get("median_s")
    serve_s = results.get("serve --help", {}).get("median_s")
    for result in results.values():
        median = float(result["median_s"])
        if typer_s:
            result["x_import_typer"] = median / float(typer_s)
        if serve_s:
            result["x_serve_help"] = median / float(serve_s)

    for name, result in results.items():
        target = TARGETS.get(name)
        if target is not None and float(result["median_s"]) > target:
            failures.append(f"{name} median {result['median_s']:.3f} s over {target:.2f} s")

    if options.json:
        print(json.dumps({"results": results, "targets_s": TARGETS, "failures": failures}))
    else:
        print(f"{'command':32} {'median':>8} {'min':>8} {'/typer':>7} {'/serve':>7}  target")
        for name, result in results.items():
            target = TARGETS.get(name)
            verdict = ""
            if result["exit_code"] != 0:
                verdict = f"FAILED: exited {result['exit_code']}"
            elif target is not None:
                ok = float(result["median_s"]) <= target
                verdict = f"≤ {target:.2f} s {'ok' if ok else 'MISSED'}"
            print(
                f"{name:32} {result['median_s']:7.3f}s {result['min_s']:7.3f}s "
                f"{result.get('x_import_typer', float('nan')):6.2f}x "
                f"{result.get('x_serve_help', float('nan')):6.2f}x  {verdict}"
            )
        print("targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures))
    return 0 if not failures else 1  # a failed command or a missed target fails the run


if __name__ == "__main__":
    sys.exit(main())
