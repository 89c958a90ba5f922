"""Rollouts without a gap, the parts that need no cluster: every deployment rolls with a
surge and drains, and the capacity check counts the replicas a rollout keeps running
(SPEC §6 "Releases"). Under load on a real cluster: test_rollout_cluster.py."""

from __future__ import annotations

import shutil
from pathlib import Path

from peach_cli.checks.build import build_plan
from peach_cli.deploy.config import (
    DRAIN_TIMEOUT_S,
    build_bundle,
    validate_config,
    without_surge,
)
from peach_cli.deploy.deployer import Reporter, _check_resources
from peach_cli.deploy.resources import replaced_running

BASIC = Path(__file__).resolve().parent / "projects" / "deploy_basic"


def plan_of(path: Path):
    plan, diagnostics = build_plan(path)
    assert plan is not None, diagnostics
    return plan


def running(application: dict, replicas: dict[str, int]) -> dict:
    """``application`` as Serve details it once deployed, with ``replicas`` RUNNING."""
    return {
        "status": "RUNNING",
        "deployed_app_config": application,
        "deployments": {
            name: {"replicas": [{"replica_id": f"{name}{i}", "state": "RUNNING"} for i in range(n)]}
            for name, n in replicas.items()
        },
    }


REPLICAS = {"gateway": 1, "hello.main": 2, "count.main": 1}


def changed_hello(tmp_path: Path) -> tuple[dict, dict]:
    """deploy_basic's application before and after a change to hello's code."""
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    before = build_bundle(plan_of(project)).application
    notebook = project / "notebooks" / "Hello.ipynb"
    notebook.write_text(notebook.read_text().replace("hello {name}", "hi {name}"))
    return before, build_bundle(plan_of(project)).application


def test_every_deployment_starts_a_new_replica_first_and_lets_the_old_ones_drain():
    bundle = build_bundle(plan_of(BASIC))
    surges = {d["name"]: d["max_surge_percent"] for d in bundle.application["deployments"]}
    assert surges == {"gateway": 100, "hello.main": 50, "count.main": 100}  # one replica
    for deployment in bundle.application["deployments"]:
        assert deployment["graceful_shutdown_timeout_s"] == DRAIN_TIMEOUT_S == 300
    validate_config(bundle.config)  # Ray's own schema accepts them


def test_a_rollout_keeps_the_running_replicas_of_the_changed_components_only(tmp_path):
    before, after = changed_hello(tmp_path)
    held = replaced_running(after, running(before, REPLICAS))
    assert [name for name, _, _ in held.replicas] == ["hello.main"]
    assert held.cpus == 0.1 and held.memory == 64 * 1024**2  # one of its two, at a time

    assert replaced_running(before, running(before, REPLICAS)).replicas == ()  # unchanged
    scaled = {**before, "deployments": [{**d, "num_replicas": 5} for d in before["deployments"]]}
    assert replaced_running(scaled, running(before, REPLICAS)).replicas == ()  # no restart
    # replicas that never ran (a failing init) hold nothing a rollout keeps
    failing = running(before, REPLICAS)
    failing["deployments"]["hello.main"]["replicas"][0]["state"] = "STARTING"
    failing["deployments"]["hello.main"]["replicas"][1]["state"] = "STARTING"
    assert replaced_running(after, failing).replicas == ()


def test_a_new_application_code_restarts_every_running_deployment(tmp_path):
    before, after = changed_hello(tmp_path)
    renamed = {**after, "args": {**after["args"], "components": ["x"]}}
    held = replaced_running(renamed, running(before, REPLICAS))
    assert sorted(name for name, _, _ in held.replicas) == ["count.main", "gateway", "hello.main"]


class Cluster:
    """A dashboard whose cluster has ``total`` CPUs, ``used`` of them reserved."""

    def __init__(self, used: float, total: float) -> None:
        self.report = {"usage": {"CPU": [used, total], "memory": [0.0, 8 * 1024**3]}}

    def cluster_status(self) -> dict:
        return self.report


def check(tmp_path: Path, cluster: Cluster) -> tuple[list[str], list[str]]:
    before, after = changed_hello(tmp_path)
    bundle = build_bundle(plan_of(tmp_path / "project"))
    assert bundle.application == after
    warnings: list[str] = []
    details = {"applications": {bundle.app_name: running(before, REPLICAS)}}
    reporter = Reporter(warn=warnings.append)
    return _check_resources(cluster, bundle, details, reporter), warnings  # type: ignore[arg-type]


def test_a_cluster_with_room_for_the_surge_rolls_with_it(tmp_path):
    # the running version holds 0.4 CPUs; the new one needs 0.4 and the surge 0.1 more
    assert check(tmp_path, Cluster(used=0.4, total=0.5)) == ([], [])


def test_a_cluster_without_room_for_the_surge_says_so_and_rolls_as_ray_does(tmp_path):
    crowded, warnings = check(tmp_path, Cluster(used=0.4, total=0.45))
    assert crowded == ["hello.main"]
    assert warnings == [
        "the cluster has no room for the new replicas of hello.main beside the old ones "
        "(0.1 CPUs and 0.06 GiB more): the old ones stop first, as Ray rolls by default, "
        "and requests wait while the new ones start"
    ]
    config = build_bundle(plan_of(tmp_path / "project")).config
    other = {"name": "other", "deployments": [{"name": "hello.main", "max_surge_percent": 50}]}
    config = {**config, "applications": [other, *config["applications"]]}
    changed = without_surge(config, "deploy-basic", crowded)
    surges = {
        (app["name"], d["name"]): d.get("max_surge_percent")
        for app in changed["applications"]
        for d in app["deployments"]
    }
    assert surges == {
        ("other", "hello.main"): 50,
        ("deploy-basic", "gateway"): 100,
        ("deploy-basic", "hello.main"): 0,
        ("deploy-basic", "count.main"): 100,
    }
    hello = [d for d in config["applications"][1]["deployments"] if d["name"] == "hello.main"]
    assert hello[0]["max_surge_percent"] == 50  # a copy


class OlderRayDashboard:
    """A dashboard whose Ray refuses ``max_surge_percent`` as its schema refuses any
    unknown field (the error ``PUT /api/serve/applications/`` answers, as peach shows it)."""

    def __init__(self) -> None:
        self.accepted: list[dict] = []

    def put_applications(self, config: dict) -> None:
        from peach_cli.errors import DeployError

        if any("max_surge_percent" in d for a in config["applications"] for d in a["deployments"]):
            raise DeployError(
                "the dashboard refused the request (400): applications.0.deployments.1."
                "max_surge_percent: Extra inputs are not permitted"
            )
        self.accepted.append(config)


def test_a_cluster_whose_ray_has_no_surge_setting_gets_the_config_without_it():
    from peach_cli.deploy.deployer import _put

    dashboard, warnings = OlderRayDashboard(), []
    config = build_bundle(plan_of(BASIC)).config
    _put(dashboard, config, Reporter(warn=warnings.append))  # type: ignore[arg-type]
    (sent,) = dashboard.accepted
    for deployment in sent["applications"][0]["deployments"]:
        assert "max_surge_percent" not in deployment
        assert deployment["graceful_shutdown_timeout_s"] == DRAIN_TIMEOUT_S
    assert warnings == [
        "the cluster's Ray has no `max_surge_percent`: a changed component's old replicas "
        "stop before its new ones start, and requests wait while they start"
    ]
