"""The task scheduler a deploy adds (SPEC §5 "Tasks on the cluster"), on the two-node test
cluster (``ray_cluster``): the loop, triggered runs one at a time in order, what `peach
status` and `peach logs` show, redeploys and `peach delete`.

Each run is a Ray job: the dashboard's job list is what shows that runs never overlap and
go in order, and that nothing of a deleted project keeps running.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import run_peach
from projectkit import copy_assistant
from ray_cluster import RayHead
from test_deploy_cluster import keep_only
from waiting import assert_gone

from peach_cli.checks.build import build_plan
from peach_cli.deploy.config import TaskOptions
from peach_cli.deploy.dashboard import DashboardClient
from peach_cli.deploy.deployer import deploy

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]  # may start the cluster

TESTS = Path(__file__).resolve().parent
TASKS = TESTS / "projects" / "tasks"
APP = "tasks"


@pytest.fixture
def cluster(ray_cluster: RayHead) -> RayHead:
    """The cluster without applications (a test's project is deployed from scratch)."""
    return without_applications(ray_cluster)


def without_applications(ray_cluster: RayHead) -> RayHead:
    """Remove every Serve application of the cluster; wait until they are gone."""
    keep_only(ray_cluster)
    return ray_cluster


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TASKS, tmp_path / "tasks"))


def deployed(head: RayHead, project: Path, **options: Any) -> str:
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    result = deploy(
        plan,
        address=head.dashboard_url,
        http_port=head.http_port,
        timeout_s=240,
        tasks=TaskOptions(**options),
    )
    return result.url


def jobs_of(head: RayHead, task: str | None = None, since: float = 0.0) -> list[dict[str, Any]]:
    """The project's Ray jobs (of ``task``) submitted after ``since`` (``time.time()``),
    oldest first."""
    listed = httpx.get(f"{head.dashboard_url}/api/jobs/", timeout=10).json()
    ours = [
        job
        for job in listed
        if (job.get("metadata") or {}).get("peach_codops") == APP
        and (task is None or job["metadata"].get("peach_task") == task)
        and job["start_time"] >= since * 1000
    ]
    return sorted(ours, key=lambda job: job["start_time"])


def status_rows(head: RayHead) -> dict[str, dict[str, Any]]:
    result = run_peach("status", "--address", head.dashboard_url, "--format", "json")
    assert result.returncode == 0, result.stderr
    apps = {app["name"]: app for app in json.loads(result.stdout)["applications"]}
    return {row["task"]: row for row in apps[APP]["tasks"]} if APP in apps else {}


