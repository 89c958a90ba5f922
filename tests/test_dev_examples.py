"""The examples answer the requests their READMEs show, served by `peach dev`."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from projectkit import copy_assistant

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["recommender", "assistant", "decorated"])
def test_readme_shows_peach_dev_and_curl(name):
    readme = (EXAMPLES / name / "README.md").read_text()
    assert f"peach dev examples/{name}" in readme
    assert "curl " in readme


def test_recommender(peach_dev):
    dev = peach_dev(EXAMPLES / "recommender")
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        response = client.get("/recommend", params={"item_id": "b07", "size": "3"})
        assert response.status_code == 200, response.text
        titles = [item["title"] for item in response.json()["result"]]
        assert titles == [
            "Dracula",
            "The Invisible Man",
            "The Strange Case of Dr Jekyll and Mr Hyde",
        ]
        assert response.headers["x-peach-component"] == "main"
        unknown = client.get("/recommend", params={"item_id": "nope"})
        assert unknown.headers["x-peach-component"] == "fallback"
        assert len(unknown.json()["result"]) == 5  # args size: 5
        assert unknown.json()["result"][0]["title"] == "Pride and Prejudice"
        # The A/B test of its README: alice is in main, frank in diverse (80/20 by user).
        for user, arm in [("alice", "main"), ("frank", "diverse")]:
            answer = client.get("/recommend", params={"item_id": "b01", "size": 3, "user_id": user})
            assert answer.headers["x-peach-component"] == arm
            authors = [item["author"] for item in answer.json()["result"]]
            if arm == "main":
                assert authors == ["Jane Austen"] * 3
            else:  # never the author asked about, one book per author
                assert authors == ["Leo Tolstoy", "George Eliot", "Charlotte Brontë"]
        body = client.post("/recommend", json={"item_id": "b01", "user_id": "frank"})
        assert body.headers["x-peach-component"] == "diverse"


def test_assistant_streams_words_and_reloads_on_a_new_version(peach_dev, tmp_path):
    project = copy_assistant(tmp_path / "assistant")
    dev = peach_dev(project)
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        params = {"stream": "true", "query": "where do peaches come from", "delay": "0"}
        with client.stream("GET", "/assistant", params=params) as response:
            assert response.status_code == 200
            chunks = list(response.iter_raw())
        text = b"".join(chunks).decode()
        assert "Zhejiang" in text and "(knowledge version 1)" in text
        assert len(chunks) > 5  # word by word, not one block
        refused = client.get("/assistant", params={"query": "peach"})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "stream_required"

        facts = client.get("/facts", params={"query": "stone fruit"}).json()["result"]
        assert len(facts) == 3
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "model_version.txt").write_text("2\n")  # what retrain does
        client.get("/facts", params={"query": "drift"})  # signals drift, answered first
        dev.wait_for_output(r"facts/main#1 reloading: drift detected")
        dev.wait_for_output(r"facts/main#1 healthy \(pid \d+\): re-init done")
        client.get("/facts", params={"query": "drift"})  # the fresh state: no drift now
        dev.wait_for_output(r"(GET /facts 200.*\n[\s\S]*){3}")
        assert dev.output().count("drift detected") == 1


@pytest.mark.slow
def test_decorated(peach_dev):
    dev = peach_dev(EXAMPLES / "decorated")
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        response = client.get("/related", params={"word": "peach"})
        assert response.json() == {"result": ["apricot", "nectarine", "plum"], "status": "ok"}
        streamed = client.get("/spell", params={"stream": "true", "word": "abc", "delay": "0"})
        assert streamed.content == b"a\nb\nc\n"


@pytest.mark.slow
def test_assistant_whole_drift_loop_with_tasks(peach_dev, tmp_path):
    """`peach dev --tasks`: retrain writes a new version, /facts detects the drift, its
    replica reloads; an event from /retrain runs the task again — no manual step."""
    project = copy_assistant(tmp_path / "assistant")
    dev = peach_dev(project, "--tasks", "--task-interval", "10")
    dev.wait_for_output(r'task retrain run retrain#1 ok in [\d.]+ s: returned "2"')
    assert "retrain | retraining (scheduled): knowledge version 1 -> 2" in dev.output()
    dev.wait_ready()
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        client.get("/facts", params={"query": "drift"}).raise_for_status()
        dev.wait_for_output(r"facts/main#1 reloading: drift detected")
        dev.wait_for_output(r"facts/main#1 healthy \(pid \d+\): re-init done")
        run_id = client.get("/retrain", params={"reason": "new facts"}).json()["result"]["run_id"]
        version = dev.wait_for_output(
            rf'task retrain triggered run {run_id} ok in [\d.]+ s: returned "(\d+)"'
        ).group(1)
        assert (
            f"retrain | retraining (new facts): knowledge version {int(version) - 1} -> {version}"
            in dev.output()
        )
        client.get("/facts", params={"query": "drift"}).raise_for_status()
        dev.wait_for_output(r"(facts/main#1 reloading: drift detected[\s\S]*){2}")
