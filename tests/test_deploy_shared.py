"""A shared Ray cluster (SPEC §6), on the two-node cluster of conftest's ``ray_cluster``:
several projects under their own route prefixes, what is uploaded, `peach logs`, the
gateway's `/_peach/health`, a redeploy under load, and the dashboard token."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach, start_peach
from ray_cluster import RayHead
from test_deploy_cluster import basic_app, cluster, plan_of, replica_ids  # noqa: F401 - fixtures
from waiting import poll as poll_until

from peach_cli.deploy.config import build_bundle
from peach_cli.deploy.deployer import deploy
from peach_cli.deploy.progress import read_application

pytestmark = [pytest.mark.ray, pytest.mark.timeout(450)]  # the first test starts the cluster

TESTS = Path(__file__).resolve().parent
PROJECTS = TESTS / "projects"
BASIC = PROJECTS / "deploy_basic"
SHARED = PROJECTS / "deploy_shared"
INITFAIL = PROJECTS / "deploy_initfail"
REPO = TESTS.parent


def peach(*args: str) -> subprocess.CompletedProcess[str]:
    return run_peach(*args)


def poll(check, what: str, timeout_s: float = 30.0, interval_s: float = 0.3):
    return poll_until(check, what, timeout_s, interval_s=interval_s, tolerate=())


def with_private_files(project: Path) -> None:
    """Files a deploy must not upload, next to one it must."""
    (project / ".env").write_text("DB_PASSWORD=hunter2\n")
    (project / ".aws").mkdir()
    (project / ".aws" / "credentials").write_text("[default]\n")
    (project / ".gitignore").write_text("data/\n*.log\n!keep.log\n")
    (project / ".rayignore").write_text("weights.bin\n")
    (project / "data").mkdir()
    (project / "data" / "customers.csv").write_text("id,email\n")
    (project / "keep.log").write_text("kept\n")
    (project / "debug.log").write_text("ignored\n")
    (project / "weights.bin").write_bytes(b"\0" * 64)
    (project / "venv" / "lib").mkdir(parents=True)
    (project / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (project / "venv" / "lib" / "site.py").write_text("")
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"")
    (project / "sub").mkdir()
    (project / "sub" / ".gitignore").write_text("*.tmp\n")
    (project / "sub" / "scratch.tmp").write_text("")
    (project / "sub" / "notes.txt").write_text("uploaded\n")
    # a data file every component reads: incompressible, so it weighs what it says
    (project / "model.bin").write_bytes(random.Random(28).randbytes(DATA_BYTES))


DATA_BYTES = 1024 * 1024
UPLOADED = ["helpers.py", "keep.log", "model.bin", "sub/notes.txt"]


def digests(project: Path) -> dict[str, str]:
    return {name: hashlib.sha256((project / name).read_bytes()).hexdigest() for name in UPLOADED}


def replicas_answering(url: str, count: int) -> dict[str, object]:
    """Replica → its answer at ``url``, once ``count`` different replicas have answered."""
    answers: dict[str, object] = {}

    def ask() -> dict[str, object] | None:
        response = httpx.get(url, timeout=10)
        assert response.status_code == 200, response.text
        answers[response.headers["x-peach-replica"]] = response.json()["result"]
        return answers if len(answers) >= count else None

    return poll(ask, f"{count} replicas never answered {url}", interval_s=0.05)


def nodes(head: RayHead) -> tuple[str, set[str]]:
    """The head's node id, and the node ids of every Serve replica."""
    summary = httpx.get(f"{head.dashboard_url}/nodes?view=summary", timeout=10).json()
    (head_id,) = [
        n["raylet"]["nodeId"] for n in summary["data"]["summary"] if n["raylet"]["isHeadNode"]
    ]
    details = httpx.get(f"{head.dashboard_url}/api/serve/applications/", timeout=10).json()
    placed = {
        replica["node_id"]
        for app in details["applications"].values()
        for deployment in app["deployments"].values()
        for replica in deployment["replicas"]
    }
    return head_id, placed


