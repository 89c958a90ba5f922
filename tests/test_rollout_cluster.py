"""Rollouts without a gap (SPEC §6 "Releases"): on the two-node test cluster, a deploy that
changes a component starts its new replicas before the old ones stop, and the old ones
finish what they serve. The strict figures (rollout p99 ≤ 2× steady): benchmarks/rollout.py.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time

import httpx
import pytest
from cli_support import run_peach, run_peach_process
from rollout_support import (
    NicenessWatch,
    RolloutLoad,
    figures,
    niceness_by_title,
    replica_ids,
    replica_pids,
    watch_rollout,
    write_rollout_project,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]

INIT_S = 10.0
"""The init of the project's replicas: a stop-first rollout leaves every request waiting
at least this long (a sleep: it costs no CPU, unlike the new replica's process start)."""

PREFIX = "/rollout"
COMPONENTS = ["hello.main", "ticks.main"]


def deploy(project, cluster, run=run_peach):
    result = run(
        "deploy", str(project), "--address", cluster.dashboard_url,
        "--http-port", str(cluster.http_port), "--route-prefix", PREFIX,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def deploy_in_a_process(project, cluster):
    # a real process: this deploy runs while this process's threads send the load and time
    # it (in a thread, `run_peach` would swap the streams and environment under them)
    return deploy(project, cluster, functools.partial(run_peach_process, timeout=240))


def test_a_redeploy_under_load_loses_nothing_and_keeps_the_latency(ray_cluster, tmp_path):
    cluster = ray_cluster
    project = write_rollout_project(tmp_path / "project", version=1, init_s=INIT_S)
    deploy(project, cluster)
    base = f"{cluster.serve_url}{PREFIX}"
    assert httpx.get(f"{base}/hello", timeout=10).json()["result"]["version"] == 1

    load = RolloutLoad(base, rate=40).start()
    time.sleep(8)  # 2 s to warm up, then the steady window
    before = replica_ids(cluster.dashboard_url, "rollout")
    old_pids = set().union(*replica_pids(cluster.dashboard_url, "rollout").values())
    write_rollout_project(project, version=2, init_s=INIT_S)  # the method's code changes
    asked = time.monotonic()
    watch = NicenessWatch().start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        deploying = pool.submit(deploy_in_a_process, project, cluster)
        began, ended = watch_rollout(cluster.dashboard_url, "rollout", before, COMPONENTS)
        deploying.result()
    time.sleep(2)
    watch.stop()
    result = figures(load.finish(), steady=(load.began + 2, asked), rollout=(began, ended))
    print(result.line())

    assert httpx.get(f"{base}/hello", timeout=10).json()["result"]["version"] == 2
    assert result.requests > 500 and result.streams > 50
    assert (result.lost, result.cut, result.reasons) == (0, 0, [])
    # A stop-first rollout makes the requests of its gap wait for the whole start of the
    # new replica — its process, then INIT_S — that is, about the rollout's length. With
    # the old replica serving meanwhile, the slowest waits at most for what the new
    # process's start takes from the busy machine: far below the rollout's length minus
    # half the init (the strict figure, p99 ≤ 2× steady: benchmarks/rollout.py).
    assert result.rollout_max_ms < 1000 * (result.rollout_s - INIT_S / 2), result.line()

    # Ray lowers its workers' priority (nice 15) once they have imported Ray; the project's
    # replicas serve at the priority a new process starts at, every thread of them (the
    # proxy, Ray's own, shows what they had before)...
    replicas = niceness_by_title("ray::ServeReplica:rollout:")
    assert set(replicas) >= {f"ray::ServeReplica:rollout:{c}" for c in COMPONENTS}, replicas
    assert set().union(*replicas.values()) == {0}, replicas
    assert niceness_by_title("ray::ProxyActor") and all(
        15 in nice for nice in niceness_by_title("ray::ProxyActor").values()
    )
    # ... and start below everything else until they are ready: the new replicas' processes
    # ran their init (10 s) at nice 19, and once at 0 (ready) never went back.
    pids = replica_pids(cluster.dashboard_url, "rollout")
    new = {pid: watch.seen.get(pid, []) for c in COMPONENTS for pid in pids[c] - old_pids}
    assert len(new) == len(COMPONENTS), (pids, old_pids)
    for seen in new.values():
        init = [nices for title, nices in seen if "initialize_and_get_metadata" in title]
        assert init and init[0] == {19}, seen
        raised = next((i for i, (_, nices) in enumerate(seen) if 19 not in nices), len(seen))
        assert all(19 not in nices for _, nices in seen[raised:]), seen
        assert seen[-1][1] == {0}, seen


def test_a_cluster_without_room_for_the_surge_is_told_and_rolls_as_ray_does(ray_cluster, tmp_path):
    cluster = ray_cluster  # 4 CPUs: the project's 3 fit, not 3 more beside them
    project = write_rollout_project(tmp_path / "project", version=1, cpus=1.5, init_s=0.5)
    deploy(project, cluster)
    write_rollout_project(project, version=2, cpus=1.5, init_s=0.5)
    result = deploy(project, cluster)
    assert (
        "the cluster has no room for the new replicas of hello.main, ticks.main beside the "
        "old ones (3 CPUs more): the old ones stop first"
    ) in " ".join(result.stderr.split()), result.stderr
    answer = httpx.get(f"{cluster.serve_url}{PREFIX}/hello", timeout=10)
    assert answer.json()["result"]["version"] == 2
