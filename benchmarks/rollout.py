"""A code change rolled out under steady load: peach against a bare Serve app (issue 48).

On one fresh two-node cluster (a head offering no CPUs and a worker node with 4, on loopback,
as the deploy tests use), for one replica and for two:

- **peach**: the rollout project (``tests/rollout_support.py``: a component whose ``init``
  takes 3 s, a unary ``/hello`` and a one-second ``/ticks`` stream, both from one cell)
  deployed with ``peach deploy``; then ``--rate`` requests a second, open loop (`peach
  bench`'s generator, one request in ten a stream), and after a steady window the cell's
  code changes and ``peach deploy`` rolls it out while the load runs;
- **bare Serve**: the same project as a bare Serve app with Ray's defaults
  (``bare_serve_rollout.py``: an ingress calling a model deployment by handle), whose
  model gets a new version of its code (its runtime_env changes) through the same REST API,
  under the same load, in the same run.

Each prints: requests lost (any answer but 200, or none), streams cut, the p99 of the unary
requests due during the rollout (from the first replica Serve changed to the last old one
gone) against the p99 of the steady window before it, and the slowest. Target for peach:
0 lost, 0 cut, rollout p99 ≤ 2 × steady p99, with one replica and with two.

Usage::

    python benchmarks/rollout.py                 # replicas 1 and 2, 40 requests a second
    python benchmarks/rollout.py --replicas 1 --rate 40 --steady 10 --json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from deploy import put_beside  # noqa: E402
from proc_sampler import ProcSampler  # noqa: E402
from ray_cluster import RayHead  # noqa: E402
from rollout_support import (  # noqa: E402
    INIT_S,
    Figures,
    RolloutLoad,
    figures,
    p99,
    replica_ids,
    watch_rollout,
    write_rollout_project,
)

ENV = dict(os.environ, NO_COLOR="1", COLUMNS="200")
PEACH_APP, PEACH_PREFIX = "rollout", "/rollout"
BARE_APP, BARE_PREFIX = "bare-rollout", "/bare"
WARMUP_S = 2.0
SETTLE_S = 2.0
TARGET_RATIO = 2.0
SETUP_MARGIN_S = 0.5
"""``--trace``: requests due this close to Ray's ``setup_worker.py`` running count as its."""


def peach_deploy(project: Path, head: RayHead) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", "deploy", str(project),
         "--address", head.dashboard_url, "--http-port", str(head.http_port),
         "--route-prefix", PEACH_PREFIX],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"peach deploy failed:\n{result.stderr}")


def bare_deploy(head: RayHead, *, version: int, replicas: int, surge: int | None = None) -> None:
    """PUT the bare app (model ``version``, ``replicas``) beside the other applications:
    Ray's defaults but for ``max_ongoing_requests``, peach's (Serve's 5 would queue the
    streams)."""
    from peach_cli.deploy.config import COMPONENT_MAX_ONGOING, GATEWAY_MAX_ONGOING

    env_vars = {"ROLLOUT_VERSION": str(version), "ROLLOUT_INIT_S": str(INIT_S)}
    model = {
        "name": "Model",
        "num_replicas": replicas,
        "max_ongoing_requests": COMPONENT_MAX_ONGOING,
        "ray_actor_options": {"num_cpus": 0.1, "runtime_env": {"env_vars": env_vars}},
    }
    if surge is not None:
        model["max_surge_percent"] = surge
    ingress = {"name": "Ingress", "max_ongoing_requests": GATEWAY_MAX_ONGOING}
    put_beside(
        head,
        "bare_serve_rollout",
        {"name": BARE_APP, "route_prefix": BARE_PREFIX, "deployments": [model, ingress]},
    )


def rollout(
    head: RayHead,
    app: str,
    prefix: str,
    names: list[str],
    change,
    rate: float,
    steady_s: float,
    trace: bool = False,
) -> Figures:
    """Steady load on ``prefix``; ``change()`` (a deploy) after the steady window; the
    figures once the rollout Serve shows has ended. ``trace``: print where the CPU went."""
    sampler = ProcSampler().start() if trace else None
    load = RolloutLoad(f"{head.serve_url}{prefix}", rate=rate).start()
    time.sleep(WARMUP_S + steady_s)
    before = replica_ids(head.dashboard_url, app)
    asked = time.monotonic()
    states: list = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        deploying = pool.submit(change)
        began, ended = watch_rollout(head.dashboard_url, app, before, names, trace=states)
        done = time.monotonic()
        deploying.result()
    time.sleep(SETTLE_S)
    timeline = load.finish()
    result = figures(timeline, steady=(load.began + WARMUP_S, asked), rollout=(began, ended))
    if sampler is not None:
        sampler.stop()
        print_trace(app, sampler, timeline, result, states, (load.began + WARMUP_S, asked),
                    (began, ended), asked, done)  # fmt: skip
    return result


