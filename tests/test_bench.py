"""`peach bench` and `GET /_peach/metrics` against a real `peach dev` (SPEC §9).

``tests/projects/bench`` has endpoints with known behaviour: ``alternate`` sleeps 10 ms three
times, then 250 ms, ``pair`` runs on two replicas, ``flaky`` fails every other call (the
fallback answers those), ``ticks`` streams five chunks 10 ms apart, ``stall`` blocks its
replica for 0.5 s on its 10th call, ``hungry`` holds 96 MiB and asks for 48 MiB.
"""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach, start_peach
from conftest import PROJECTS, DevProcess, start_peach_dev

BENCH = PROJECTS / "bench"


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench-record") / "traffic.jsonl"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, recording: Path) -> Iterator[DevProcess]:
    process = start_peach_dev(
        BENCH, tmp_path_factory.mktemp("bench") / "dev.log", "--record", str(recording)
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_peach("bench", *args)


def figures(*args: str) -> dict:
    run = bench(*args, "--format", "json")
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


@pytest.mark.slow
def test_every_request_sent_is_answered_or_failed(dev: DevProcess) -> None:
    result = figures("/pair", "--url", dev.url, "--requests", "200", "-c", "4")
    requests = result["requests"]
    assert requests["sent"] == 200
    assert requests["sent"] == requests["answered"] + requests["failed"]
    assert requests["failed"] == 0
    assert result["status"] == {"200": 200}
    # Two replicas, picked by the gateway: both answer.
    assert len(result["replicas"]) == 2 and sum(result["replicas"].values()) == 200
    assert all(n > 0 for n in result["replicas"].values())
    assert result["components"] == {"main": 200}
    assert result["fallback_share"] == 0.0


@pytest.mark.slow
def test_requests_to_a_server_that_is_not_there_fail_and_exit_3() -> None:
    run = bench("/pair", "--url", "http://127.0.0.1:9", "--requests", "3", "--format", "json")
    assert run.returncode == 3
    result = json.loads(run.stdout)
    assert result["requests"] == {"sent": 3, "answered": 0, "failed": 3}
    assert list(result["failures"]) == ["connection refused by 127.0.0.1:9"]


@pytest.mark.slow
@pytest.mark.serial  # timing figures
def test_percentiles_land_where_the_known_delays_put_them(dev: DevProcess) -> None:
    # One connection: 30 calls of 10 ms and 10 of 250 ms (every fourth). The p50 is among
    # the fast ones, the p90 and p99 among the slow ones; each bound is 5 times or more what
    # it bounds (a busy machine slows a call by tens of milliseconds, not by 100).
    result = figures("/alternate", "--url", dev.url, "--requests", "40", "-c", "1")
    latency = result["latency_ms"]
    assert 10 <= latency["p50"] < 125, latency
    assert 250 <= latency["p90"] <= latency["p99"] < 1250, latency
    assert latency["p50"] <= latency["p90"] <= latency["p95"] <= latency["p99"] <= latency["max"]


@pytest.mark.serial  # timing figures
def test_the_open_loop_keeps_its_schedule_while_the_server_stalls(dev: DevProcess) -> None:
    result = figures("/stall", "--url", dev.url, "--rate", "100", "--duration", "1.5")
    # Every request went out on time although the replica stopped answering for 0.5 s ...
    assert result["requests"]["sent"] == 150
    # The rate is read from the first and last send: 95 allows the last one to go out 78 ms
    # late, and a loop that scheduled each request from the last send (1 ms late each)
    # would send at ~91 a second.
    assert abs(result["rate_achieved"] - 100) <= 5
    # ... and those due during the stall count it from their scheduled start: a closed loop
    # would have waited, sent nothing, and shown one slow request.
    assert result["latency_ms"]["max"] >= 400
    assert result["latency_ms"]["p90"] >= 200, result["latency_ms"]


@pytest.mark.slow
def test_the_fallback_share_counts_who_answered(dev: DevProcess) -> None:
    result = figures("/flaky", "--url", dev.url, "--requests", "40", "-c", "1")
    assert result["components"] == {"main": 20, "fallback": 20}
    assert result["fallback_share"] == 0.5
    assert result["status"] == {"200": 40}


@pytest.mark.slow
def test_stream_figures(dev: DevProcess) -> None:
    result = figures("/ticks", "--stream", "--url", dev.url, "--requests", "10", "-c", "2")
    stream = result["stream"]
    assert stream["streams"] == 10 and stream["cut"] == 0
    assert stream["first_chunk_ms"]["p50"] is not None
    assert stream["first_chunk_ms"]["p50"] < result["latency_ms"]["p50"]
    assert stream["gap_ms_p99"] >= 5  # 10 ms between chunks, give or take
    assert stream["chunks_per_s"] > 0


@pytest.mark.slow
def test_a_replica_past_its_memory_request_is_reported(dev: DevProcess) -> None:
    result = figures("/hungry", "--url", dev.url, "--requests", "20", "-c", "2")
    (use,) = [u for u in result["capacity"] if u["component"] == "hungry/main"]
    assert use["memory_request_bytes"] == 48 * 1024 * 1024
    assert use["peak_rss_bytes"] > 96 * 1024 * 1024
    assert 0 < use["peak_pss_bytes"] <= use["peak_rss_bytes"]  # shared pages counted once
    assert use["over_memory"] is True
    assert use["cpus"] == 1.0
    others = [u for u in result["capacity"] if u["component"] == "pair/main"]
    assert len(others) == 2 and not any(u["over_memory"] for u in others)
    text = bench("/hungry", "--url", dev.url, "--requests", "5", "-c", "1")
    assert text.returncode == 0, text.stderr
    assert "replica hungry/main#1 peaked at" in text.stdout
    assert "past its memory request of 48.0 MiB" in text.stdout


@pytest.mark.slow
def test_compare_shows_each_figure_against_an_earlier_run(dev: DevProcess, tmp_path: Path) -> None:
    earlier = tmp_path / "before.json"
    earlier.write_text(json.dumps(figures("/pair", "--url", dev.url, "--requests", "50")))
    result = figures("/pair", "--url", dev.url, "--requests", "50", "--compare", str(earlier))
    keys = {row["key"] for row in result["compare"]}
    assert {"throughput", "latency_ms.p50", "latency_ms.p99", "requests.failed"} <= keys
    for row in result["compare"]:
        assert row["verdict"] in ("better", "worse", "same")
    text = bench("/pair", "--url", dev.url, "--requests", "20", "--compare", str(earlier))
    assert f"against {earlier}" in text.stdout and "p99 ms" in text.stdout


def test_compare_of_runs_at_another_rate_says_they_differ(dev: DevProcess, tmp_path: Path) -> None:
    """Twice the --rate achieves twice the rate: that is the setting, not an improvement."""
    earlier = tmp_path / "before.json"
    run = ("/pair", "--url", dev.url, "--duration", "0.5", "--warmup", "0")
    earlier.write_text(json.dumps(figures(*run, "--rate", "20")))
    result = figures(*run, "--rate", "40", "--compare", str(earlier))
    assert result["compare_settings"] == [{"setting": "rate", "now": 40.0, "before": 20.0}]
    rate = next(row for row in result["compare"] if row["key"] == "rate_achieved")
    assert rate["verdict"] == "higher" and rate["ratio"] > 1.5
    assert {row["verdict"] for row in result["compare"]} <= {"higher", "lower", "same"}
    text = bench(*run, "--rate", "40", "--compare", str(earlier))
    assert "the runs differ in settings (rate 20 → 40)" in text.stdout
    assert "better" not in text.stdout.split("against", 1)[1], text.stdout


@pytest.mark.slow
def test_compare_refuses_a_file_that_is_not_a_bench_output(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    run = bench("/pair", "--compare", str(other))
    assert run.returncode == 2
    assert "is not a `peach bench --format json` output" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_rate_and_concurrency_together_is_a_usage_error() -> None:
    run = bench("/pair", "--rate", "10", "--concurrency", "2")
    assert run.returncode == 2
    assert "give one" in run.stderr


@pytest.mark.slow
def test_ctrl_c_prints_what_was_measured(dev: DevProcess) -> None:
    before = _requests_served(dev.url, "/pair")
    process = start_peach(  # a real process: the test sends it SIGINT
        "bench", "/pair", "--url", dev.url, "--duration", "60", "-c", "2", "--format", "json"
    )
    try:
        deadline = time.monotonic() + 30
        while _requests_served(dev.url, "/pair") < before + 50:  # the load is running
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "peach bench sent nothing"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=15)
    finally:
        process.kill()
    assert process.returncode == 130, err
    result = json.loads(out)
    assert result["interrupted"] is True
    assert result["requests"]["answered"] > 0
    assert result["duration_s"] < 30
    assert "Traceback" not in err


def _requests_served(url: str, route: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/_peach/metrics", timeout=5).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "ray_serve_num_http_requests_total"
                and sample.labels["route"] == route
            ):
                total += sample.value
    return total


def test_metrics_page_parses_and_counts_what_was_served(dev: DevProcess) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    before = _requests_served(dev.url, "/flaky")
    for _ in range(4):
        httpx.get(f"{dev.url}/flaky", timeout=10)
    httpx.get(f"{dev.url}/nowhere", timeout=10)
    response = httpx.get(f"{dev.url}/_peach/metrics", timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    # Ray Serve's names (ray/serve/_private/request_ingress_metrics.py, replica.py,
    # deployment_state.py), with Ray's `ray_` prefix.
    for name in (
        "ray_serve_num_http_requests",
        "ray_serve_num_http_error_requests",
        "ray_serve_http_request_latency_ms",
        "ray_serve_deployment_request_counter",
        "ray_serve_deployment_replica_healthy",
        "ray_serve_replica_processing_queries",
        "peach_replica_rss_bytes",
        "peach_requests",
    ):
        assert name in families, sorted(families)
    assert _requests_served(dev.url, "/flaky") == before + 4
    answered = {
        (s.labels["component"], s.labels["status_code"]): s.value
        for s in families["peach_requests"].samples
        if s.labels["endpoint"] == "flaky"
    }
    assert answered.get(("main", "200"), 0) > 0 and answered.get(("fallback", "200"), 0) > 0
    not_found = [
        s
        for s in families["ray_serve_num_http_requests"].samples
        if s.labels["status_code"] == "404"
    ]
    assert not_found and all(s.labels["route"] == "" for s in not_found)  # no label per path
    # nor an application: Ray's proxy labels a request no route took `application=""`
    # (python/ray/serve/tests/test_metrics.py, the proxy's 404 metrics)
    assert all(s.labels["application"] == "" for s in not_found)
    healthy = {
        s.labels["replica"]: s.value
        for s in families["ray_serve_deployment_replica_healthy"].samples
    }
    assert len([r for r in healthy if r.startswith("pair/main")]) == 2
    assert all(value == 1.0 for value in healthy.values())
    buckets = [
        s
        for s in families["ray_serve_http_request_latency_ms"].samples
        if s.name.endswith("_bucket") and s.labels["route"] == "/flaky"
    ]
    assert {b.labels["le"] for b in buckets} >= {"1.0", "50.0", "600000.0", "+Inf"}
    rss = [s.value for s in families["peach_replica_rss_bytes"].samples]
    assert rss and all(value > 1024 * 1024 for value in rss)


@pytest.mark.slow
def test_from_sends_the_requests_of_a_record_file(
    dev: DevProcess, recording: Path, tmp_path: Path
) -> None:
    for name in ("Ada", "Grace"):
        assert httpx.get(f"{dev.url}/pair", params={"who": name}, timeout=10).status_code == 200
    assert httpx.get(f"{dev.url}/flaky", timeout=10).status_code == 200
    deadline = time.monotonic() + 10
    while True:  # `peach dev --record` writes in the background
        lines = [
            line
            for line in recording.read_text().splitlines()
            if json.loads(line)["query"].startswith("who=") or json.loads(line)["url"] == "/flaky"
        ]
        if len(lines) >= 3:
            break
        assert time.monotonic() < deadline, "peach dev --record wrote nothing"
        time.sleep(0.05)
    recorded = tmp_path / "three.jsonl"
    recorded.write_text("\n".join(lines[-3:]) + "\n")
    result = figures("--from", str(recorded), "--url", dev.url, "--requests", "30", "-c", "1")
    assert result["requests"]["answered"] == 30
    assert result["status"] == {"200": 30}
    assert result["components"]["main"] >= 10  # /pair answers from main; /flaky from either
    assert result["target"] == f"3 recorded requests from {recorded}"


class _SlowHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET after ``SERVICE_S``, on a keep-alive connection."""

    protocol_version = "HTTP/1.1"
    SERVICE_S = 0.25

    def do_GET(self) -> None:
        time.sleep(self.SERVICE_S)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def slow_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/slow"
    finally:
        server.shutdown()
        server.server_close()


def test_the_open_loop_counts_the_wait_for_a_connection_in_each_latency(slow_server: str) -> None:
    # 10 requests due 100 ms apart on one connection to a server that takes 250 ms each: they
    # queue in the generator, request i is answered about 250 ms * (i + 1) after the first
    # was due, so its latency from its scheduled start is 250 + 150 * i ms (p50 ~ 0.9 s, max
    # ~ 1.6 s). Timed from the moment each left the queue, every one would take ~250 ms and
    # hide the queue (coordinated omission).
    from peach_cli.bench.loadgen import LoadPlan, address_of, encode, run_load
    from peach_cli.bench.summary import Tally
    from peach_cli.client.items import build_request

    request = build_request(slow_server, get=True)
    plan = LoadPlan(
        [encode(request)],
        address_of(slow_server),
        rate=10,
        duration_s=None,
        requests=10,
        max_connections=1,
    )
    tally = Tally()
    run_load(plan, tally)
    result = tally.summary()
    assert result["requests"] == {"sent": 10, "answered": 10, "failed": 0}
    latency = result["latency_ms"]
    assert latency["p50"] >= 600, latency
    assert latency["max"] >= 1000, latency
