"""How fast the `peach` command line starts, against the tools a user already waits for.

Measures, in one run and on the same machine, the wall time and the CPU time of:

- ``python -c "import typer"``: the floor any Typer command line pays, and the baseline;
- ``serve --help``: Ray Serve's own command line, for comparison;
- ``peach --help``;
- ``peach validate examples/quickstart``;
- ``peach validate`` on a generated project of 300 endpoints (10 notebooks of 30 functions);
- every command's start: ``peach COMMAND ...`` up to the first line of its work (the
  ``run_*`` function ``cli.py`` hands it to), its CPU time from the process's start.

Each command runs ``--runs`` times after one warm-up; the median and the minimum are
reported, wall and CPU, with the ratio of the CPU time to that of ``import typer`` in the
same run. The commands run in rounds (each once a round), so a burst of load on a shared
machine weighs on all of them alike. The targets were set on a quiet machine where ``import
typer`` takes 0.09 s: ``--help`` ≤ 0.15 s, quickstart ≤ 0.30 s, 300 endpoints ≤ 1.5 s, any
command's start ≤ 0.25 s of CPU. On a shared machine the seconds move with the load, and the
wall time counts the other processes too, so each target is checked as the same ratio of CPU
time to ``import typer``'s (``--help`` ≤ 1.67x, quickstart ≤ 3.33x, a start ≤ 2.78x), on the
medians (``--by min``: the minimums). ``--commands`` limits the starts measured.

Usage::

    python benchmarks/cli_startup.py            # 5 runs each
    python benchmarks/cli_startup.py --runs 15 --json
    python benchmarks/cli_startup.py --runs 9 --commands status,validate
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"

TYPER_QUIET_S = 0.09
"""``import typer`` on the quiet machine the targets were set on (wall and CPU alike)."""

TARGETS = {
    "peach --help": 0.15,
    "peach validate quickstart": 0.30,
    "peach validate 300 endpoints": 1.5,
}
"""Wall seconds on the quiet machine; checked as a ratio to ``import typer``."""

START_TARGET_CPU_S = 0.25
"""CPU seconds from a command's process start to its first line of work (quiet machine)."""

BASELINE = 'python -c "import typer"'

ENDPOINTS = 300
NOTEBOOKS = 10

STARTS: dict[str, tuple[list[str], str]] = {
    "init": (["init", "{tmp}/new"], "init.run_init"),
    "validate": (["validate", "{quickstart}"], "validate.run_validate"),
    "schema": (["schema"], "validate.run_schema"),
    "openapi": (["openapi", "{quickstart}"], "openapi.run_openapi"),
    "dev": (["dev", "{quickstart}", "--port", "0"], "dev.run_dev"),
    "ask": (["ask", "/hello", "name=x"], "ask.run_ask"),
    "test": (["test", "{quickstart}"], "test.run_test"),
    "fuzz": (["fuzz", "{quickstart}"], "fuzz.run_fuzz"),
    "replay": (["replay", "{tmp}/requests.jsonl"], "replay.run_replay"),
    "bench": (["bench", "/hello", "-n", "10"], "bench.run_bench"),
    "profile": (["profile", "/hello"], "profile.run_profile"),
    "deploy": (["deploy", "{quickstart}"], "deploy.run_deploy"),
    "status": (["status"], "deploy.run_status"),
    "delete": (["delete", "quickstart"], "deploy.run_delete"),
    "logs": (["logs"], "logs.run_logs"),
    "env list": (["env", "list", "{quickstart}"], "env.run_env_list"),
    "env build": (["env", "build", "{quickstart}"], "env.run_env_build"),
    "env prune": (["env", "prune"], "env.run_env_prune"),
    "task list": (["task", "list", "{quickstart}"], "task.run_task_list"),
    "task run": (["task", "run", "refresh", "{quickstart}"], "task.run_task_run"),
    "doctor": (["doctor", "{quickstart}"], "doctor.run_doctor"),
}
"""Each command's words, and the function of ``peach_cli.commands`` its work starts in."""

