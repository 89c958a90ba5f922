"""How long a <TAB> on `peach ask` takes, against `peach --help` measured in the same run.

Measures, on the same machine and in one run, the CPU time (user + system, which a busy
machine does not inflate the way it inflates wall time) of:

- ``python -c "import typer"``: the floor any Typer command line pays;
- ``peach --help``: the baseline a completion is compared with;
- the completion of ``peach validate --fo`` (an option: Typer's completion alone, no
  project read);
- the completion of ``peach ask /`` (bash protocol, as ``peach --install-completion``
  installs it) in a project made by ``peach init --streaming``;
- the same in a project of 300 endpoints (the generator of ``cli_startup.py``);
- the completer alone (``peach_cli.commands.completion.complete_target``) on that project, in-process.

Each command runs ``--runs`` times after one warm-up; the median and the minimum are
reported, with the ratios of the minimum (the run least disturbed by other work) to
``peach --help`` and to Typer's own completion. Target: a <TAB> on `peach ask` takes at most
1.5× `peach --help` (issue 21). It is answered before Typer is imported
(``completion.answer_fast``); Typer's own completion (the option case) imports pydantic to
convert parameter values, which is why it costs more than `--help`.

Usage::

    python benchmarks/completion.py            # 5 runs each
    python benchmarks/completion.py --runs 10 --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_startup import generate_project, peach_command  # noqa: E402

TARGET_X_HELP = 1.5
AS_PEACH = "import sys; sys.argv[0] = 'peach'; from peach_cli.cli import main; main()"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(
    command: list[str], runs: int, *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> list[float]:
    """CPU times of ``runs`` runs after one untimed warm-up."""
    environment = {**os.environ, **(env or {})}
    options = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, timeout=120)
    subprocess.run(command, env=environment, **options)  # type: ignore[call-overload]
    times = []
    for _ in range(runs):
        start = _children_cpu()
        subprocess.run(command, env=environment, **options)  # type: ignore[call-overload]
        times.append(_children_cpu() - start)
    return times


def completer_alone(project: Path, runs: int) -> list[float]:
    """The completer's own CPU time (import included) in a fresh interpreter, per run."""
    code = (
        "import time; t = time.process_time(); "
        "from peach_cli.commands.completion import complete_target; complete_target('/'); "
        "print(time.process_time() - t)"
    )
    return [
        float(
            subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                cwd=project,
                timeout=120,
                check=True,
            ).stdout
        )
        for _ in range(runs)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (default 5)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    options = parser.parse_args()

    completing = {
        "_PEACH_COMPLETE": "complete_bash",
        "COMP_WORDS": "peach ask /",
        "COMP_CWORD": "2",
    }
    as_peach = [sys.executable, "-c", AS_PEACH]
    with tempfile.TemporaryDirectory(prefix="peach-bench-") as tmp:
        subprocess.run(
            [*peach_command(), "init", "small", "--streaming"], cwd=tmp, check=True,
            stdout=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip
        small = Path(tmp) / "small"
        big = generate_project(Path(tmp) / "big")
        runs = options.runs
        measured = {
            'python -c "import typer"': time_command([sys.executable, "-c", "import typer"], runs),
            "peach --help": time_command([*as_peach, "--help"], runs),
            "complete `peach validate --fo`": time_command(
                as_peach, runs, cwd=small, env={**completing, "COMP_WORDS": "peach validate --fo"}
            ),
            "complete `peach ask /` (init project)": time_command(
                as_peach, runs, cwd=small, env=completing
            ),
            "complete `peach ask /` (300 endpoints)": time_command(
                as_peach, runs, cwd=big, env=completing
            ),
            "the completer alone (300 endpoints)": completer_alone(big, runs),
        }
    medians = {name: statistics.median(times) for name, times in measured.items()}
    minima = {name: min(times) for name, times in measured.items()}
    help_s = minima["peach --help"]
    typer_s = minima["complete `peach validate --fo`"]
    if options.json:
        ratios = {
            k: {"x_help": v / help_s, "x_typer_completion": v / typer_s} for k, v in minima.items()
        }
        print(json.dumps({"median_cpu_s": medians, "min_cpu_s": minima, "ratios": ratios}))
        return 0
    print(f"{'CPU seconds':42} {'median':>8} {'min':>8} {'/help':>7} {'/typer':>7}")
    for name, least in minima.items():
        verdict = ""
        if name.startswith("complete `peach ask"):
            ok = least / help_s <= TARGET_X_HELP
            verdict = f"  ≤ {TARGET_X_HELP}x --help {'ok' if ok else 'MISSED'}"
        print(
            f"{name:42} {medians[name]:7.3f}s {least:7.3f}s "
            f"{least / help_s:6.2f}x {least / typer_s:6.2f}x{verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
