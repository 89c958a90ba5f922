"""Tasks on a real Ray cluster: `peach task run --address` as a Ray job (the dashboard's
Jobs REST API), and `trigger_task_with_event` in a replica deployed by `peach deploy`.

The cluster is the session's semantics cluster (``ray_semantics_cluster`` in conftest: a
head offering no CPUs and a worker node), already running: starting one costs many seconds.
The tasks project is deployed there beside the semantics app, under its own route prefix.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest
from cli_support import run_peach, start_peach
from ray_cluster import RayHead

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "tests" / "projects" / "tasks"

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]  # may start the cluster


@pytest.fixture(scope="module")
def head(ray_semantics_cluster: tuple[RayHead, str]) -> RayHead:
    return ray_semantics_cluster[0]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(shutil.copytree(TASKS, tmp_path_factory.mktemp("ray") / "tasks"))


def task_run(head: RayHead, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_peach("task", "run", *args, str(project), "--address", head.dashboard_url)


def test_a_ray_job_run_streams_its_logs_and_exits_0(head: RayHead, project: Path) -> None:
    result = task_run(head, project, "record", "--payload", '{"value": 3}')
    assert result.returncode == 0, result.stderr
    assert 'record | recorded {"value": 3}' in result.stdout.splitlines()
    assert "record | task record returned in" in result.stdout
    submitted = re.search(
        r"task record: submitted as Ray job (peach-tasks-record-\w+)", result.stderr
    )
    assert submitted, result.stderr
    assert f"task record Ray job {submitted.group(1)} ok in" in result.stderr
    status = httpx.get(f"{head.dashboard_url}/api/jobs/{submitted.group(1)}", timeout=10).json()
    assert status["status"] == "SUCCEEDED"
    # the project package every component and task shares, and the task's own spec
    assert status["runtime_env"]["working_dir"].startswith("gcs://_ray_pkg_")
    assert status["runtime_env"]["py_modules"][-1].startswith("gcs://peach_task_")


def test_a_failing_ray_job_exits_1_with_the_notebook_traceback(
    head: RayHead, project: Path
) -> None:
    result = task_run(head, project, "fail")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "fail | failing now" in lines
    assert "fail |   File notebooks/Tasks.ipynb, cell 4, line 3, in fail" in lines
    assert "fail | RuntimeError: bad data: None" in lines
    assert re.search(
        r"task fail Ray job peach-tasks-fail-\w+ failed in [\d.]+ s: Job entrypoint command "
        r"failed with exit code 1\n",
        result.stderr,
    ), result.stderr


def test_a_ray_job_past_its_timeout_is_stopped(head: RayHead, project: Path) -> None:
    result = task_run(head, project, "hang", "--timeout-s", "8")
    assert result.returncode == 1
    child = re.search(r"hang \| started child (\d+)", result.stdout)
    assert child, result.stdout
    assert "timed out after 8 s (--timeout-s): the job was stopped" in result.stderr
    deadline = time.monotonic() + 20  # Ray stops the job's process group
    while psutil.pid_exists(int(child.group(1))):
        try:
            if psutil.Process(int(child.group(1))).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        assert time.monotonic() < deadline, "the job's child process is still running"
        time.sleep(0.1)


def test_a_trigger_in_a_deployed_replica_runs_the_task_on_the_cluster(
    head: RayHead, project: Path
) -> None:
    """The replica queues the run with the application's scheduler, which runs it as a Ray
    job with the packages `peach task run --address` uses (SPEC §5 "Tasks on the cluster")."""
    from peach_cli.checks.build import build_plan
    from peach_cli.deploy.config import TaskOptions
    from peach_cli.deploy.deployer import deploy

    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    result = deploy(
        plan,
        address=head.dashboard_url,
        route_prefix="/tasks",
        timeout_s=240,
        tasks=TaskOptions(loop=False),
    )
    assert result.url.endswith("/tasks")
    with httpx.Client(base_url=result.url, timeout=30) as client:
        answer = client.get("/kick", params={"value": 5})
        assert answer.status_code == 200, answer.text
        run_id = answer.json()["result"]["run_id"]
        assert re.fullmatch(r"record#\d+", run_id), run_id
        unknown = client.get("/kick", params={"task": "nope"}).json()["error"]["message"]
        assert unknown == (
            "kick() raised ValueError: unknown task 'nope': the project's tasks are "
            "record, greet, fail, hang, chain"
        )
    deadline = time.monotonic() + 180
    while True:
        jobs = httpx.get(f"{head.dashboard_url}/api/jobs/", timeout=10).json()
        prefix = f"peach-tasks-record-{run_id.split('#')[1]}-"
        ours = sorted(
            (job for job in jobs if job["submission_id"].startswith(prefix)),
            key=lambda job: job["start_time"],
        )
        if ours and ours[-1]["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        assert time.monotonic() < deadline, ours
        time.sleep(0.5)
    status = ours[-1]  # the newest (the cluster may keep an earlier deploy's jobs)
    logs = httpx.get(
        f"{head.dashboard_url}/api/jobs/{status['submission_id']}/logs", timeout=10
    ).json()["logs"]
    assert status["status"] == "SUCCEEDED", logs
    assert 'recorded {"value": 5}' in logs
    deployed = httpx.get(f"{head.dashboard_url}/api/serve/applications/", timeout=10).json()
    kick = deployed["applications"]["tasks"]["deployments"]["kick.main"]
    shared = kick["deployment_config"]["ray_actor_options"]["runtime_env"]["working_dir"]
    assert status["runtime_env"]["working_dir"] == shared  # the one project package


def test_ctrl_c_stops_the_ray_job_and_exits_130(head: RayHead, project: Path) -> None:
    process = start_peach(  # a real process: the test sends it SIGINT
        "task", "run", "hang", str(project), "--address", head.dashboard_url,
        "--timeout-s", "120", start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        for line in process.stdout:  # Ray's own lines first, then the task's
            if line.startswith("hang | started child"):
                break
        else:
            raise AssertionError(process.communicate(timeout=30))
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert "hang: interrupted; the Ray job was stopped" in err
    job = re.search(r"submitted as Ray job (peach-tasks-hang-\w+)", err)
    assert job, err
    status = httpx.get(f"{head.dashboard_url}/api/jobs/{job.group(1)}", timeout=10).json()
    assert status["status"] == "STOPPED"
