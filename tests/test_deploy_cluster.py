"""`peach deploy`, `status` and `delete` against a real two-node Ray cluster (``ray_cluster``
in conftest): a head offering no CPUs and a worker node, on loopback, so every replica runs
on a node that did not upload its packages. Every test starts from a cluster without
applications.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach
from ray_cluster import RayHead

from peach_cli.checks.build import build_plan
from peach_cli.deploy.config import build_bundle, merge_applications
from peach_cli.deploy.dashboard import DashboardClient
from peach_cli.deploy.deployer import ReplicaStartFailed, Reporter, deploy, wait_until_running

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]  # the first test starts the cluster

TESTS = Path(__file__).resolve().parent
PROJECTS = TESTS / "projects"
BASIC = PROJECTS / "deploy_basic"
INITFAIL = PROJECTS / "deploy_initfail"
SEMANTICS = PROJECTS / "semantics"
ENVS = PROJECTS / "deploy_envs"
REPO = TESTS.parent


def keep_only(head: RayHead, *names: str) -> None:
    """Remove every Serve application but ``names``; wait until they are gone."""
    with DashboardClient(head.dashboard_url) as dashboard:
        details = dashboard.serve_details()
        applications = details.get("applications") or {}
        if set(applications) - set(names):
            kept = [
                applications[name]["deployed_app_config"] for name in names if name in applications
            ]
            dashboard.put_applications({"applications": kept})
        deadline = time.monotonic() + 60
        while set(dashboard.serve_details().get("applications") or {}) - set(names):
            assert time.monotonic() < deadline, "applications did not go away"
            time.sleep(0.2)


@pytest.fixture
def cluster(ray_cluster: RayHead) -> RayHead:
    """The cluster, with no Serve application left by an earlier test."""
    keep_only(ray_cluster)
    return ray_cluster


@pytest.fixture
def basic_app(ray_cluster: RayHead) -> RayHead:
    """The cluster with ``deploy_basic`` running as it is in the project, and no other
    application: the shared app of the tests that start from it. An earlier test's
    deploy-basic is kept, so an unchanged one costs no replica start (a changed one
    restarts only its changed components, a deleted one is deployed again)."""
    keep_only(ray_cluster, "deploy-basic")
    deploy(plan_of(BASIC), address=ray_cluster.dashboard_url, http_port=ray_cluster.http_port)
    return ray_cluster


def peach(*args: str) -> subprocess.CompletedProcess[str]:
    return run_peach(*args)  # the test cluster wants no token


def plan_of(path: Path):
    plan, diagnostics = build_plan(path)
    assert plan is not None, diagnostics
    return plan


def replica_ids(head: RayHead) -> dict[str, list[str]]:
    result = peach("status", "--address", head.dashboard_url, "--format", "json")
    assert result.returncode == 0, result.stderr
    return {
        f"{app['name']}/{d['name']}": sorted(r["replica_id"] for r in d["replicas"])
        for app in json.loads(result.stdout)["applications"]
        for d in app["deployments"]
    }


def test_deploy_waits_until_running_then_answers_and_shows_status(cluster):
    result = peach(
        "deploy", str(BASIC), "--address", cluster.dashboard_url,
        "--http-port", str(cluster.http_port),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    short = subprocess.run(
        ["git", "-C", str(BASIC), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    summary = rf"deploy-basic at {short}(\+dirty)? is running: 4 replicas in 3 deployments, "
    assert re.search(summary, result.stderr), result.stderr
    assert f"/hello  {cluster.serve_url}/hello" in result.stdout

    response = httpx.get(f"{cluster.serve_url}/hello", params={"name": "ray"}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["greeting"] == "hello ray"
    assert response.headers["x-peach-component"] == "main"
    assert response.headers["x-peach-replica"].startswith("hello/main#")
    streamed = httpx.get(f"{cluster.serve_url}/count", params={"stream": "1", "n": "2"}, timeout=10)
    assert streamed.content == b"0\n1\n"

    status = peach("status", "--address", cluster.dashboard_url, "--format", "json")
    assert status.returncode == 0, status.stderr
    (app,) = json.loads(status.stdout)["applications"]
    assert app["name"] == "deploy-basic" and app["status"] == "RUNNING"
    deployments = {d["name"]: d for d in app["deployments"]}
    assert set(deployments) == {"gateway", "hello.main", "count.main"}
    assert [r["state"] for r in deployments["hello.main"]["replicas"]] == ["RUNNING"] * 2

    text = peach("status", "--address", cluster.dashboard_url)
    assert text.returncode == 0, text.stderr
    assert "deploy-basic" in text.stdout and "hello.main" in text.stdout and "2/2" in text.stdout


def test_redeploy_keeps_unchanged_replicas_and_restarts_only_changed_ones(basic_app, tmp_path):
    cluster = basic_app  # deploy-basic runs already: this deploy of a copy changes nothing
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    deploy(plan_of(project), address=cluster.dashboard_url, http_port=cluster.http_port)
    before = replica_ids(cluster)
    token = httpx.get(f"{cluster.serve_url}/hello", timeout=10).json()["result"]["token"]

    result = deploy(
        plan_of(project), address=cluster.dashboard_url
    )  # its time: benchmarks/deploy.py
    assert result.uploaded == []  # same content, same package names
    assert replica_ids(cluster) == before
    tokens = {
        httpx.get(f"{cluster.serve_url}/hello", timeout=10).json()["result"]["token"]
        for _ in range(10)
    }
    assert token in tokens  # the same replicas, with the state their init loaded

    notebook = project / "notebooks" / "Hello.ipynb"
    notebook.write_text(notebook.read_text().replace("hello {name}", "hi {name}"))
    deploy(plan_of(project), address=cluster.dashboard_url)
    after = replica_ids(cluster)
    assert after["deploy-basic/count.main"] == before["deploy-basic/count.main"]
    assert after["deploy-basic/gateway"] == before["deploy-basic/gateway"]
    assert not set(after["deploy-basic/hello.main"]) & set(before["deploy-basic/hello.main"])
    greeting = httpx.get(f"{cluster.serve_url}/hello", timeout=10).json()["result"]["greeting"]
    assert greeting == "hi world"


def test_delete_removes_one_application_and_keeps_the_others(basic_app):
    cluster = basic_app  # deploy-basic runs
    # a second application under another route prefix, deployed through the same API
    other = build_bundle(plan_of(BASIC))
    other.application["name"] = "other"
    other.application["route_prefix"] = "/other"
    with DashboardClient(cluster.dashboard_url) as dashboard:
        for package in other.packages:
            if not dashboard.package_exists(package.name):
                dashboard.upload_package(package.name, package.data)
        config, _ = merge_applications(
            other, dashboard.serve_details(), http_host=None, http_port=None
        )
        dashboard.put_applications(config)
        wait_until_running(dashboard, "other", timeout_s=90, reporter=Reporter())
    assert httpx.get(f"{cluster.serve_url}/other/hello", timeout=10).status_code == 200

    result = peach("delete", "deploy-basic", "--address", cluster.dashboard_url)
    assert result.returncode == 0, result.stderr
    assert "deleted deploy-basic (still running: other)" in result.stderr
    apps = replica_ids(cluster)
    assert not any(name.startswith("deploy-basic/") for name in apps)
    response = httpx.get(f"{cluster.serve_url}/other/hello", timeout=10)
    assert response.status_code == 200 and response.json()["result"]["greeting"] == "hello world"

    missing = peach("delete", "deploy-basic", "--address", cluster.dashboard_url)
    assert missing.returncode == 1
    assert "no application 'deploy-basic'" in missing.stderr and "other" in missing.stderr


def test_declared_dependencies_are_installed_for_the_replica_by_the_cluster(cluster):
    # neither pyjokes (the env's own) nor tomli-w (base's) is installed in Ray's Python
    for module in ("pyjokes", "tomli_w"):
        assert importlib.util.find_spec(module) is None, f"{module} is installed next to Ray"
    result = peach(
        "deploy", str(ENVS), "--address", cluster.dashboard_url,
        "--http-port", str(cluster.http_port),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    response = httpx.get(f"{cluster.serve_url}/joke", timeout=10)
    assert response.status_code == 200, response.text
    answer = response.json()["result"]
    assert answer["joke"] and answer["toml"] == 'language = "en"\n'
    assert answer["prefix"] != sys.prefix  # the packages live in the runtime env's own prefix


@pytest.mark.serial  # its bound: 30 s
def test_a_failing_init_fails_the_deploy_fast_with_the_users_error(cluster):
    began = time.monotonic()
    result = peach(
        "deploy", str(INITFAIL), "--address", cluster.dashboard_url,
        "--http-port", str(cluster.http_port),
    )  # fmt: skip
    elapsed = time.monotonic() - began
    assert result.returncode == 1, result.stderr
    assert "a replica of broken.main failed to start" in result.stderr
    assert "load_model() raised FileNotFoundError: no weights at /models/latest.bin" in (
        result.stderr
    )
    # the user's traceback, in notebook terms: cell and line of each frame
    assert re.search(r"notebooks/Broken\.ipynb, cell \d+, line 6, in load_model", result.stderr)
    assert re.search(r"notebooks/Broken\.ipynb, cell \d+, line 2, in read_weights", result.stderr)
    assert "\x1b[" not in result.stderr
    assert "replica.py" not in result.stderr  # Ray's own frames are left out
    # Serve itself retries for a long time before DEPLOY_FAILED; peach stops at the first
    assert elapsed < 30, elapsed

    # as under `peach dev`: 503 with the init error at once, not timeout_s (30 s) of waiting
    deadline = time.monotonic() + 30
    while True:  # (a client timeout of 10 s: waiting out timeout_s would raise, not answer)
        response = httpx.get(f"{cluster.serve_url}/broken", timeout=10)
        if response.headers.get("content-type") == "application/json":
            break
        assert time.monotonic() < deadline, response.text  # the gateway is still starting
        time.sleep(0.2)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "unavailable"
    assert (
        "load_model() raised FileNotFoundError: no weights" in response.json()["error"]["message"]
    )
    assert response.headers["x-peach-component"] == "main"


def init_waiting_for(release: Path, project: Path) -> Path:
    """A copy of ``deploy_initfail`` whose init first waits for ``release`` (then raises)."""
    shutil.copytree(INITFAIL, project)
    notebook = project / "notebooks" / "Broken.ipynb"
    cells = json.loads(notebook.read_text())
    for cell in cells["cells"]:
        source = "".join(cell["source"])
        if "def load_model():" in source:
            waits = (
                "def load_model():\n"
                "    import os, time\n"
                "    deadline = time.monotonic() + 120\n"
                f"    while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:\n"
                "        time.sleep(0.05)\n"
            )
            cell["source"] = source.replace("def load_model():\n", waits).splitlines(keepends=True)
    notebook.write_text(json.dumps(cells))
    return project


def wait_for_gateway(cluster: RayHead) -> None:
    """Until the peach gateway answers its routes."""
    deadline = time.monotonic() + 90
    while True:
        assert time.monotonic() < deadline, "the gateway did not start"
        try:
            routes = httpx.get(f"{cluster.serve_url}/_peach/routes", timeout=5)
            if routes.headers.get("content-type") == "application/json":
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)


def test_a_request_waiting_for_a_replica_gets_the_init_error_when_the_init_fails(cluster, tmp_path):
    """A request that arrives while the model still loads waits for a replica; when that
    init fails, it is answered with 503 and the error at once, not after timeout_s (30 s)."""
    release = tmp_path / "release"  # both nodes share this machine's file system
    project = init_waiting_for(release, tmp_path / "project")

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        deploying = pool.submit(
            deploy, plan_of(project), address=cluster.dashboard_url, http_port=cluster.http_port
        )
        wait_for_gateway(cluster)  # the component is still in its init
        asking = pool.submit(httpx.get, f"{cluster.serve_url}/broken", timeout=40)
        began = time.monotonic()
        # no replica has finished its init: the request waits for one
        with pytest.raises(concurrent.futures.TimeoutError):
            asking.result(timeout=1.0)
        release.touch()  # the inits go on, and raise
        response = asking.result(timeout=45)
        waited = time.monotonic() - began
        with pytest.raises(ReplicaStartFailed):
            deploying.result(timeout=90)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "unavailable"
    message = response.json()["error"]["message"]
    assert "load_model() raised FileNotFoundError: no weights" in message
    assert response.headers["x-peach-component"] == "main"
    assert waited < 25, waited  # timeout_s is 30: the answer came with the failure


def test_a_call_waiting_for_starting_replicas_gets_504_at_timeout_s(cluster, tmp_path):
    """A request that arrives while every replica is still in its init is answered when
    timeout_s (2 s here) runs out: 504, saying the replicas are still starting."""
    release = tmp_path / "release"  # both nodes share this machine's file system
    project = init_waiting_for(release, tmp_path / "project")
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("\nendpoints:", "\ntimeout_s: 2\nendpoints:", 1))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        deploying = pool.submit(
            deploy, plan_of(project), address=cluster.dashboard_url, http_port=cluster.http_port
        )
        try:
            wait_for_gateway(cluster)  # the component is still in its init
            response = httpx.get(f"{cluster.serve_url}/broken", timeout=40)  # inits still wait
        finally:
            release.touch()  # the inits go on, and raise
        with pytest.raises(ReplicaStartFailed):
            deploying.result(timeout=90)
    assert response.status_code == 504, response.text
    error = response.json()["error"]
    assert error["code"] == "timeout"
    assert "did not answer within timeout_s = 2 s" in error["message"]
    assert re.search(r"its replicas are still starting \(\d+ s so far\)", error["message"]), error


def test_the_first_replica_start_failure_is_reported_while_serve_still_retries(cluster):
    """peach stops at the first replica that fails to start, not when Serve gives up.

    (How many seconds that is after the replica starts is a speed target, measured by
    benchmarks/deploy.py: on a loaded machine, starting a worker process alone can take
    longer than the target.)"""
    reports: list[tuple[str, str]] = []

    def progress(app, elapsed):
        for d in app.deployments:
            if d.name == "broken.main":
                reports.append((d.status, ",".join(r.state for r in d.replicas)))

    with pytest.raises(ReplicaStartFailed) as caught:
        deploy(
            plan_of(INITFAIL),
            address=cluster.dashboard_url,
            reporter=Reporter(progress=progress),
            poll_interval_s=0.1,
        )
    assert caught.value.deployment == "broken.main"
    assert "no weights at /models/latest.bin" in caught.value.error
    assert any("STARTING" in states for _, states in reports), reports
    assert reports[-1][0] != "DEPLOY_FAILED", reports  # Serve had not given up yet
    with DashboardClient(cluster.dashboard_url) as dashboard:
        app = dashboard.serve_details()["applications"]["deploy-initfail"]
    assert app["status"] != "DEPLOY_FAILED"  # and it is still retrying


def test_a_fixed_init_redeploys_over_the_failing_version_that_holds_the_cpus(cluster, tmp_path):
    # the failing version's replicas (which Serve keeps retrying) reserve 3 of the 4 CPUs
    project = tmp_path / "project"
    shutil.copytree(INITFAIL, project)
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("cpus: 0.1", "cpus: 1.5"))
    with pytest.raises(ReplicaStartFailed):
        deploy(plan_of(project), address=cluster.dashboard_url, http_port=cluster.http_port)

    notebook = project / "notebooks" / "Broken.ipynb"
    broken = notebook.read_text()
    fixed = broken.replace('read_weights(\\"/models', 'str(\\"/models')  # init returns a str
    assert fixed != broken
    notebook.write_text(fixed)
    result = deploy(plan_of(project), address=cluster.dashboard_url, timeout_s=90)
    assert result.app.ready
    response = httpx.get(f"{cluster.serve_url}/broken", params={"x": "3"}, timeout=10)
    assert response.status_code == 200 and response.json()["result"] == 3


def test_a_project_larger_than_the_cluster_is_refused_with_the_numbers(cluster):
    result = peach("deploy", str(SEMANTICS), "--address", cluster.dashboard_url)
    assert result.returncode == 1
    assert re.search(r"asks for [\d.]+ CPUs .* the cluster has [\d.]+ CPUs", result.stderr)
    assert replica_ids(cluster) == {}  # nothing was deployed