def test_a_redeploy_under_load_fails_no_request_and_keeps_unchanged_replicas(
    basic_app,  # noqa: F811
    tmp_path,
):
    cluster = basic_app  # noqa: F811 - deploy-basic runs already: this deploy of a copy changes nothing
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    deploy(plan_of(project), address=cluster.dashboard_url)
    before = replica_ids(cluster)
    serve = cluster.serve_url
    stop = threading.Event()
    failures: list[str] = []
    calls = {"hello": 0, "count": 0, "new": 0}

    def client() -> None:
        with httpx.Client(base_url=serve, timeout=30) as http:
            while not stop.is_set():
                try:
                    hello = http.get("/hello", params={"name": "load"})
                    if hello.status_code != 200:
                        failures.append(f"/hello {hello.status_code} {hello.text[:200]}")
                    elif hello.json()["result"]["greeting"] == "hi load":
                        calls["new"] += 1
                    calls["hello"] += 1
                    count = http.get("/count", params={"stream": "1", "n": "2"})
                    if count.status_code != 200 or count.content != b"0\n1\n":
                        failures.append(f"/count {count.status_code} {count.content[:200]!r}")
                    calls["count"] += 1
                except httpx.HTTPError as error:
                    failures.append(f"{type(error).__name__}: {error}")

    clients = [threading.Thread(target=client) for _ in range(2)]
    for thread in clients:
        thread.start()
    try:
        poll(lambda: calls["hello"] >= 20, "the clients did not get going")
        notebook = project / "notebooks" / "Hello.ipynb"
        notebook.write_text(notebook.read_text().replace("hello {name}", "hi {name}"))
        deploy(plan_of(project), address=cluster.dashboard_url)
        served = calls["hello"]
        poll(lambda: calls["hello"] >= served + 20, "the clients stopped after the redeploy")
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=40)
    assert failures == [], failures[:5]
    assert calls["new"] > 0 and calls["count"] > 40, calls
    after = replica_ids(cluster)
    assert after["deploy-basic/count.main"] == before["deploy-basic/count.main"]
    assert after["deploy-basic/gateway"] == before["deploy-basic/gateway"]
    assert not set(after["deploy-basic/hello.main"]) & set(before["deploy-basic/hello.main"])


