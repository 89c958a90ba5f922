"""Differential, for tasks: the same task project under `peach dev` and deployed on Ray
(``ray_cluster``) must queue triggered runs the same way — the same run ids, the same order,
one at a time — end a run past its ``timeout_s`` the same way, and report the same rows at
``/_peach/health`` (what `peach status` shows on Ray, and the dev view shows locally).
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
from ray_cluster import RayHead
from test_tasks_cluster import assert_one_at_a_time, deployed, jobs_of, without_applications

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]  # may start the cluster

TASKS = Path(__file__).resolve().parent / "projects" / "tasks"


def drive(url: str) -> list[str]:
    """Trigger five runs of ``record`` at once, then ``hang`` (past its timeout_s of 2 s)
    and ``fail``: their run ids."""
    with httpx.Client(base_url=url, timeout=60) as client:
        burst = client.get("/burst", params={"n": 5})
        assert burst.status_code == 200, burst.text
        ids = list(burst.json()["result"])
        for task in ("hang", "fail"):
            ids.append(client.get("/kick", params={"task": task}).json()["result"]["run_id"])
    return ids


def settled_rows(url: str, timeout_s: float = 240) -> dict[str, dict[str, Any]]:
    """The tasks' rows at ``/_peach/health`` once the seven runs are over."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = {
            row["task"]: row
            for row in httpx.get(f"{url}/_peach/health", timeout=30).json().get("tasks") or []
        }
        if rows and sum(r["runs_ok"] + r["runs_failed"] for r in rows.values()) >= 7:
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)


def comparable(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows without the durations' values (whether there is one stays)."""
    return {
        name: {**row, "last_seconds": row["last_seconds"] is not None} for name, row in rows.items()
    }


@pytest.fixture
def clean_cluster(ray_cluster: RayHead) -> RayHead:
    return without_applications(ray_cluster)


def test_triggered_runs_timeouts_and_rows_are_the_same_on_dev_and_on_ray(
    peach_dev: Any, clean_cluster: RayHead, tmp_path: Path
) -> None:
    dev_project = Path(shutil.copytree(TASKS, tmp_path / "dev" / "tasks"))
    dev = peach_dev(dev_project)
    dev.wait_ready()
    dev_ids = drive(dev.url)
    dev_rows = settled_rows(dev.url)
    ran = re.findall(r"task record triggered run (record#\d+) ok", dev.output())
    dev_order = [
        json.loads(line)["payload"]["value"]
        for line in (dev_project / "runs.jsonl").read_text().splitlines()
    ]

    ray_project = Path(shutil.copytree(TASKS, tmp_path / "ray" / "tasks"))
    since = time.time()
    url = deployed(clean_cluster, ray_project, loop=False)
    ray_ids = drive(url)
    ray_rows = settled_rows(url)
    jobs = jobs_of(clean_cluster, since=since)
    ray_order = [
        json.loads(job["runtime_env"]["env_vars"]["PEACH_TASK_PAYLOAD"])["value"]
        for job in jobs
        if job["metadata"]["peach_task"] == "record"
    ]

    assert dev_ids == ray_ids == [*(f"record#{n}" for n in range(1, 6)), "hang#6", "fail#7"]
    assert ran == ray_ids[:5]  # in the order they were triggered
    assert dev_order == ray_order == [0, 1, 2, 3, 4]
    assert [job["metadata"]["peach_task"] for job in jobs] == ["record"] * 5 + ["hang", "fail"]
    assert_one_at_a_time(jobs)
    assert comparable(dev_rows) == comparable(ray_rows)
    assert ray_rows["hang"]["last_error"] == "timed out after 2 s"
    assert ray_rows["fail"]["last_error"] == "RuntimeError: bad data: {'value': 0}"