STOP_AT_FIRST_LINE = """
import importlib.util, os, sys, time
module_name, function = "peach_cli.commands." + sys.argv[1], sys.argv[2]

class StopAtFirstLine:
    def find_spec(self, fullname, path, target=None):
        if fullname != module_name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        exec_module = spec.loader.exec_module

        def exec_then_stop(module):
            exec_module(module)

            def first_line(*args, **kwargs):
                os.write(1, f"FIRST-LINE {time.process_time()!r}\\n".encode())
                os._exit(0)

            setattr(module, function, first_line)

        spec.loader.exec_module = exec_then_stop
        return spec

sys.meta_path.insert(0, StopAtFirstLine())
sys.argv = ["peach", *sys.argv[3:]]
from peach_cli.cli import main
main()
"""
"""Runs ``peach`` with the command's ``run_*`` function replaced, once its module is
imported, by one that prints the process's CPU time so far and exits."""


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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(command: list[str], runs: int) -> tuple[list[float], int, str]:
    """Wall times of ``runs`` runs (after one untimed warm-up), the first non-zero exit
    code of any run (0 when every run succeeded) and the end of that run's stderr."""
    times, _, code, error = time_and_cpu(command, runs)
    return times, code, error


def time_and_cpu(command: list[str], runs: int) -> tuple[list[float], list[float], int, str]:
    """Wall and CPU (user + system) seconds of ``runs`` runs after one untimed warm-up, the
    first non-zero exit code (0 when every run succeeded) and the end of that run's stderr."""
    times, cpus = [], []
    code, error = 0, ""
    for run in range(runs + 1):
        wall, cpu, done_code, done_error = run_once(command)
        if run:
            times.append(wall)
            cpus.append(cpu)
        if not code and done_code:
            code, error = done_code, done_error
    return times, cpus, code, error


def run_once(
    command: list[str],
    env: dict[str, str] | None = None,
    first_line: bool = False,
    cwd: str | None = None,
) -> tuple[float, float, int, str]:
    """One run: its wall seconds, its CPU seconds, its exit code and the end of its stderr.

    With ``first_line`` (a ``STOP_AT_FIRST_LINE`` command) the CPU seconds are those the
    process had used when its work began, and a run that never got there is an error.
    ``cwd`` should not be the repository: ``python -c`` would import peach from there
    before ``PYTHONPATH`` (how to time another checkout's code)."""
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, timeout=120, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    used = _children_cpu() - cpu
    error = done.stderr.decode(errors="replace")[-500:]
    if not first_line:
        return wall, used, done.returncode, error if done.returncode else ""
    marks = [line for line in done.stdout.splitlines() if line.startswith(b"FIRST-LINE ")]
    if done.returncode or not marks:
        return wall, used, done.returncode or 1, f"never reached its first line: {error}"
    return wall, float(marks[-1].split()[1]), 0, ""