def test_projects_share_the_cluster_under_their_own_prefixes(basic_app, tmp_path):  # noqa: F811
    cluster = basic_app  # noqa: F811 - deploy-basic runs already: the deploy of its copy changes nothing
    serve = cluster.serve_url
    address = ("--address", cluster.dashboard_url)
    basic = tmp_path / "basic"
    shutil.copytree(BASIC, basic)
    result = peach("deploy", str(basic), *address)
    assert result.returncode == 0, result.stderr
    before = replica_ids(cluster)

    # a second project on the same prefix: refused before anything changes
    shared = tmp_path / "shared"
    shutil.copytree(SHARED, shared)
    with_private_files(shared)
    refused = peach("deploy", str(shared), *address)
    assert refused.returncode == 1
    assert "the application 'deploy-basic' already serves the route prefix '/'" in refused.stderr
    assert "--route-prefix /deploy-shared" in refused.stderr
    assert replica_ids(cluster) == before

    # what it would upload, listed by --dry-run (stdout stays the config)
    dry = peach("deploy", str(shared), "--dry-run", "--route-prefix", "/deploy-shared")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["applications"][0]["route_prefix"] == "/deploy-shared"
    listed = re.findall(r"^  (\S+)  \d", dry.stderr, re.MULTILINE)
    assert listed == UPLOADED, dry.stderr
    assert re.search(r"4 files, [\d.]+ MiB in the project package", dry.stderr)
    # one project package and a small one per component, not the data once per component
    packages = re.findall(r"^  - (\S+)  ", dry.stderr, re.MULTILINE)
    assert len(packages) == 4 + 3 and sum(p.startswith("_ray_pkg_") for p in packages) == 1
    total = re.search(r"^([\d.]+) MiB in 7 packages sent by a deploy", dry.stderr, re.M)
    assert total and float(total.group(1)) < DATA_BYTES / 2**20 + 0.2, dry.stderr

    result = peach("deploy", str(shared), *address, "--route-prefix", "/deploy-shared")
    assert result.returncode == 0, result.stderr
    assert f"/talk  {serve}/deploy-shared/talk" in result.stdout
    assert f"--url {serve}/deploy-shared" in result.stderr
    # the data once (peach's runtime may be there already, from the other project)
    assert re.search(r"code: [67] packages uploaded \(1\.\d MiB\)", result.stderr), result.stderr
    # the replicas got exactly the files the listing promised, on the worker node: every
    # replica of every component the same files, from the one project package
    expected = digests(shared)
    assert httpx.get(f"{serve}/deploy-shared/files", timeout=10).json()["result"] == expected
    again = replicas_answering(f"{serve}/deploy-shared/files_again", 2)
    assert list(again.values()) == [expected, expected]
    details = httpx.get(f"{cluster.dashboard_url}/api/serve/applications/", timeout=10).json()
    components = {
        name: deployment["deployment_config"]["ray_actor_options"]["runtime_env"]
        for name, deployment in details["applications"]["deploy-shared"]["deployments"].items()
        if name != "gateway"
    }
    assert len(components) == 4
    (working_dir,) = {env["working_dir"] for env in components.values()}
    assert working_dir.startswith("gcs://_ray_pkg_")
    assert len({env["py_modules"][-1] for env in components.values()}) == 4  # their specs
    # what Serve runs is the code the deploy waited for, the gateway's included (a failure
    # of another version is told apart by it)
    app = read_application("deploy-shared", details["applications"]["deploy-shared"])
    bundle = build_bundle(plan_of(shared), route_prefix="/deploy-shared")
    assert {d.name: d.code for d in app.deployments} == bundle.codes
    head_id, placed = nodes(cluster)
    assert placed and head_id not in placed

    asked = peach("ask", "/talk", "text=hi", "--url", f"{serve}/deploy-shared")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout) == {"echo": "hi"}
    missing = peach("ask", "/tlak", "--url", f"{serve}/deploy-shared")
    assert missing.returncode == 8
    assert "did you mean /talk" in missing.stderr  # the routes of the gateway under the prefix
    assert httpx.get(f"{serve}/hello", timeout=10).json()["result"]["greeting"] == "hello world"
    assert httpx.get(f"{serve}/deploy-shared/hello", timeout=10).status_code == 404

    status = peach("status", *address, "--format", "json")
    prefixes = {a["name"]: a["route_prefix"] for a in json.loads(status.stdout)["applications"]}
    assert prefixes == {"deploy-basic": "/", "deploy-shared": "/deploy-shared"}
    assert "route /deploy-shared" in peach("status", *address).stdout

    # redeploying one (a changed component) leaves the other's replicas alone
    shared_before = {k: v for k, v in replica_ids(cluster).items() if k.startswith("deploy-shared")}
    notebook = basic / "notebooks" / "Hello.ipynb"
    notebook.write_text(notebook.read_text().replace("hello {name}", "hi {name}"))
    result = peach("deploy", str(basic), *address)
    assert result.returncode == 0, result.stderr
    assert httpx.get(f"{serve}/hello", timeout=10).json()["result"]["greeting"] == "hi world"
    after = replica_ids(cluster)
    assert {k: v for k, v in after.items() if k.startswith("deploy-shared")} == shared_before

    # and deleting it too
    result = peach("delete", "deploy-basic", *address)
    assert result.returncode == 0, result.stderr
    assert {k: v for k, v in replica_ids(cluster).items()} == shared_before
    talk = httpx.get(f"{serve}/deploy-shared/talk", params={"text": "still"}, timeout=10)
    assert talk.json()["result"] == {"echo": "still"}
    routes = httpx.get(f"{serve}/deploy-shared/_peach/routes", timeout=10).json()
    assert routes["codops"] == "deploy-shared"
    assert [e["url"] for e in routes["endpoints"]] == ["/drift", "/files", "/files_again", "/talk"]


