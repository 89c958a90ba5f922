"""`peach bench` against a deployed app: the session's two-node Ray cluster serving
``tests/projects/semantics`` (``ray_semantics`` in conftest.py), whose ``/token`` runs on
two replicas and ``/stream`` streams."""

from __future__ import annotations

import json

import pytest
from cli_support import run_peach

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]  # may start the cluster


def bench(*args: str) -> dict:
    run = run_peach("bench", *args, "--format", "json")
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


def test_bench_counts_a_deployed_apps_answers_by_component_and_replica(ray_semantics: str) -> None:
    result = bench("/token", "--url", ray_semantics, "--requests", "60", "-c", "4")
    assert result["requests"] == {"sent": 60, "answered": 60, "failed": 0}
    assert result["status"] == {"200": 60}
    assert result["components"] == {"main": 60}
    assert len(result["replicas"]) == 2  # Serve's router spreads the calls over both
    assert result["latency_ms"]["p50"] > 0


def test_bench_reads_a_deployed_apps_streams(ray_semantics: str) -> None:
    result = bench("/stream", "--stream", "--url", ray_semantics, "--requests", "6", "-c", "2")
    stream = result["stream"]
    assert stream["streams"] == 6 and stream["cut"] == 0
    assert stream["first_chunk_ms"]["p50"] is not None
