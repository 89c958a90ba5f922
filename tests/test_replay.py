"""`peach dev --record FILE` and `peach replay`, against real `peach dev` servers.

One recording `peach dev` (reloading) of a copy of examples/quickstart for the module: its
requests are recorded, replayed against it (all same), and after an edit of the fallback in
the notebook replayed again (the fallback's answers differ, the rest are the same); a second
`peach dev` of the unedited example is the `--against` host.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
from cli_support import REPO, run_peach
from conftest import start_peach_dev

QUICKSTART = REPO / "examples" / "quickstart"
NOTEBOOK = "notebooks/Endpoints.ipynb"
TRENDING = '[\\"apple\\", \\"banana\\", \\"cherry\\"][:size]'  # as the notebook's JSON has it
EDITED = TRENDING.replace("apple", "kiwi")


def wait_for_lines(path: Path, count: int, timeout_s: float = 10) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return [json.loads(line) for line in lines]
        assert time.monotonic() < deadline, f"{len(lines)} lines recorded, expected {count}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The recording dev server, and a snapshot of what it recorded of five requests."""
    folder = tmp_path_factory.mktemp("replay")
    project = folder / "quickstart"
    shutil.copytree(QUICKSTART, project)
    record = folder / "traffic.jsonl"
    dev = start_peach_dev(project, folder / "dev.log", "--record", str(record), reload=True)
    try:
        dev.wait_ready()
        with httpx.Client(base_url=dev.url, timeout=30) as client:
            client.get("/recommend", params={"item_id": "apple"})
            client.get("/recommend", params={"item_id": "durian"})  # the fallback answers
            client.post("/recommend", json={"item_id": "pear", "size": 1})
            with client.stream("GET", "/story", params={"stream": "true", "words": 3}) as r:
                r.read()
            client.get("/story")  # 400 stream_required
        lines = wait_for_lines(record, 5)
        snapshot = folder / "snapshot.jsonl"
        snapshot.write_text("".join(json.dumps(line) + "\n" for line in lines))
        yield dev, project, record, snapshot
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    dev = start_peach_dev(QUICKSTART, tmp_path_factory.mktemp("original") / "dev.log")
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


def test_every_answered_request_is_one_json_line(recorded):
    _, _, _, snapshot = recorded
    apple, durian, posted, story, refused = (
        json.loads(x) for x in snapshot.read_text().splitlines()
    )
    assert apple["method"] == "GET" and apple["url"] == "/recommend"
    assert apple["query"] == "item_id=apple" and apple["body"] is None
    assert (apple["status"], apple["component"], apple["result"]) == (
        200,
        "main",
        ["pear", "banana"],
    )
    assert apple["replica"].startswith("recommend/main#") and apple["ms"] > 0
    assert apple["time"].endswith("Z") and apple["stream"] is False
    assert (durian["component"], durian["result"]) == ("fallback", ["apple", "banana"])
    assert posted["method"] == "POST" and posted["body"] == {"item_id": "pear", "size": 1}
    assert story["stream"] is True and story["text"] == "peach-0 peach-1 peach-2 "
    assert story["cut"] is False
    assert refused["status"] == 400 and refused["error"]["code"] == "stream_required"
    assert "result" not in refused


@pytest.mark.slow
def test_replay_against_the_same_server_is_all_same(recorded):
    dev, _, _, snapshot = recorded
    result = run_peach("replay", str(snapshot), "--url", dev.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 requests in" in result.stderr and ": 5 same, 0 differ, 0 failed" in result.stderr


@pytest.mark.slow
def test_after_a_notebook_edit_the_changed_answers_differ(recorded, original):
    dev, project, _, snapshot = recorded
    notebook = project / NOTEBOOK
    text = notebook.read_text()
    assert TRENDING in text
    notebook.write_text(text.replace(TRENDING, EDITED))
    deadline = time.monotonic() + 30
    while (
        httpx.get(f"{dev.url}/recommend", params={"item_id": "durian"}).json()["result"][0]
        != "kiwi"
    ):
        assert time.monotonic() < deadline, "the edit was not reloaded"
        time.sleep(0.05)

    result = run_peach("replay", str(snapshot), "--url", dev.url, "--format", "json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["same"], report["differ"], report["failed"]) == (4, 1, 0)
    differ = [r for r in report["requests"] if r["outcome"] == "differ"]
    assert differ[0]["request"] == "GET /recommend?item_id=durian"
    assert '-    "apple",' in differ[0]["diff"] and '+    "kiwi",' in differ[0]["diff"]

    text_report = run_peach("replay", str(snapshot), "--url", dev.url)
    assert text_report.returncode == 1
    assert "✗ differ: GET /recommend?item_id=durian (line 2)" in text_report.stdout
    assert "--- recorded" in text_report.stdout and '+    "kiwi",' in text_report.stdout
    assert ": 4 same, 1 differ, 0 failed" in text_report.stderr

    ignored = run_peach("replay", str(snapshot), "--url", dev.url, "--ignore", "$.result[0]")
    assert ignored.returncode == 0, ignored.stdout
    assert ": 5 same, 0 differ, 0 failed" in ignored.stderr

    against = run_peach("replay", str(snapshot), "--url", original.url, "--against", dev.url)
    assert against.returncode == 1
    assert "✗ differ: GET /recommend?item_id=durian" in against.stdout
    assert f"--- {original.url}" in against.stdout and f"+++ {dev.url}" in against.stdout
    assert ": 4 same, 1 differ, 0 failed" in against.stderr


@pytest.mark.slow
def test_a_body_over_1_mib_is_recorded_as_omitted_and_fails_to_replay(recorded, tmp_path):
    dev, _, record, _ = recorded
    before = len(record.read_text().splitlines())
    httpx.post(f"{dev.url}/recommend", json={"item_id": "x" * (1024 * 1024 + 10)}, timeout=30)
    big = wait_for_lines(record, before + 1)[-1]
    assert big["body"] is None and big["body_omitted"] > 1024 * 1024
    alone = tmp_path / "big.jsonl"
    alone.write_text(json.dumps(big) + "\n")
    result = run_peach("replay", str(alone), "--url", dev.url)
    assert result.returncode == 1
    assert "its body (over 1 MiB) was not recorded" in result.stdout
    assert ": 0 same, 0 differ, 1 failed" in result.stderr


@pytest.mark.slow
def test_bad_input_is_exit_2(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"url": "/a"}\nnot json\n')
    result = run_peach("replay", str(broken))
    assert result.returncode == 2 and f"{broken}:2: not a JSON line" in result.stderr
    path = run_peach("replay", str(broken), "--ignore", "result.x")
    assert path.returncode == 2 and "a JSONPath starts with $" in path.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert run_peach("replay", str(empty)).returncode == 2