def print_trace(app, sampler, timeline, result, states, steady, window, asked, done) -> None:
    """Where the CPU went in the steady window, the rollout window and each half-second of
    it; the replicas' states as Serve showed them; the slow requests by when they were due."""
    print(f"--- {app}: {result.line()}", flush=True)
    print(f"  steady window (CPU by process title, cores, nice):\n{sampler.table(*steady)}")
    print(
        f"  deploy asked -> rollout began {window[0] - asked:.1f} s, ended {window[1] - asked:.1f} s"
    )
    print(f"  deploy asked -> rollout window end:\n{sampler.table(asked, window[1])}")
    last = None
    for at, item in states:
        shown = {k: v for k, v in item.items()}
        if shown != last:
            print(f"  {at - asked:6.2f} s  {shown}")
            last = shown
    setup = sampler.busy("setup_worker.py", *window)
    if setup:
        low, high = setup[0][0] - SETUP_MARGIN_S, setup[-1][1] + SETUP_MARGIN_S
        rest = [
            a.seconds * 1000
            for a in timeline.answers
            if not a.stream and a.ok and window[0] <= a.due < window[1]
            and not any(b - SETUP_MARGIN_S <= a.due < e + SETUP_MARGIN_S for b, e in setup)
        ]  # fmt: skip
        nices = sampler.by_title(low, high).get("python setup_worker.py", (0.0, set()))[1]
        print(
            f"  Ray's setup_worker.py (nice {sorted(nices)}) ran {len(setup)} sample(s) between "
            f"{low - asked:.1f} and {high - asked:.1f} s; the rollout p99 of the requests due "
            f"outside it (±{SETUP_MARGIN_S:g} s): {p99(rest):.0f} ms "
            f"({p99(rest) / result.steady_p99_ms:.1f}x steady), {len(rest)} requests"
        )
    slow = 2 * result.steady_p99_ms
    unary = [a for a in timeline.answers if not a.stream and asked - 1 <= a.due <= window[1] + 1]
    step = 0.5
    start = asked - 1
    while start < window[1] + 1:
        inside = [a for a in unary if start <= a.due < start + step]
        late = [a for a in inside if a.seconds * 1000 > slow]
        if late:
            worst = max(a.seconds for a in late) * 1000
            rows = sorted(sampler.by_title(start, start + step + worst / 1000).items(),
                          key=lambda item: -item[1][0])[:5]  # fmt: skip
            cpu = ", ".join(f"{t[:40]} {c:.2f} n{sorted(n)}" for t, (c, n) in rows)
            print(f"  {start - asked:6.1f} s: {len(late)}/{len(inside)} over {slow:.0f} ms, "
                  f"worst {worst:.0f} ms | {cpu}")  # fmt: skip
        start += step


def measure(
    head: RayHead,
    replicas: int,
    version: int,
    rate: float,
    steady_s: float,
    work: Path,
    trace: bool = False,
) -> dict:
    project = work / "project"
    peach_names = ["hello.main", "ticks.main"]
    write_rollout_project(project, version=version, replicas=replicas, codops=PEACH_APP)
    peach_deploy(project, head)
    before = replica_ids(head.dashboard_url, BARE_APP)
    bare_deploy(head, version=version, replicas=replicas)
    watch_rollout(head.dashboard_url, BARE_APP, before, ["Model"])

    def peach_change() -> None:
        write_rollout_project(project, version=version + 1, replicas=replicas, codops=PEACH_APP)
        peach_deploy(project, head)

    peach = rollout(head, PEACH_APP, PEACH_PREFIX, peach_names, peach_change, rate, steady_s, trace)
    bare = rollout(
        head, BARE_APP, BARE_PREFIX, ["Model"],
        lambda: bare_deploy(head, version=version + 1, replicas=replicas), rate, steady_s, trace,
    )  # fmt: skip
    return {
        "replicas": replicas,
        "peach": vars(peach) | {"ratio": peach.ratio},
        "bare_serve": vars(bare) | {"ratio": bare.ratio},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, action="append", help="1 and 2 by default")
    parser.add_argument("--rate", type=float, default=40.0, help="requests a second")
    parser.add_argument("--steady", type=float, default=10.0, help="seconds of steady load first")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--trace", action="store_true", help="print where the CPU went (a /proc sampler)"
    )
    args = parser.parse_args()
    counts = args.replicas or [1, 2]
    head = RayHead(num_cpus=0, worker_cpus=4).start()
    results = []
    try:
        head.start_serve()
        with tempfile.TemporaryDirectory(prefix="peach-rollout-") as work:
            for number, replicas in enumerate(counts):
                results.append(
                    measure(
                        head,
                        replicas,
                        1 + 2 * number,
                        args.rate,
                        args.steady,
                        Path(work),
                        args.trace,
                    )
                )
    finally:
        head.stop()
    missed = []
    for result in results:
        peach = result["peach"]
        if peach["lost"] or peach["cut"] or not peach["ratio"] <= TARGET_RATIO:
            missed.append(
                f"{result['replicas']} replica(s): lost {peach['lost']}, cut {peach['cut']}, "
                f"rollout p99 {peach['ratio']:.1f}x steady"
            )
    if args.json:
        print(
            json.dumps(
                {"rate": args.rate, "steady_s": args.steady, "results": results, "missed": missed},
                indent=2,
            )
        )
    else:
        print(
            f"a code change rolled out under {args.rate:g} requests a second (1 in 10 a 1 s stream), "
            f"init {INIT_S:g} s, 2-node cluster (worker 4 CPUs)"
        )
        for result in results:
            print(f"{result['replicas']} replica(s)")
            for key, label in (("peach", "peach     "), ("bare_serve", "bare Serve")):
                item = result[key]
                print(
                    f"  {label} lost {item['lost']}/{item['requests']}, streams cut "
                    f"{item['cut']}/{item['streams']}, steady p99 {item['steady_p99_ms']:.0f} ms, "
                    f"rollout p99 {item['rollout_p99_ms']:.0f} ms ({item['ratio']:.1f}x), "
                    f"max {item['rollout_max_ms']:.0f} ms, rollout {item['rollout_s']:.1f} s"
                    + (f", failures: {'; '.join(item['reasons'])}" if item["reasons"] else "")
                )
        print(f"target (peach): 0 lost, 0 cut, rollout p99 <= {TARGET_RATIO:g}x steady p99")
        print("targets met" if not missed else f"TARGETS MISSED: {'; '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
