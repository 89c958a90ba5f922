"""Endpoint tests and replay against a deployed app: the same case files give the same
results on `peach dev` and on Ray Serve (`--url` with a route prefix), and a recording of
`peach dev` traffic replays the same against the deployed app (`--against`).

examples/quickstart is deployed once for the module under the route prefix /qs, beside the
semantics project on the session's shared cluster (``ray_semantics_cluster``).
"""

from __future__ import annotations

import json

import httpx
import pytest
from cli_support import REPO, run_peach
from conftest import start_peach_dev
from test_replay import wait_for_lines

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]  # may start the cluster

QUICKSTART = REPO / "examples" / "quickstart"
PREFIX = "/qs"


@pytest.fixture(scope="module")
def deployed(ray_semantics_cluster) -> str:
    head, _ = ray_semantics_cluster
    result = run_peach(
        "deploy", str(QUICKSTART), "--address", head.dashboard_url, "--route-prefix", PREFIX
    )
    assert result.returncode == 0, result.stderr
    return head.serve_url + PREFIX


@pytest.fixture(scope="module")
def recording_dev(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dev-record")
    record = folder / "traffic.jsonl"
    dev = start_peach_dev(QUICKSTART, folder / "dev.log", "--record", str(record))
    try:
        dev.wait_ready()
        yield dev, record
    finally:
        dev.stop()


def results(report: dict) -> list[tuple]:
    return [
        (c["file"], c["name"], c["passed"], c["status"], c["component"]) for c in report["cases"]
    ]


def test_the_same_case_files_give_the_same_results_on_both_hosts(deployed, recording_dev):
    dev, _ = recording_dev
    local = run_peach("test", str(QUICKSTART), "--format", "json")
    on_ray = run_peach("test", str(QUICKSTART), "--url", deployed, "--format", "json")
    on_dev = run_peach("test", str(QUICKSTART), "--url", dev.url, "--format", "json")
    for result in (local, on_ray, on_dev):
        assert result.returncode == 0, result.stdout + result.stderr
    reports = [json.loads(r.stdout) for r in (local, on_ray, on_dev)]
    assert results(reports[1]) == results(reports[0]) == results(reports[2])
    assert all(passed for _, _, passed, _, _ in results(reports[1]))


def test_dev_traffic_replays_the_same_against_the_deployed_app(deployed, recording_dev):
    dev, record = recording_dev
    # the users' traffic (peach's own tools are not recorded): the requests of the example's
    # cases, as a browser or curl sends them
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        assert client.get("/recommend", params={"item_id": "apple"}).status_code == 200
        assert client.get("/recommend", params={"item_id": "durian"}).status_code == 200
        with client.stream(
            "GET", "/story", params={"topic": "plum", "words": 3, "stream": "true"}
        ) as story:
            assert story.status_code == 200 and "plum-2" in story.read().decode()
        assert client.get("/story").status_code == 400
    lines = [json.dumps(line) for line in wait_for_lines(record, 4)]
    snapshot = record.with_name("snapshot.jsonl")
    snapshot.write_text("\n".join(lines) + "\n")

    replayed = run_peach("replay", str(snapshot), "--url", deployed)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert f": {len(lines)} same, 0 differ, 0 failed" in replayed.stderr

    against = run_peach("replay", str(snapshot), "--url", dev.url, "--against", deployed)
    assert against.returncode == 0, against.stdout + against.stderr
    assert f": {len(lines)} same, 0 differ, 0 failed" in against.stderr

    # and a recorded answer the deployed app does not give is reported as differing
    changed = json.loads(lines[0])
    changed["result"] = ["something", "else"]
    (snapshot.with_name("changed.jsonl")).write_text(json.dumps(changed) + "\n")
    differs = run_peach("replay", str(snapshot.with_name("changed.jsonl")), "--url", deployed)
    assert differs.returncode == 1
    assert ": 0 same, 1 differ, 0 failed" in differs.stderr


def test_the_openapi_document_is_the_commands_on_both_hosts(deployed, recording_dev):
    """SPEC §11: the deployed app serves the command's document under its route prefix,
    with the prefix in ``servers``; `peach dev` serves the same one."""
    dev, _ = recording_dev
    printed = run_peach("openapi", str(QUICKSTART))
    assert printed.returncode == 0, printed.stderr
    command = json.loads(printed.stdout)
    on_ray = httpx.get(deployed + "/_peach/openapi.json", timeout=30)
    on_dev = httpx.get(dev.url + "/_peach/openapi.json", timeout=30)
    assert on_ray.status_code == on_dev.status_code == 200
    assert on_ray.json()["servers"] == [{"url": PREFIX}]
    assert on_dev.json() == command and command["servers"] == [{"url": "/"}]
    assert {**on_ray.json(), "servers": command["servers"]} == command


def test_fuzz_with_a_url_fuzzes_the_deployed_app_under_its_prefix(deployed):
    """SPEC §11: `peach fuzz --url` reads the deployed app's document under its prefix and
    sends its requests there; the quickstart has nothing to find."""
    fuzzed = run_peach("fuzz", "--url", deployed, "--examples", "10", "--seed", "3")
    assert fuzzed.returncode == 0, fuzzed.stdout + fuzzed.stderr
    shown = fuzzed.stdout + fuzzed.stderr
    assert "/recommend  10 requests" in shown and "/story  10 requests" in shown, shown
    assert "nothing found in 2 endpoints, 20 requests" in shown, shown
