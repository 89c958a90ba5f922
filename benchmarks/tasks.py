"""How fast peach runs a task, against the baseline of plain Python, in the same run.

- **one run**: ``peach task run`` of a trivial task, process start to exit, against
  ``python -c`` of the same extracted code (the defining cell and the call) with the same
  interpreter of the same env, ``--runs`` times each, alternating. Target: ≤ 1.5×.
  ``peach --help`` is timed alongside: the start-up every peach command pays.
- **trigger to start**: under a real ``peach dev`` (warm task worker), an endpoint calls
  ``trigger_task_with_event`` and the task's function records when it starts; the delay
  between the two, ``--triggers`` times, one at a time. Target: ≤ 0.2 s median.

Usage::

    python benchmarks/tasks.py                  # 10 runs, 30 triggers
    python benchmarks/tasks.py --runs 5 --json
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TASK_CELL = "def tick(payload):\n    print('tick', payload)\n    return payload\n"
ENDPOINT_CELL = (
    "import time\n"
    "from pipe_algorithms_lib.task_helpers import trigger_task_with_event\n\n"
    "def kick(n: int = 0):\n"
    "    return trigger_task_with_event('started', {'n': n, 'sent': time.time()})\n"
)
STARTED_CELL = (
    "def started(payload):\n"
    "    import json, time\n"
    "    now = time.time()\n"
    "    with open('started.jsonl', 'a') as out:\n"
    "        out.write(json.dumps({'n': payload['n'], 'delay': now - payload['sent']}) + '\\n')\n"
)
CONF = """\
codops: bench
endpoints:
  kick: {url: /kick, components: {main: {notebook: E.ipynb, method: kick}}}
tasks:
  tick: {notebook: T.ipynb, method: tick}
  started: {notebook: T.ipynb, method: started}
"""


def write_project(folder: Path) -> Path:
    from projectkit import write_project as write

    return write(folder, CONF, {"E.ipynb": [ENDPOINT_CELL], "T.ipynb": [TASK_CELL, STARTED_CELL]})


def env_python(project: Path) -> str:
    """The interpreter of the project's base env (built now if needed)."""
    from peach_cli.envs import EnvSpec, ensure_env

    return str(ensure_env(EnvSpec("base", ())).python)


def timed(command: list[str], cwd: Path) -> float:
    began = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - began


def one_run(project: Path, runs: int) -> dict[str, float]:
    python = env_python(project)
    peach = [sys.executable, "-m", "peach_cli.cli", "task", "run", "tick", str(project)]
    plain = [python, "-c", TASK_CELL + "print(repr(tick(None)))\n"]
    helps = [sys.executable, "-m", "peach_cli.cli", "--help"]
    timed(peach, project)  # the env cache and the staged runtime exist from here on
    ours, theirs, floor = [], [], []
    for _ in range(runs):
        ours.append(timed(peach, project))
        theirs.append(timed(plain, project))
        floor.append(timed(helps, project))
    peach_s, plain_s = statistics.median(ours), statistics.median(theirs)
    return {
        "peach_task_run_s": peach_s,
        "python_c_s": plain_s,
        "peach_help_s": statistics.median(floor),
        "ratio": peach_s / plain_s,
    }


def trigger_to_start(project: Path, triggers: int) -> dict[str, float]:
    import httpx

    log = project / "dev.log"
    with log.open("wb") as out:
        dev = subprocess.Popen(
            [sys.executable, "-m", "peach_cli.cli", "dev", str(project), "--port", "0"]
            + ["--no-reload"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, NO_COLOR="1"),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            found = re.search(r"serving on (http://\S+)", log.read_text())
            url = found.group(1) if found else None
            if time.monotonic() > deadline:
                raise SystemExit(f"peach dev did not start:\n{log.read_text()}")
            time.sleep(0.05)
        results = project / "started.jsonl"
        with httpx.Client(base_url=url, timeout=30) as client:
            while client.get("/_peach/health").json().get("ready") is not True:
                time.sleep(0.05)
            for n in range(triggers + 1):  # the first one only warms the task's env up
                client.get("/kick", params={"n": n}).raise_for_status()
                wait_until = time.monotonic() + 30
                while not results.exists() or len(results.read_text().splitlines()) <= n:
                    if time.monotonic() > wait_until:
                        raise SystemExit(f"run {n} did not start:\n{log.read_text()}")
                    time.sleep(0.005)
                time.sleep(0.6)  # a spare worker is back (the refill waits 0.5 s)
        delays = [json.loads(line)["delay"] for line in results.read_text().splitlines()[1:]]
    finally:
        os.killpg(dev.pid, signal.SIGINT)
        dev.wait(timeout=30)
    return {
        "trigger_to_start_median_s": statistics.median(delays),
        "trigger_to_start_max_s": max(delays),
    }


RATIO_TARGET = 1.5  # peach task run / python -c
TRIGGER_TARGET_S = 0.2  # median trigger to start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--triggers", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peach-bench-tasks-") as folder:
        project = write_project(Path(folder) / "project")
        figures = one_run(project, options.runs)
        figures.update(trigger_to_start(project, options.triggers))
    missed = []
    if figures["ratio"] > RATIO_TARGET:
        missed.append(f"one run: ratio {figures['ratio']:.2f} > {RATIO_TARGET}")
    if figures["trigger_to_start_median_s"] > TRIGGER_TARGET_S:
        median_ms = figures["trigger_to_start_median_s"] * 1000
        missed.append(f"trigger to start: median {median_ms:.0f} ms > 200 ms")
    if options.json:
        print(json.dumps({**figures, "targets_missed": missed}, indent=2))
        return 0 if not missed else 1
    print(
        f"peach task run (trivial task): {figures['peach_task_run_s']:.3f} s, "
        f"python -c of the same code in the same env: {figures['python_c_s']:.3f} s, "
        f"ratio {figures['ratio']:.2f} (target ≤ 1.5); peach --help: "
        f"{figures['peach_help_s']:.3f} s"
    )
    print(
        f"trigger to the task's function starting, warm worker, under peach dev: "
        f"median {figures['trigger_to_start_median_s'] * 1000:.0f} ms, "
        f"max {figures['trigger_to_start_max_s'] * 1000:.0f} ms (target ≤ 200 ms)"
    )
    print("targets met" if not missed else "TARGETS MISSED: " + "; ".join(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
