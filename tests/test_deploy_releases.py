"""Releases on a real two-node Ray cluster (``ray_cluster``, SPEC §6): what runs (`peach
status` shows the version each deploy records), what a deploy would change (`peach deploy
--diff`, checked against what the next deploy does to the replicas), going back (`peach
deploy --ref REV`); and the gateway's request lines in `peach logs` (SPEC §5)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach
from ray_cluster import RayHead
from test_deploy_cluster import keep_only

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]

TESTS = Path(__file__).resolve().parent
BASIC = TESTS / "projects" / "deploy_basic"
APP = "deploy-releases"
WHO = "Ada Tester"


@pytest.fixture
def cluster(ray_cluster: RayHead) -> RayHead:
    keep_only(ray_cluster, APP)
    return ray_cluster


def peach(*args: str) -> subprocess.CompletedProcess[str]:
    return run_peach(*args)


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def new_project(folder: Path, **replace: str) -> Path:
    """A copy of ``deploy_basic`` named ``deploy-releases``; ``replace``: old → new text in
    its conf."""
    shutil.copytree(BASIC, folder)
    conf = folder / "peach.yaml"
    text = conf.read_text().replace("codops: deploy-basic", f"codops: {APP}")
    for old, new in replace.items():
        text = text.replace(old, new)
    conf.write_text(text)
    return folder


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def deploy(cluster: RayHead, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = peach(
        "deploy", str(project), "--address", cluster.dashboard_url,
        "--http-port", str(cluster.http_port), *args,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def status(cluster: RayHead) -> dict:
    result = peach("status", "--address", cluster.dashboard_url, "--format", "json")
    assert result.returncode == 0, result.stderr
    (app,) = [a for a in json.loads(result.stdout)["applications"] if a["name"] == APP]
    return app


def replica_ids(cluster: RayHead) -> dict[str, set[str]]:
    return {
        d["name"]: {r["replica_id"] for r in d["replicas"]} for d in status(cluster)["deployments"]
    }


def greeting(cluster: RayHead) -> str:
    response = httpx.get(f"{cluster.serve_url}/hello", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["result"]["greeting"]


# -- what runs, going back -------------------------------------------------------------------


def test_status_shows_what_runs_and_a_deploy_of_an_earlier_commit_goes_back(cluster, tmp_path):
    repository = tmp_path / "repo"
    project = new_project(repository / "project")
    notebook = project / "notebooks" / "Hello.ipynb"

    # outside git: a hash of the content
    deploy(cluster, project)
    release = status(cluster)["release"]
    assert re.fullmatch(r"content:[0-9a-f]{12}", release["version"]), release
    assert release["commit"] is None

    git(repository, "init", "--quiet")
    git(repository, "config", "user.name", WHO)
    git(repository, "config", "user.email", "ada@example.com")
    git(repository, "add", "-A")
    git(repository, "commit", "--quiet", "-m", "hello")
    first = git(repository, "rev-parse", "--short", "HEAD")
    edit(notebook, "hello {name}", "hi {name}")
    git(repository, "commit", "--quiet", "-am", "hi")
    second = git(repository, "rev-parse", "--short", "HEAD")

    before = time.time()
    result = deploy(cluster, project)
    assert f"{APP} at {second} is running" in result.stderr
    app = status(cluster)
    release = app["release"]
    assert release["version"] == second
    assert release["commit"] == git(repository, "rev-parse", "HEAD")
    assert release["deployed_by"] == WHO and release["ref"] is None
    assert release["peach_version"] == peach("--version").stdout.split()[-1]
    deployed_at = datetime.strptime(release["deployed_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert before - 2 <= deployed_at.replace(tzinfo=UTC).timestamp() <= time.time() + 2
    assert greeting(cluster) == "hi world"
    text = peach("status", "--address", cluster.dashboard_url)
    assert text.returncode == 0, text.stderr
    assert re.search(rf"version {second}, deployed \S+ \S+ UTC by {WHO}, peach \S+", text.stdout)

    # uncommitted changes: +dirty
    edit(notebook, "hi {name}", "hey {name}")
    deploy(cluster, project)
    assert status(cluster)["release"]["version"] == f"{second}+dirty"
    assert greeting(cluster) == "hey world"

    # going back: the previous commit, the working tree untouched
    changed = git(repository, "status", "--porcelain")
    result = deploy(cluster, project, "--ref", "HEAD~1")
    assert f"{APP} at {first} is running" in result.stderr
    assert greeting(cluster) == "hello world"
    release = status(cluster)["release"]
    assert release["version"] == first and release["ref"] == "HEAD~1"
    assert "hey {name}" in notebook.read_text()
    assert git(repository, "status", "--porcelain") == changed
    assert git(repository, "rev-parse", "--short", "HEAD") == second
    text = peach("status", "--address", cluster.dashboard_url)
    assert f"version {first} (--ref HEAD~1)" in text.stdout


def test_a_ref_outside_git_or_that_does_not_exist_is_a_usage_error(tmp_path):
    project = new_project(tmp_path / "plain")
    outside = peach("deploy", str(project), "--ref", "HEAD")
    assert outside.returncode == 2, outside.stderr
    assert "not in a git repository" in outside.stderr and "Traceback" not in outside.stderr

    git(project, "init", "--quiet")
    git(project, "config", "user.name", WHO)
    git(project, "config", "user.email", "ada@example.com")
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "one")
    missing = peach("deploy", str(project), "--ref", "no-such-branch")
    assert missing.returncode == 2, missing.stderr
    assert "--ref no-such-branch: no such revision" in missing.stderr
    assert "Traceback" not in missing.stderr
    both = peach("deploy", str(project), "--diff", "--dry-run")
    assert both.returncode == 2 and "--diff and --dry-run" in both.stderr


# -- what a deploy would change ---------------------------------------------------------------

ENDPOINTS = """
  again:
    url: /again
    components:
      main: {notebook: notebooks/Hello.ipynb, method: count, cpus: 0.1, env_vars: {MODE: one}}
  same:
    url: /same
    components:
      main: {notebook: notebooks/Hello.ipynb, method: count, cpus: 0.1}