def user_environment(pycache: Path) -> dict[str, str]:
    """The environment of the timed commands: bytecode cached (in ``pycache``, written by
    the warm-up round), as for an installed package; this repository's test environment
    sets ``PYTHONDONTWRITEBYTECODE``, which would compile peach's own modules on every run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


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


def _ratio_targets() -> dict[str, float]:
    """Each target as a ratio to ``import typer``, as on the quiet machine it was set on."""
    ratios = {name: seconds / TYPER_QUIET_S for name, seconds in TARGETS.items()}
    ratios.update({f"start {name}": START_TARGET_CPU_S / TYPER_QUIET_S for name in STARTS})
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (default 5)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--by", choices=("median", "min"), default="median", help="check targets on this"
    )
    parser.add_argument(
        "--commands",
        default=",".join(STARTS),
        help="the commands whose start is measured, comma-separated (default: all)",
    )
    options = parser.parse_args()
    starts = [name.strip() for name in options.commands.split(",") if name.strip()]
    unknown = [name for name in starts if name not in STARTS]
    if unknown:
        parser.error(f"no such command: {', '.join(unknown)} (known: {', '.join(STARTS)})")

    peach = peach_command()
    results: dict[str, dict[str, float | int | str]] = {}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="peach-bench-") as tmp:
        big = generate_project(Path(tmp) / "big")
        env = user_environment(Path(tmp) / "pycache")
        places = {"tmp": tmp, "quickstart": str(QUICKSTART)}
        measured: list[tuple[str, list[str], bool]] = [
            (BASELINE, [sys.executable, "-c", "import typer"], False),
            ("peach --help", [*peach, "--help"], False),
            ("peach validate quickstart", [*peach, "validate", str(QUICKSTART)], False),
            ("peach validate 300 endpoints", [*peach, "validate", str(big)], False),
        ]
        for name in starts:
            words, stop_at = STARTS[name]
            module, function = stop_at.rsplit(".", 1)
            command = [sys.executable, "-c", STOP_AT_FIRST_LINE, module, function]
            measured.append((f"start {name}", command + [w.format(**places) for w in words], True))
        serve = serve_command()
        if serve is None:
            print("skipped serve --help: not installed", file=sys.stderr)
        else:  # once: it takes seconds, and is only a comparison
            wall, cpu, code, error = run_once(serve, env, cwd=tmp)
            if code:
                failures.append(f"serve --help exited {code}")
            results["serve --help"] = {
                "median_s": wall, "min_s": wall, "cpu_median_s": cpu, "cpu_min_s": cpu,
                "runs": 1, "exit_code": code,
            }  # fmt: skip
        walls: dict[str, list[float]] = {name: [] for name, _, _ in measured}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in measured}
        codes: dict[str, int] = {}
        # rounds: every command once a round, so a burst of load on the shared machine
        # weighs on all of them alike; round 0 warms the disk and bytecode caches
        for round_ in range(options.runs + 1):
            for name, command, first_line in measured:
                if codes.get(name):
                    continue
                wall, cpu, code, error = run_once(command, env, first_line, cwd=tmp)
                if code:
                    codes[name] = code
                    failures.append(f"{name} exited {code}")
                    print(f"{name} exited {code}:\n{error}", file=sys.stderr)
                elif round_:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        for name, _, _ in measured:
            if not walls[name]:
                continue
            results[name] = {
                "median_s": statistics.median(walls[name]),
                "min_s": min(walls[name]),
                "cpu_median_s": statistics.median(cpus[name]),
                "cpu_min_s": min(cpus[name]),
                "runs": len(walls[name]),
                "exit_code": codes.get(name, 0),
            }

    base = results.get(BASELINE)
    serve_s = results.get("serve --help", {}).get("median_s")
    key = "median_s" if options.by == "median" else "min_s"
    for result in results.values():
        # CPU, not wall: on a shared machine the wall time measures the other processes
        # too; on a quiet one the two are the same for these single-threaded starts
        if base:
            result["x_import_typer"] = float(result[f"cpu_{key}"]) / float(base[f"cpu_{key}"])
        if serve_s:
            result["x_serve_help"] = float(result["median_s"]) / float(serve_s)

    ratio_targets = _ratio_targets()
    for name, result in results.items():
        target = ratio_targets.get(name)
        if target is not None and "x_import_typer" in result:
            if float(result["x_import_typer"]) > target:
                failures.append(f"{name} {result['x_import_typer']:.2f}x over {target:.2f}x")

    if options.json:
        print(
            json.dumps(
                {
                    "results": results,
                    "by": options.by,
                    "targets_x_import_typer": ratio_targets,
                    "failures": failures,
                }
            )
        )
        return 0 if not failures else 1
    print(
        f"{'command':30} {'wall med':>8} {'min':>7} {'cpu med':>8} {'min':>7} "
        f"{'/typer':>7}  target (CPU {options.by} / import typer's)"
    )
    for name, result in results.items():
        target = ratio_targets.get(name)
        verdict = ""
        if result["exit_code"] != 0:
            verdict = f"FAILED: exited {result['exit_code']}"
        elif target is not None:
            ok = float(result["x_import_typer"]) <= target
            quiet = START_TARGET_CPU_S if name.startswith("start ") else TARGETS[name]
            verdict = f"<= {target:.2f}x ({quiet:.2f} s quiet) {'ok' if ok else 'MISSED'}"
        print(
            f"{name:30} {result['median_s']:7.3f}s {result['min_s']:6.3f}s "
            f"{result['cpu_median_s']:7.3f}s {result['cpu_min_s']:6.3f}s "
            f"{result.get('x_import_typer', float('nan')):6.2f}x  {verdict}"
        )
    print("targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures))
    return 0 if not failures else 1  # a failed command or a missed target fails the run


if __name__ == "__main__":
    sys.exit(main())
