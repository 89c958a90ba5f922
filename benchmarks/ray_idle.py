"""What a deployed peach application costs a Ray cluster while no request comes.

`peach deploy tests/projects/semantics` (32 component replicas and the gateway) on a fresh
two-node cluster on loopback (a head offering no CPUs and a worker node, as the tests use),
then, once every replica runs and a settling pause has passed, the CPU seconds each process
of the cluster uses over ``--seconds`` with no request. Printed: the whole cluster's share of
one core, the gateway replica's, and the gateway's CPU against the median component replica's
(a Serve replica doing nothing: the floor any replica costs), which is the ratio to read.

Target: the gateway idles at no more than 2× a component replica (it reads which components
cannot start once a second; reading them through ``serve.status()`` cost 24×, about a fifth
of a core per gateway replica).

Usage::

    python benchmarks/ray_idle.py                 # 30 s of idle
    python benchmarks/ray_idle.py --seconds 60 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from ray_cluster import RayHead  # noqa: E402

SEMANTICS = ROOT / "tests" / "projects" / "semantics"
GATEWAY = "ServeReplica:semantics:gateway"
COMPONENT = "ServeReplica:semantics:"


def cluster_processes(head: RayHead) -> dict[tuple[int, float], tuple[str, float]]:
    """(pid, start) -> (command line, CPU seconds) of every process of the cluster."""
    found = {}
    for process in psutil.process_iter(["pid", "cmdline", "cpu_times", "create_time"]):
        line = " ".join(process.info["cmdline"] or [])
        ray = "ray::" in line or "raylet" in line or "gcs_server" in line or "Serve" in line
        if ray or str(head.temp_dir) in line or "default_worker" in line or "dashboard" in line:
            times = process.info["cpu_times"]
            key = (process.info["pid"], process.info["create_time"])
            found[key] = (line, times.user + times.system)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    from peach_cli.checks.build import build_plan
    from peach_cli.deploy.deployer import deploy

    plan, diagnostics = build_plan(SEMANTICS)
    assert plan is not None, diagnostics
    began = time.monotonic()
    with RayHead(num_cpus=0, worker_cpus=36) as head:
        head.start_serve()
        deploy(plan, address=head.dashboard_url, http_port=head.http_port, timeout_s=300)
        deployed_s = time.monotonic() - began
        time.sleep(10)  # the replicas' own start-up work settles
        before = cluster_processes(head)
        time.sleep(options.seconds)
        after = cluster_processes(head)
    used = {
        key: (line, cpu - before[key][1]) for key, (line, cpu) in after.items() if key in before
    }
    total = sum(cpu for _, cpu in used.values())
    gateway = sum(cpu for line, cpu in used.values() if GATEWAY in line)
    components = [cpu for line, cpu in used.values() if COMPONENT in line and GATEWAY not in line]
    floor = statistics.median(components) if components else float("nan")
    figures = {
        "deployed_s": round(deployed_s, 1),
        "idle_seconds": options.seconds,
        "cluster_core_share": round(total / options.seconds, 3),
        "gateway_core_share": round(gateway / options.seconds, 4),
        "component_replica_core_share": round(floor / options.seconds, 4),
        "gateway_vs_component": round(gateway / floor, 2) if floor else None,
        "component_replicas": len(components),
    }
    if options.json:
        print(json.dumps(figures))
    else:
        print(f"deployed in {figures['deployed_s']} s; idle for {options.seconds:g} s:")
        print(f"  the cluster      {figures['cluster_core_share']:.0%} of a core")
        print(f"  the gateway      {figures['gateway_core_share']:.1%} of a core")
        print(
            f"  a component      {figures['component_replica_core_share']:.1%} of a core "
            f"(median of {len(components)})"
        )
        print(f"  gateway ÷ component: {figures['gateway_vs_component']}× (target ≤ 2×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