"""
TASKS = """
tasks:
  refresh: {notebook: notebooks/Task.ipynb, method: count}
"""
SCHEDULER = "tasks"
"""The deployment of the line ``scheduler`` (the project's task scheduler)."""


def diff_lines(cluster: RayHead, project: Path) -> dict[str, str]:
    result = peach("deploy", str(project), "--diff", "--address", cluster.dashboard_url)
    assert result.returncode == 0, result.stderr
    assert "nothing was changed" in result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        label, what = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        lines[label] = what
    return lines


def check_deploy_does_what_diff_said(cluster: RayHead, project: Path, said: dict[str, str]):
    before = replica_ids(cluster)
    deploy(cluster, project)
    after = replica_ids(cluster)
    for label, what in said.items():
        kind, _, name = label.partition(" ")
        if kind == "task":
            continue
        deployment = SCHEDULER if kind == "scheduler" else name or kind
        if what == "removed":
            assert deployment not in after, label
        elif what == "new":
            assert deployment not in before and after[deployment], label
        elif what.startswith("restarts"):
            assert not before[deployment] & after[deployment], (label, before, after)
        else:
            assert what.startswith("unchanged"), label
            assert after[deployment] == before[deployment], (label, before, after)


def test_diff_says_what_the_next_deploy_does_and_changes_nothing(cluster, tmp_path):
    project = new_project(tmp_path / "project")
    edit(project / "peach.yaml", "\n  count:", ENDPOINTS + "  count:")
    dead = peach("deploy", str(project), "--diff", "--address", "http://127.0.0.1:9")
    assert dead.returncode == 1, dead.stderr
    assert "Traceback" not in dead.stderr

    keep_only(cluster)
    nothing = diff_lines(cluster, project)
    assert set(nothing.values()) == {"new"}
    assert {"gateway", "component hello.main", "component same.main"} <= set(nothing)
    deploy(cluster, project)

    assert set(diff_lines(cluster, project).values()) == {"unchanged"}

    edit(project / "notebooks" / "Hello.ipynb", "hello {name}", "hi {name}")  # hello: code
    edit(project / "peach.yaml", "MODE: one", "MODE: two")  # again: env
    edit(project / "peach.yaml", "cpus: 0.1}\n  count", "cpus: 0.2}\n  count")  # same: config
    edit(project / "peach.yaml", "replicas: 2", "replicas: 1")  # hello scales down
    ids = replica_ids(cluster)
    said = diff_lines(cluster, project)
    assert replica_ids(cluster) == ids  # --diff changed nothing
    assert said["component hello.main"] == "restarts (code) (replicas 2 → 1)"
    assert said["component again.main"] == "restarts (env)"
    assert said["component same.main"] == "restarts (config)"
    assert said["component count.main"] == "unchanged"
    check_deploy_does_what_diff_said(cluster, project, said)
    assert set(diff_lines(cluster, project).values()) == {"unchanged"}

    # a task added and an endpoint removed: the application is built again
    edit(project / "peach.yaml", "\n  same:\n", "\n  gone:\n")
    shutil.copy(project / "notebooks" / "Hello.ipynb", project / "notebooks" / "Task.ipynb")
    (project / "peach.yaml").write_text((project / "peach.yaml").read_text() + TASKS)
    said = diff_lines(cluster, project)
    assert said["component same.main"] == "removed" and said["component gone.main"] == "new"
    assert said["task refresh"] == "new" and said["scheduler"] == "new"
    check_deploy_does_what_diff_said(cluster, project, said)
    assert set(diff_lines(cluster, project).values()) == {"unchanged"}

    # only the task's code: its next run restarts; the scheduler, holding the tasks in its
    # user_config, is reconfigured in place (its replica kept), nothing else is touched
    edit(project / "notebooks" / "Task.ipynb", "range(n)", "range(0, n)")  # its method
    said = diff_lines(cluster, project)
    assert said["task refresh"] == "restarts (code)"
    assert said["scheduler"] == "unchanged"
    assert {what for label, what in said.items() if label != "task refresh"} == {"unchanged"}
    check_deploy_does_what_diff_said(cluster, project, said)
    assert set(diff_lines(cluster, project).values()) == {"unchanged"}


# -- request lines ---------------------------------------------------------------------------


def test_logs_show_each_request_as_peach_dev_prints_it(cluster, tmp_path):
    project = new_project(tmp_path / "project")
    deploy(cluster, project)
    assert httpx.get(f"{cluster.serve_url}/hello", params={"name": "x"}, timeout=10).is_success
    assert httpx.get(f"{cluster.serve_url}/nowhere", timeout=10).status_code == 404
    streamed = httpx.get(f"{cluster.serve_url}/count", params={"stream": "1"}, timeout=10)
    assert streamed.content == b"0\n1\n2\n"

    wanted = {
        "call": r"gateway#\S+ \| GET /hello 200 main hello/main#\S+ \d+(\.\d)? ms",
        "404": r"gateway#\S+ \| GET /nowhere 404 \d",
        "stream": r"gateway#\S+ \| GET /count 200 main count/main#\S+ \d\S* m?s stream",
    }
    deadline = time.monotonic() + 60
    while True:
        logs = peach("logs", APP, "--address", cluster.dashboard_url, "-d", "gateway")
        assert logs.returncode == 0, logs.stderr
        missing = [name for name, line in wanted.items() if not re.search(line, logs.stdout)]
        if not missing:
            break
        assert time.monotonic() < deadline, f"{missing} not in:\n{logs.stdout}"
        time.sleep(1)
    # Serve's own access line (the route prefix only) is not what the user reads
    assert not re.search(r"\bGET / 200\b", logs.stdout), logs.stdout