def wait_rows(head: RayHead, done: Any, timeout_s: float = 240) -> dict[str, dict[str, Any]]:
    """Poll `peach status` until ``done(rows)``."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = status_rows(head)
        if rows and done(rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(1)


def assert_one_at_a_time(jobs: list[dict[str, Any]]) -> None:
    for earlier, later in zip(jobs, jobs[1:], strict=False):
        assert earlier["end_time"] is not None
        assert earlier["end_time"] <= later["start_time"], (earlier, later)


def test_the_loop_runs_every_task_once_then_pauses_and_status_and_logs_show_it(
    cluster: RayHead, project: Path
) -> None:
    since = time.time()
    deployed(cluster, project, interval_s=3600)
    rows = wait_rows(
        cluster, lambda rows: sum(r["runs_ok"] + r["runs_failed"] for r in rows.values()) >= 6
    )
    # every task once, in the conf's order; chain's trigger runs record once more
    assert {name: (r["runs_ok"], r["runs_failed"]) for name, r in rows.items()} == {
        "record": (2, 0),
        "greet": (1, 0),
        "fail": (0, 1),
        "hang": (0, 1),
        "chain": (1, 0),
    }
    assert rows["fail"]["last_error"] == "RuntimeError: bad data: None"
    assert rows["hang"]["last_error"] == "timed out after 2 s"
    assert all(r["state"] == "idle" and r["queued"] == 0 for r in rows.values())
    jobs = jobs_of(cluster, since=since)
    assert [job["metadata"]["peach_task"] for job in jobs] == [
        "record",
        "greet",
        "fail",
        "hang",
        "chain",
        "record",
    ]
    assert_one_at_a_time(jobs)
    hang = jobs[3]
    assert hang["status"] == "STOPPED"  # past its timeout_s: 2 s
    # the pause: nothing more runs
    time.sleep(5)
    assert len(jobs_of(cluster, since=since)) == 6
    text = run_peach("status", "--address", cluster.dashboard_url)
    assert re.search(r"fail\s+idle\s+0\s+1\s+[\d.]+ s\s+RuntimeError: bad data: None", text.stdout)
    logs = run_peach("logs", APP, "--address", cluster.dashboard_url, "-d", "tasks").stdout
    assert "greet | hello from greet v1" in logs
    assert "greet | task greet run greet#2 ok in" in logs
    assert "fail |   File notebooks/Tasks.ipynb, cell 4, line 3, in fail" in logs
    assert "fail | RuntimeError: bad data: None" in logs
    assert "hang | task hang run hang#4 timed out after 2 s (timeout_s): killed" in logs
    assert re.search(r"chain \| triggered record#\d+", logs)


def test_triggered_runs_go_one_at_a_time_in_order_and_an_unknown_name_is_a_value_error(
    cluster: RayHead, project: Path
) -> None:
    since = time.time()
    url = deployed(cluster, project, loop=False)
    with httpx.Client(base_url=url, timeout=60) as client:
        answer = client.get("/burst", params={"n": 5})
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"] == [f"record#{n}" for n in range(1, 6)]
        unknown = client.get("/kick", params={"task": "nope"}).json()["error"]["message"]
    assert unknown == (
        "kick() raised ValueError: unknown task 'nope': the project's tasks are "
        "record, greet, fail, hang, chain"
    )
    rows = wait_rows(cluster, lambda rows: rows["record"]["runs_ok"] == 5)
    assert rows["record"]["state"] == "idle"
    assert rows["greet"]["runs_ok"] == 0  # --no-tasks: no loop
    jobs = jobs_of(cluster, "record", since)
    assert len(jobs) == 5
    payloads = [json.loads(job["runtime_env"]["env_vars"]["PEACH_TASK_PAYLOAD"]) for job in jobs]
    assert payloads == [{"value": n} for n in range(5)]
    assert_one_at_a_time(jobs)


def scheduler_replicas(head: RayHead) -> list[str]:
    """The ids of the scheduler's running replicas, as `peach status --format json` lists them."""
    result = run_peach("status", "--address", head.dashboard_url, "--format", "json")
    apps = {app["name"]: app for app in json.loads(result.stdout)["applications"]}
    deployments = {d["name"]: d for d in apps[APP]["deployments"]}
    return [r["replica_id"] for r in deployments["tasks"]["replicas"] if r["state"] == "RUNNING"]


def edit_cell(notebook: Path, old: str, new: str) -> None:
    data = json.loads(notebook.read_text())
    for cell in data["cells"]:
        text = "".join(cell["source"])
        if old in text:
            cell["source"] = text.replace(old, new).splitlines(keepends=True)
    notebook.write_text(json.dumps(data))


