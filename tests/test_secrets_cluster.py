"""env_vars and secrets on a real Ray cluster (SPEC §10): each component deployment gets
its own env_vars and secrets in its ``runtime_env`` and nothing else, the gateway none; a
secret's value never shows in `--dry-run`, `status` or the task's log; a redeploy after a
secret's value changed restarts exactly the components that read it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach
from ray_cluster import RayHead

from peach_cli.deploy.dashboard import DashboardClient

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

PROJECT = Path(__file__).resolve().parent / "projects" / "secrets"
READER = "reader-value-Zq81"
OTHER = "other-value-Lp27"
TASK = "task-value-Hs55"
NEEDY = "needy-value-Wd93"
VALUES = (READER, OTHER, TASK, NEEDY)


@pytest.fixture
def cluster(ray_cluster: RayHead) -> RayHead:
    """The cluster, with no Serve application left by an earlier test."""
    with DashboardClient(ray_cluster.dashboard_url) as dashboard:
        if dashboard.serve_details().get("applications"):
            dashboard.put_applications({"applications": []})
        deadline = time.monotonic() + 60
        while dashboard.serve_details().get("applications"):
            assert time.monotonic() < deadline, "applications did not go away"
            time.sleep(0.2)
    return ray_cluster


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = Path(shutil.copytree(PROJECT, tmp_path / "secrets"))
    (copy / ".env").write_text(f"READER_KEY={READER}\nTASK_KEY={TASK}\n")
    return copy


def peach(*args: str, **env: str):
    return run_peach(*args, env={"OTHER_KEY": OTHER, "UNDECLARED_VAR": "nope", **env})


def seen(head: RayHead, url: str) -> dict:
    response = httpx.get(f"{head.serve_url}{url}", timeout=20)
    assert response.status_code == 200, response.text
    return response.json()["result"]


def replica_ids(head: RayHead) -> dict[str, list[str]]:
    result = peach("status", "--address", head.dashboard_url, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert not any(value in result.stdout for value in VALUES)
    return {
        d["name"]: sorted(r["replica_id"] for r in d["replicas"])
        for app in json.loads(result.stdout)["applications"]
        for d in app["deployments"]
    }


def test_each_deployment_reads_only_its_secrets_and_none_is_ever_shown(cluster, project):
    address = ("--address", cluster.dashboard_url, "--http-port", str(cluster.http_port))
    # NEEDY_KEY is set nowhere: the deploy fails before changing anything, naming it
    refused = peach("deploy", str(project), *address)
    assert refused.returncode == 1
    assert "secret NEEDY_KEY is not set: export it or add it to .env" in refused.stderr
    with DashboardClient(cluster.dashboard_url) as dashboard:
        assert not dashboard.serve_details().get("applications")

    dry = peach("deploy", str(project), "--dry-run", NEEDY_KEY=NEEDY)
    assert dry.returncode == 0, dry.stderr
    assert not any(value in dry.stdout + dry.stderr for value in VALUES)
    assert ".env" not in dry.stderr  # never uploaded
    deployments = {
        d["name"]: d["ray_actor_options"]["runtime_env"]
        for d in json.loads(dry.stdout)["applications"][0]["deployments"]
    }
    assert "env_vars" not in deployments["gateway"]
    assert deployments["reader.main"]["env_vars"] == {
        "LOG_LEVEL": "info",
        "MODEL": "small",
        "READER_KEY": "***",
        "PEACH_SECRETS": "READER_KEY",
    }
    assert deployments["plain.main"]["env_vars"] == {"LOG_LEVEL": "info"}

    result = peach("deploy", str(project), *address, NEEDY_KEY=NEEDY)
    assert result.returncode == 0, result.stderr
    assert not any(value in result.stdout + result.stderr for value in VALUES)
    reader, other, plain = (
        seen(cluster, "/reader"),
        seen(cluster, "/other"),
        seen(cluster, "/plain"),
    )
    assert reader["seen"]["READER_KEY"] == READER and reader["seen"]["MODEL"] == "small"
    assert reader["seen"]["OTHER_KEY"] is None  # another deployment's secret
    assert other["seen"]["OTHER_KEY"] == OTHER and other["seen"]["READER_KEY"] is None
    assert plain["seen"]["LOG_LEVEL"] == "info"
    assert plain["seen"]["READER_KEY"] is None and plain["seen"]["OTHER_KEY"] is None
    assert all(s["seen"]["UNDECLARED_VAR"] is None for s in (reader, other, plain))
    text = peach("status", "--address", cluster.dashboard_url)
    assert text.returncode == 0 and "reader.main" in text.stdout
    assert not any(value in text.stdout + text.stderr for value in VALUES)

    # a new value of READER_KEY: only reader.main gets new replicas
    before = replica_ids(cluster)
    (project / ".env").write_text(f"READER_KEY={READER}-rotated\nTASK_KEY={TASK}\n")
    again = peach("deploy", str(project), *address, NEEDY_KEY=NEEDY)
    assert again.returncode == 0, again.stderr
    assert seen(cluster, "/reader")["seen"]["READER_KEY"] == f"{READER}-rotated"
    after = replica_ids(cluster)
    assert after["reader.main"] != before["reader.main"]
    for name in ("gateway", "other.main", "plain.main", "needy.main"):
        assert after[name] == before[name], name


def test_a_task_on_the_cluster_gets_its_secret_and_its_log_masks_it(cluster, project):
    result = peach("task", "run", "show", str(project), "--address", cluster.dashboard_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert TASK not in result.stdout + result.stderr
    line = re.search(r"^show \| env (.*)$", result.stdout, re.MULTILINE)
    assert line is not None, result.stdout
    env = json.loads(line.group(1))
    assert env["TASK_KEY"] == "***" and env["TASK_MODE"] == "nightly"
    assert env["OTHER_KEY"] is None and env["UNDECLARED_VAR"] is None
    digests = re.search(r"^show \| digests (.*)$", result.stdout, re.MULTILINE)
    assert json.loads(digests.group(1))["TASK_KEY"] == hashlib.sha256(TASK.encode()).hexdigest()
