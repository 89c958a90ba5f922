"""How fast peach runs a task, against the baseline of plain Python, in the same run.

- **one run**: ``peach task run`` of a trivial task, process start to exit, against
  ``python -c`` of the same extracted code (the defining cell and the call) with the same
  interpreter of the same env, ``--runs`` times each, alternating. Target: ≤ 1.5×.
  ``peach --help`` is timed alongside: the start-up every peach command pays.
- **trigger to start**: under a real ``peach dev`` (warm task worker), an endpoint calls
  ``trigger_task_with_event`` and the task's function records when it starts; the delay
  between the two, ``--triggers`` times, one at a time. Target: ≤ 0.2 s median.
- **on Ray** (``--ray``: a two-node cluster on loopback, as the tests start it): the project
  deployed with ``peach deploy`` (its scheduler, loop off), an endpoint triggers the task and
  the task records when it starts, against ``peach task run --address`` of the same task
  (from the command's start to the function's), ``--ray-triggers`` times each, alternating.
  Target: the triggered run starts no later than ``peach task run --address`` does (≤ 1×:
  both are a Ray job; the scheduler saves the CLI's start-up and upload check). Then the
  idle scheduler's CPU against the gateway's over ``--idle-seconds`` with no request and
  no run (target ≤ 1×: the scheduler waits on an event, the gateway polls Serve once a second).

Usage::

    python benchmarks/tasks.py                  # 10 runs, 30 triggers
    python benchmarks/tasks.py --runs 5 --json
    python benchmarks/tasks.py --runs 3 --triggers 5 --ray
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TASK_CELL = "def tick(payload):\n    print('tick', payload)\n    return payload\n"
ENDPOINT_CELL = (
    "import time\n"
    "from pipe_algorithms_lib.task_helpers import trigger_task_with_event\n\n"
    "def kick(n: int = 0, out: str = 'started.jsonl'):\n"
    "    return trigger_task_with_event('started', {'n': n, 'sent': time.time(), 'out': out})\n"
)
STARTED_CELL = (
    "def started(payload):\n"
    "    import json, time\n"
    "    now = time.time()\n"
    "    with open(payload.get('out', 'started.jsonl'), 'a') as out:\n"
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


def ray_figures(
    project: Path, triggers: int, idle_s: float, address: str | None, http_port: int | None
) -> dict[str, float]:
    """Trigger to start on Ray against ``peach task run --address``; the idle scheduler's
    CPU against the gateway's. On the cluster at ``address`` (on this machine), else on a
    two-node cluster started for it."""
    import contextlib
    import types

    from ray_cluster import RayHead

    if address is None:
        with RayHead(num_cpus=0, worker_cpus=4) as head:
            head.start_serve()
            return _ray_figures(project, triggers, idle_s, head)
    held = types.SimpleNamespace(dashboard_url=address, http_port=http_port or 8000)
    try:
        return _ray_figures(project, triggers, idle_s, held)
    finally:
        with contextlib.suppress(Exception):
            from peach_cli.deploy.deployer import delete

            delete("bench", address=address)


def _ray_figures(project: Path, triggers: int, idle_s: float, head: Any) -> dict[str, float]:
    import httpx

    from peach_cli.checks.build import build_plan
    from peach_cli.deploy.config import TaskOptions
    from peach_cli.deploy.deployer import deploy

    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    results = project / "ray-started.jsonl"
    url = deploy(
        plan, address=head.dashboard_url, http_port=head.http_port, timeout_s=300,
        tasks=TaskOptions(loop=False),
    ).url  # fmt: skip

    def started(count: int) -> float:
        deadline = time.monotonic() + 180
        while not results.exists() or len(results.read_text().splitlines()) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"run {count} did not start")
            time.sleep(0.01)
        return float(json.loads(results.read_text().splitlines()[count - 1])["delay"])

    triggered, direct, count = [], [], 0
    with httpx.Client(base_url=url, timeout=60) as client:
        for n in range(triggers + 1):  # the first ones warm the env up (the uv venv)
            client.get("/kick", params={"n": n, "out": str(results)}).raise_for_status()
            count += 1
            delay = started(count)
            if n:
                triggered.append(delay)
            time.sleep(2)  # the run is over (its job ends after the function returns)
            payload = json.dumps({"n": n, "sent": time.time(), "out": str(results)})
            subprocess.run(
                [sys.executable, "-m", "peach_cli.cli", "task", "run", "started"]
                + [str(project), "--address", head.dashboard_url, "--payload", payload],
                check=True, capture_output=True, timeout=300,
            )  # fmt: skip
            count += 1
            delay = started(count)
            if n:
                direct.append(delay)
    time.sleep(5)
    scheduler, gateway = idle_cpu(idle_s)
    return {
        "ray_triggered_start_median_s": statistics.median(triggered),
        "ray_task_run_address_start_median_s": statistics.median(direct),
        "ray_start_ratio": statistics.median(triggered) / statistics.median(direct),
        "scheduler_idle_core_share": scheduler / idle_s,
        "gateway_idle_core_share": gateway / idle_s,
        "scheduler_vs_gateway": scheduler / gateway if gateway else float("nan"),
    }


def idle_cpu(seconds: float) -> tuple[float, float]:
    """CPU seconds of the scheduler's replica and of the gateway's over ``seconds``."""
    import psutil

    def sample() -> dict[str, float]:
        found: dict[str, float] = {}
        for process in psutil.process_iter(["cmdline", "cpu_times"]):
            line = " ".join(process.info["cmdline"] or [])
            for name in ("ServeReplica:bench:tasks", "ServeReplica:bench:gateway"):
                if name in line:
                    times = process.info["cpu_times"]
                    found[name] = found.get(name, 0.0) + times.user + times.system
        return found

    before = sample()
    time.sleep(seconds)
    after = sample()
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    return used.get("ServeReplica:bench:tasks", 0.0), used.get("ServeReplica:bench:gateway", 0.0)


RATIO_TARGET = 1.5  # peach task run / python -c
TRIGGER_TARGET_S = 0.2  # median trigger to start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--triggers", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ray", action="store_true", help="also measure on a Ray cluster")
    parser.add_argument("--ray-triggers", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--address", help="a running cluster on this machine (its dashboard)")
    parser.add_argument("--http-port", type=int, help="its Serve HTTP port")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peach-bench-tasks-") as folder:
        project = write_project(Path(folder) / "project")
        figures = one_run(project, options.runs)
        figures.update(trigger_to_start(project, options.triggers))
        if options.ray:
            figures.update(
                ray_figures(
                    project,
                    options.ray_triggers,
                    options.idle_seconds,
                    options.address,
                    options.http_port,
                )
            )
    missed = []
    if options.ray and figures["ray_start_ratio"] > 1.0:
        missed.append(f"on Ray: trigger to start ratio {figures['ray_start_ratio']:.2f} > 1")
    if options.ray and figures["scheduler_vs_gateway"] > 1.0:
        missed.append(f"idle scheduler ÷ gateway {figures['scheduler_vs_gateway']:.2f} > 1")
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
    if options.ray:
        print(
            "on Ray, trigger to the task's function starting: "
            f"median {figures['ray_triggered_start_median_s']:.2f} s through the scheduler, "
            f"{figures['ray_task_run_address_start_median_s']:.2f} s with peach task run "
            f"--address, ratio {figures['ray_start_ratio']:.2f} (target ≤ 1)"
        )
        print(
            f"idle: the scheduler {figures['scheduler_idle_core_share']:.2%} of a core, the "
            f"gateway {figures['gateway_idle_core_share']:.2%}, ratio "
            f"{figures['scheduler_vs_gateway']:.2f} (target ≤ 1)"
        )
    print("targets met" if not missed else "TARGETS MISSED: " + "; ".join(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
