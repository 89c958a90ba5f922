"""A spike for issue 48: does a code change applied *inside* the running replica — Serve's
``user_config`` and the deployment's ``reconfigure`` — keep the replica serving?

Ray Serve (2.60) applies a change that only touches a deployment's ``user_config`` without a
new process: ``deployment_state._stop_or_update_outdated_version_replicas`` calls
``reconfigure`` on each RUNNING replica and files it as UPDATING. The question is whether
the routers keep sending it requests meanwhile. This measures what a client sees: on a
fresh two-node cluster (as `benchmarks/rollout.py`), a bare Serve app
(``bare_serve_rollout.py``'s ``in_place``) with ``--replicas`` model replicas (1 by default),
``--rate`` requests a second open loop (one in ten a one-second stream), and after a steady
window its ``user_config`` changes (a new version) through the REST API, with a
``reconfigure`` that takes 3 s of ``asyncio.sleep``, then 0.5 s of CPU in a thread, then
nothing at all (what a release record in the gateway's ``user_config`` costs). Printed for
each: requests lost, streams cut, the p99 of the unary requests due from the PUT to the end
of the replica's ``reconfigure`` against the steady p99, the slowest, how many calls the
replica itself handled while it reconfigured (0: the router sent it none), and whether the
replica (id and pid) stayed the same. Figures and the Ray code path: ``RESULTS.md``.

Usage::

    python benchmarks/rollout_reconfigure.py [--rate 40] [--steady 10] [--replicas 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from deploy import put_beside  # noqa: E402
from ray_cluster import RayHead  # noqa: E402
from rollout_support import RolloutLoad, figures, replica_ids, replica_pids  # noqa: E402

APP, PREFIX = "reconfigure", "/reconf"
WARMUP_S = 2.0
SETTLE_S = 2.0
TARGET_RATIO = 2.0
CASES = (("sleep", 3.0), ("cpu", 0.5), ("sleep", 0.0))


def deploy(head: RayHead, version: int, mode: str, seconds: float, replicas: int) -> None:
    from peach_cli.deploy.config import COMPONENT_MAX_ONGOING, GATEWAY_MAX_ONGOING

    model = {
        "name": "InPlaceModel",
        "num_replicas": replicas,
        "max_ongoing_requests": COMPONENT_MAX_ONGOING,
        "user_config": {"version": version, "mode": mode, "seconds": seconds},
    }
    ingress = {"name": "Ingress", "max_ongoing_requests": GATEWAY_MAX_ONGOING}
    put_beside(
        head,
        "bare_serve_rollout",
        {"name": APP, "route_prefix": PREFIX, "deployments": [model, ingress]},
        attribute="in_place",
    )


def wait_for_version(url: str, version: int, replicas: int, timeout_s: float = 240) -> dict:
    """Poll ``/hello`` until ``4 × replicas`` answers in a row carry ``version``; the last
    answer (what the replica says it saw)."""
    deadline = time.monotonic() + timeout_s
    streak = 0
    with httpx.Client(timeout=30) as client:
        while True:
            try:
                answer = client.get(f"{url}/hello")
                body = answer.json() if answer.status_code == 200 else {}
            except (httpx.HTTPError, ValueError):
                body = {}
            streak = streak + 1 if body.get("version") == version else 0
            if streak >= 4 * replicas:
                return body
            assert time.monotonic() < deadline, f"version {version} never answered"
            time.sleep(0.05)


def measure(head: RayHead, mode: str, seconds: float, version: int, replicas: int,
            rate: float, steady_s: float) -> dict:  # fmt: skip
    url = f"{head.serve_url}{PREFIX}"
    deploy(head, version, mode, seconds, replicas)
    wait_for_version(url, version, replicas)
    ids, pids = replica_ids(head.dashboard_url, APP), replica_pids(head.dashboard_url, APP)
    load = RolloutLoad(url, rate=rate).start()
    time.sleep(WARMUP_S + steady_s)
    asked = time.monotonic()
    deploy(head, version + 1, mode, seconds, replicas)
    seen = wait_for_version(url, version + 1, replicas)
    # the replica's reconfigure (wall clock, same machine) on the load's monotonic clock
    offset = time.monotonic() - time.time()
    began, applied = (at + offset for at in seen["last_reconfigure"])
    time.sleep(SETTLE_S)
    timeline = load.finish()
    result = figures(timeline, steady=(load.began + WARMUP_S, asked), rollout=(asked, applied))
    same = (
        replica_ids(head.dashboard_url, APP) == ids
        and replica_pids(head.dashboard_url, APP) == pids
    )
    in_window = [a for a in timeline.answers if asked <= a.due < applied]
    return {
        "mode": mode,
        "seconds": seconds,
        "replicas": replicas,
        **vars(result),
        "ratio": result.ratio,
        "answered_in_window": sum(1 for a in in_window if a.ok),
        "reconfigure_began_s": began - asked,
        "reconfigure_s": applied - began,
        "handled_while_reconfiguring": seen["handled_while_reconfiguring"],
        "same_replicas": same,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=40.0, help="requests a second")
    parser.add_argument("--steady", type=float, default=10.0, help="seconds of steady load first")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    head = RayHead(num_cpus=0, worker_cpus=4).start()
    results = []
    try:
        head.start_serve()
        for number, (mode, seconds) in enumerate(CASES):
            results.append(
                measure(head, mode, seconds, 1 + 2 * number, args.replicas, args.rate, args.steady)
            )
    finally:
        head.stop()
    if args.json:
        print(json.dumps({"rate": args.rate, "results": results}, indent=2))
        return 0
    print(
        f"a user_config change applied by reconfigure under {args.rate:g} requests a second "
        f"(1 in 10 a 1 s stream), {args.replicas} replica(s), 2-node cluster (worker 4 CPUs)"
    )
    for item in results:
        print(
            f"  reconfigure {item['mode']} {item['seconds']:g} s: lost {item['lost']}/"
            f"{item['requests']}, streams cut {item['cut']}/{item['streams']}, steady p99 "
            f"{item['steady_p99_ms']:.0f} ms, rollout p99 {item['rollout_p99_ms']:.0f} ms "
            f"({item['ratio']:.1f}x), max {item['rollout_max_ms']:.0f} ms, window "
            f"{item['rollout_s']:.1f} s (PUT to reconfigure's end; reconfigure began at "
            f"{item['reconfigure_began_s']:.1f} s and took {item['reconfigure_s']:.1f} s), "
            f"calls the replica handled while it reconfigured: "
            f"{item['handled_while_reconfiguring']}, "
            f"same replica: {'yes' if item['same_replicas'] else 'NO'}"
        )
    print(f"target: rollout p99 <= {TARGET_RATIO:g}x steady p99, the replica kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
