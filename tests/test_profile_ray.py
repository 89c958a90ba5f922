"""`peach profile --url` on a deployed app (SPEC §12): ``tests/projects/semantics`` on its
Ray cluster (``ray_semantics_cluster`` in conftest.py, whose head enables the dashboard's CPU
profiling), its replicas profiled by py-spy through the dashboard while the load runs.

``/slow`` runs ``slow`` (notebooks/Endpoints.ipynb, cell 6), which sleeps at line 23 of its
cell: in wall-clock time that line is where its calls spend their time.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from cli_support import REPO, run_peach

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]  # may start the cluster

SEMANTICS = REPO / "tests" / "projects" / "semantics"
SLEEP = {"position": "notebooks/Endpoints.ipynb, cell 6, line 23", "function": "slow"}


def profile(*args: str, cwd: Path = SEMANTICS) -> tuple[int, str, str]:
    done = run_peach("profile", *args, cwd=cwd)
    return done.returncode, done.stdout, done.stderr


def test_a_deployed_endpoint_is_profiled_as_notebook_positions(
    ray_semantics_cluster: tuple[Any, str], tmp_path: Path
) -> None:
    head, url = ray_semantics_cluster
    written = tmp_path / "slow.json"
    code, out, err = profile(
        "/slow", "seconds=0.05", "--url", url, "--address", head.dashboard_url,
        "-c", "2", "-d", "3", "--format", "json", "-o", str(written),
    )  # fmt: skip
    assert code == 0, out + err
    result = json.loads(out)
    assert result["samples"] > 0, out
    top = {key: value for key, value in result["self"][0].items() if key != "share"}
    assert top == SLEEP, result["self"][:8]
    assert any(line["position"] == "peach" for line in result["total"])
    speedscope = json.loads(written.read_text())
    assert speedscope["profiles"] and speedscope["profiles"][0]["type"] == "sampled"
    names = [frame["name"] for frame in speedscope["shared"]["frames"]]
    assert f"slow ({SLEEP['position']})" in names


def test_init_is_not_offered_on_a_deployed_app(ray_semantics_cluster: tuple[Any, str]) -> None:
    head, url = ray_semantics_cluster
    code, out, err = profile("/token", "--url", url, "--address", head.dashboard_url, "--init")
    assert code == 2 and out == "", out + err
    assert "--init is not offered on a deployed app" in err and "Traceback" not in err


class _NotADashboard(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"nothing here")

    def log_message(self, *args: object) -> None:
        pass


def test_without_a_dashboard_a_deployed_app_is_refused_in_one_line(
    ray_semantics_cluster: tuple[Any, str],
) -> None:
    _, url = ray_semantics_cluster
    server = HTTPServer(("127.0.0.1", 0), _NotADashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, out, err = profile(
            "/slow", "--url", url, "--address", f"http://127.0.0.1:{server.server_port}"
        )
    finally:
        server.shutdown()
    assert code == 2 and out == "", out + err
    assert "no Ray dashboard to profile its replicas with" in err, err
    assert "Traceback" not in err
