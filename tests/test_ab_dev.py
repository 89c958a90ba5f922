"""A/B tests under `peach dev`: the split in /_peach/routes and the live view, requests
counted per arm, and a save that changes only the split re-routing without a restart.

The assignment itself (SPEC §2's hash, query and body, fallback, streams) is checked on both
hosts by ``test_gateway_semantics.py`` (through ``test_parity.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from pathlib import Path

import httpx
import pytest
from projectkit import write_project
from reload_support import edit_file
from rich.console import Console
from waiting import poll

from peach_cli.checks.build import build_plan
from peach_cli.views.dev import DevView
from simulator.changes import Snapshot, analyze_changes
from simulator.events import Reloaded, RequestLogged

pytestmark = pytest.mark.timeout(120)

CONF = """codops: shop
endpoints:
  reco:
    url: /reco
    ab: {by: user, split: {main: 80, diverse: 20}}
    components:
      main: {notebook: nb.ipynb, method: reco, args: {arm: main}}
      diverse: {notebook: nb.ipynb, method: reco, args: {arm: diverse}}
"""
CELLS = [
    'import os\n\ndef reco(arm: str, user_id: str = ""):\n    return {"arm": arm, "pid": os.getpid()}\n'
]


def spec_arm(endpoint: str, value: str, split: list[tuple[str, int]]) -> str:
    bucket = int.from_bytes(hashlib.sha256(f"{endpoint}:{value}".encode()).digest()[:8], "big")
    bucket %= 100
    upper = 0
    for arm, percent in split:
        upper += percent
        if bucket < upper:
            return arm
    raise AssertionError(bucket)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "reco", CONF, {"nb.ipynb": CELLS})


def plan_of(project: Path):
    plan, diagnostics = build_plan(project)
    assert plan is not None, [str(d) for d in diagnostics]
    return plan


def test_a_split_change_re_routes_and_restarts_nothing(project: Path) -> None:
    before = Snapshot.take(plan_of(project))
    edit_file(project, "peach.yaml", "{main: 80, diverse: 20}", "{diverse: 50, main: 50}")
    after_plan = plan_of(project)
    changes = analyze_changes(before, Snapshot.take(after_plan))
    assert changes.splits_changed == ("reco",)
    assert changes.needs_new_replicas == [] and changes.unchanged == ["reco/main", "reco/diverse"]
    assert not changes.empty
    message = Reloaded(("peach.yaml",), changes, 0.01, 0.0, plan=after_plan).message
    assert message.startswith("reco split diverse 50% / main 50% by user in ")


def test_removing_the_ab_test_is_a_split_change_too(project: Path) -> None:
    before = Snapshot.take(plan_of(project))
    edit_file(project, "peach.yaml", "    ab: {by: user, split: {main: 80, diverse: 20}}\n", "")
    changes = analyze_changes(before, Snapshot.take(plan_of(project)))
    assert changes.splits_changed == ("reco",) and changes.needs_new_replicas == []


def test_the_live_view_shows_each_arms_share_and_requests(project: Path) -> None:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    view = DevView(console, live=False)
    view.set_plan(plan_of(project))
    for arm, answered in [("main", "main"), ("main", "main"), ("diverse", "diverse")]:
        view.handle(
            RequestLogged("GET", "/reco", 200, "reco", answered, "reco/x#1", 0.001, arm=arm)
        )
    console.print(view.render())
    table = console.file.getvalue()
    assert "reco /reco · A/B by user" in table
    assert "main 80% · 2 routed" in table and "diverse 20% · 1 routed" in table


def test_a_request_line_says_for_which_arm_the_fallback_answered(project: Path) -> None:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    view = DevView(console, live=False)
    view.set_plan(plan_of(project))
    event = RequestLogged("GET", "/reco", 200, "reco", "fallback", "reco/fallback#1", 0.002)
    view.handle(dataclasses.replace(event, arm="diverse"))
    view.handle(dataclasses.replace(event, component="main", replica="reco/main#1", arm="main"))
    lines = console.file.getvalue().splitlines()
    assert lines == [
        "GET /reco 200 fallback (arm diverse) reco/fallback#1 2.0 ms",
        "GET /reco 200 main reco/main#1 2.0 ms",
    ]


@pytest.mark.slow
def test_routes_show_the_split_and_a_saved_split_re_routes_the_same_replicas(
    project: Path, peach_dev
) -> None:
    dev = peach_dev(project, reload=True)
    dev.wait_ready()
    dev.wait_for_output(r"watching .* for changes")
    users = [f"u{i}" for i in range(40)]
    split = [("main", 80), ("diverse", 20)]
    pids = {}
    with httpx.Client(base_url=dev.url, timeout=10) as client:
        for user in users:
            response = client.get("/reco", params={"user_id": user})
            arm = spec_arm("reco", user, split)
            assert response.headers["x-peach-component"] == arm
            pids[arm] = response.json()["result"]["pid"]
        routes = client.get("/_peach/routes").json()["endpoints"]
        expected = [spec_arm("reco", u, split) for u in users]
        assert routes[0]["ab"] == {
            "by": "user",
            "param": "user_id",
            "split": {"main": 80, "diverse": 20},
            "requests": {"main": expected.count("main"), "diverse": expected.count("diverse")},
        }

        edit_file(project, "peach.yaml", "{main: 80, diverse: 20}", "{diverse: 60, main: 40}")
        new_split = [("diverse", 60), ("main", 40)]
        poll(
            lambda: (
                client.get("/_peach/routes").json()["endpoints"][0]["ab"]["split"]
                == {"diverse": 60, "main": 40}
            ),
            "the new split",
        )
        for user in users:
            response = client.get("/reco", params={"user_id": user})
            arm = spec_arm("reco", user, new_split)
            assert response.headers["x-peach-component"] == arm
            assert response.json()["result"]["pid"] == pids[arm]  # the same replicas
    dev.wait_for_output(r"reco split diverse 60% / main 40% by user in ")
    assert "reloaded reco/" not in dev.output()