def test_a_redeploy_keeps_the_counts_a_changed_task_applies_next_run_and_delete_stops_all(
    cluster: RayHead, project: Path
) -> None:
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("method: hang, timeout_s: 2", "method: hang"))
    since = time.time()
    url = deployed(cluster, project, loop=False)
    httpx.get(f"{url}/kick", params={"task": "greet"}, timeout=60).raise_for_status()
    wait_rows(cluster, lambda rows: rows["greet"]["runs_ok"] == 1)
    replicas = scheduler_replicas(cluster)
    assert len(replicas) == 1

    deployed(cluster, project, loop=False)  # unchanged: the same scheduler, its counts
    assert scheduler_replicas(cluster) == replicas
    assert status_rows(cluster)["greet"]["runs_ok"] == 1

    edit_cell(project / "notebooks" / "Tasks.ipynb", "greet v1", "greet v2")
    deployed(cluster, project, loop=False)  # a changed task: from its next run, counts kept
    assert scheduler_replicas(cluster) == replicas
    assert status_rows(cluster)["greet"]["runs_ok"] == 1
    httpx.get(f"{url}/kick", params={"task": "greet"}, timeout=60).raise_for_status()
    wait_rows(cluster, lambda rows: rows["greet"]["runs_ok"] == 2)
    logs = run_peach("logs", APP, "--address", cluster.dashboard_url, "-d", "tasks").stdout
    assert logs.index("greet | hello from greet v1") < logs.index("greet | hello from greet v2")

    httpx.get(f"{url}/kick", params={"task": "hang"}, timeout=60).raise_for_status()
    started = re.compile(rf"^tasks#{replicas[0]} \| hang \| started child (\d+)$", re.M)
    deadline = time.monotonic() + 120
    while not started.search(logs):  # this scheduler's line (stopped ones' logs are shown too)
        assert time.monotonic() < deadline, logs
        time.sleep(1)
        logs = run_peach("logs", APP, "--address", cluster.dashboard_url, "-d", "tasks").stdout
    child = int(started.search(logs).group(1))  # type: ignore[union-attr]
    (hang,) = jobs_of(cluster, "hang", since)
    assert hang["status"] == "RUNNING"

    deleted = run_peach("delete", APP, "--address", cluster.dashboard_url)
    assert deleted.returncode == 0, deleted.stderr
    (hang,) = jobs_of(cluster, "hang", since)
    assert hang["status"] == "STOPPED"  # the scheduler stopped the run as it stopped
    assert_gone(child)
    with DashboardClient(cluster.dashboard_url) as dashboard:
        for deployment in ("tasks", "gateway", "kick.main"):
            actors = dashboard.list_actors(f"ServeReplica:{APP}:{deployment}")
            assert [a for a in actors if a["state"] == "ALIVE"] == []
    ended = ("SUCCEEDED", "FAILED", "STOPPED")
    assert all(job["status"] in ended for job in jobs_of(cluster, since=since))


def test_the_assistant_retrains_on_the_cluster_and_its_replicas_reinit_with_no_manual_step(
    cluster: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/assistant deployed: the scheduler's loop runs retrain, which writes the
    next version in ASSISTANT_MODEL_DIR; the /facts replica that reads it answers, then
    re-inits, and answers with the new version (SPEC §2 Drift, §5 on the cluster)."""
    import yaml

    project = copy_assistant(tmp_path / "assistant")
    conf = yaml.safe_load((project / "peach.yaml").read_text())
    for endpoint in conf["endpoints"].values():  # the worker node has 4 CPUs
        for component in endpoint["components"].values():
            component.update(cpus=0.2, replicas=1)
            component.pop("memory", None)
    (project / "peach.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    url = deployed(cluster, project, interval_s=20)
    app = "assistant"

    def version_answered() -> int:
        answer = httpx.get(f"{url}/facts", params={"query": "peach"}, timeout=60)
        assert answer.status_code == 200, answer.text
        return int(answer.json()["result"][0]["version"])

    def retrained() -> int:
        result = run_peach("status", "--address", cluster.dashboard_url, "--format", "json")
        apps = {a["name"]: a for a in json.loads(result.stdout)["applications"]}
        rows = {row["task"]: row for row in apps[app]["tasks"]}
        return int(rows["retrain"]["runs_ok"]) if "retrain" in rows else 0

    deadline = time.monotonic() + 180
    while retrained() < 1:  # the loop's first round
        assert time.monotonic() < deadline, "retrain never ran"
        time.sleep(1)
    first = version_answered()  # the version this replica loaded (its answer triggers drift)
    deadline = time.monotonic() + 150
    while True:  # the replica re-inits, or the loop's next retrain makes it drift again
        now = version_answered()
        marker = int((tmp_path / "model" / "model_version.txt").read_text())
        if now > first and now <= marker:
            break
        assert time.monotonic() < deadline, (first, now, marker)
        time.sleep(1)
    logs = run_peach("logs", app, "--address", cluster.dashboard_url, "-d", "tasks").stdout
    assert "retrain | retraining (scheduled): knowledge version 1 -> 2" in logs