def log_lines(head: RayHead, *args: str) -> str:
    result = peach("logs", *args, "--address", head.dashboard_url)
    assert result.returncode == 0, result.stderr
    return result.stdout


def poll_logs(head: RayHead, needle: str, *args: str) -> str:
    """`peach logs ARGS` once its output holds ``needle`` (log files are written async)."""

    def read() -> str | None:
        text = log_lines(head, *args)
        return text if needle in text else None

    return poll(read, f"{needle!r} never reached peach logs")


def test_logs_health_and_status_show_prints_init_errors_and_failed_reinits(cluster):  # noqa: F811
    serve, address = cluster.serve_url, ("--address", cluster.dashboard_url)
    result = peach("deploy", str(SHARED), *address, "--route-prefix", "/shared")
    assert result.returncode == 0, result.stderr
    assert httpx.get(f"{serve}/shared/talk", params={"text": "ping"}, timeout=10).status_code == 200
    # a drift-aware answer re-runs init on that replica, and this init fails the second time
    assert httpx.get(f"{serve}/shared/drift", timeout=10).json()["result"] == ["v1"]

    def drift_error():
        health = httpx.get(f"{serve}/shared/_peach/health", timeout=10).json()
        component = next(c for c in health["components"] if c["component"] == "drift/main")
        return health if component["replicas"][0]["error"] else None

    health = poll(drift_error, "the failed re-init never reached /_peach/health")
    assert health["codops"] == "deploy-shared" and health["status"] == "degraded"
    drift = next(c for c in health["components"] if c["component"] == "drift/main")
    (replica,) = drift["replicas"]
    assert replica["state"] == "running" and replica["id"] == f"drift/main#{replica['replica_id']}"
    assert "re-init after drift failed, keeping the previous state" in replica["error"]
    assert "RuntimeError: the model store is gone" in replica["error"]
    talk = next(c for c in health["components"] if c["component"] == "talk/main")
    assert [r["error"] for r in talk["replicas"]] == [None]
    # the replica keeps serving with its old state
    assert httpx.get(f"{serve}/shared/drift", timeout=10).json()["result"] == ["v1"]

    status = peach("status", *address, "--format", "json")
    (app,) = json.loads(status.stdout)["applications"]
    deployments = {d["name"]: d for d in app["deployments"]}
    assert "the model store is gone" in deployments["drift.main"]["replicas"][0]["last_error"]
    assert deployments["talk.main"]["replicas"][0]["last_error"] is None
    assert "re-init after drift failed" in peach("status", *address).stdout

    # breakpoint() on Ray does not hang the replica: skipped, and the log says so (SPEC §7)
    debug = httpx.get(f"{serve}/shared/talk", params={"text": "debug"}, timeout=10)
    assert debug.json()["result"] == {"echo": "debug"}
    assert debug.headers["x-peach-component"] == "main"
    skipped = "breakpoint() at notebooks/Shared.ipynb, cell 2, line 12 skipped (no terminal"
    poll_logs(cluster, skipped)

    # the replicas' own output, each line with its deployment and replica
    talk_id = deployments["talk.main"]["replicas"][0]["replica_id"]
    drift_id = deployments["drift.main"]["replicas"][0]["replica_id"]
    text = poll_logs(cluster, "talk was asked: ping")
    assert f"talk.main#{talk_id} | loading the talk model" in text
    assert f"talk.main#{talk_id} | talk was asked: ping" in text
    assert re.search(rf"^drift\.main#{drift_id} \| .*re-init after drift failed", text, re.M)
    assert f"drift.main#{drift_id} | RuntimeError: the model store is gone" in text
    # stream=true to a method that does not stream: one call of the method (its answer in
    # the envelope), not a probe and then a call. Lines of one replica come in order, so
    # once the next request's line is there, a second "once" would be too.
    once = httpx.get(f"{serve}/shared/talk", params={"text": "once", "stream": "true"}, timeout=10)
    assert once.status_code == 200 and once.json()["result"] == {"echo": "once"}, once.text
    httpx.get(f"{serve}/shared/talk", params={"text": "after"}, timeout=10)
    text = poll_logs(cluster, "talk was asked: after", "deploy-shared", "-d", "talk.main")
    assert text.count("talk was asked: once") == 1, text
    only = log_lines(cluster, "deploy-shared", "--deployment", "talk.main", "--tail", "1")
    prefixes = [line.split(" | ", 1)[0] for line in only.splitlines()]
    # talk.main only (stopped replicas of any earlier deploy-shared are listed too), and of
    # this deploy's replica one line of stdout and one of stderr at most
    assert all(p.startswith("talk.main#") for p in prefixes), only
    live = [p for p in prefixes if not p.endswith("(stopped)")]
    assert set(live) == {f"talk.main#{talk_id}"} and len(live) <= 2, only
    unknown = peach("logs", "deploy-shared", *address, "--deployment", "talk")
    assert unknown.returncode == 2 and "did you mean talk.main" in unknown.stderr

    # --follow prints new lines as the replica writes them, until Ctrl-C
    log = (cluster.temp_dir / "follow.log").open("wb")
    follower = start_peach(  # a real process: --follow runs until the test sends SIGINT
        "logs", "deploy-shared", *address, "-d", "talk.main", "--follow", "--tail", "0",
        env={"PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    log.close()
    try:
        follow_log = cluster.temp_dir / "follow.log"

        def followed():
            httpx.get(f"{serve}/shared/talk", params={"text": "later"}, timeout=10)
            return "talk was asked: later" in follow_log.read_text()

        poll(followed, "--follow did not print the new line", interval_s=1.0)
        assert f"talk.main#{talk_id} | talk was asked: later" in follow_log.read_text()
    finally:
        os.killpg(follower.pid, signal.SIGINT)
        code = follower.wait(timeout=15)
    assert code == 130

    # an init that fails: its replicas stop, and their logs still show the user's error.
    # Replicas an earlier deploy of that project left (another test may have made one) are
    # still listed: only the ones this deploy adds count.
    def stopped_replicas(text: str) -> list[str]:  # newest first, as peach logs lists them
        return [
            line.split(" | ", 1)[0]
            for line in text.splitlines()
            if line.startswith("broken.main#") and "(stopped) | " in line
        ]

    listed = peach("logs", "deploy-initfail", *address)  # exit 1 when there is no such app
    earlier = set(stopped_replicas(listed.stdout)) if listed.returncode == 0 else set()
    failed = peach("deploy", str(INITFAIL), *address, "--route-prefix", "/initfail")
    assert failed.returncode == 1

    # Serve stops the failed replicas a moment after peach reports them. Stopped replicas
    # come newest first, so once one of this deploy's has stopped, the first shown is one of
    # them, with the user's error.
    def newest_shows_the_error() -> str | None:
        text = log_lines(cluster, "deploy-initfail")
        prefixes = [p for p in stopped_replicas(text) if p not in earlier]
        error = "| FileNotFoundError: no weights at /models/latest.bin"
        return text if prefixes and f"{prefixes[0]} {error}" in text else None

    text = poll(newest_shows_the_error, "the newest stopped replica's init error in peach logs")
    assert re.search(
        r"^broken\.main#\w+ \(stopped\) \| FileNotFoundError: no weights at /models/latest.bin",
        text,
        re.M,
    )
    ours = set(stopped_replicas(text)) - earlier
    assert 1 <= len(ours) <= 2, text  # this deploy's failed replicas: two at most
