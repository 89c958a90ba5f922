"""`def` methods on a replica's call threads, as the trimmed request path must keep them.

Calls run side by side (up to the thread limit), each gets its own answer, a call past
``timeout_s`` is answered ``timeout`` while the replica keeps serving (and its late answer
never reaches anyone), a binding error is a ``bad_request``, a ``sys.exit()`` in a method
restarts its replica, and a drift answer re-runs ``init`` for the calls after it.
"""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest
from projectkit import write_project
from waiting import wait_until

pytestmark = pytest.mark.timeout(180)

CONF = """codops: threads
endpoints:
  echo:
    url: /echo
    components:
      main: {notebook: nb.ipynb, method: echo}
  slow:
    url: /slow
    components:
      main: {notebook: nb.ipynb, method: slow}
  leave:
    url: /leave
    components:
      main: {notebook: nb.ipynb, method: leave}
  drifting:
    url: /drifting
    components:
      main: {notebook: nb.ipynb, init: load, method: drifting}
"""
CELLS = [  # a cell's imports with its function: each component runs its own cells
    "import threading, time\n\n"
    "MEETING = threading.Barrier(12)\n\n"
    "def echo(i: int, meet: bool = False):\n"
    "    if meet:  # returns only once 12 calls are running at the same time\n"
    "        MEETING.wait(timeout=60)\n"
    "    return {'i': i}\n",
    "import time\n\ndef slow(i: int, wait: float = 0.0):\n    time.sleep(wait)\n    return {'i': i}\n",
    "import sys\n\ndef leave():\n    sys.exit(3)\n",
    "LOADS = []\n\n"
    "def load():\n    LOADS.append(1)\n    return len(LOADS)\n\n"
    "def drifting(model, drift: bool = False):\n"
    "    return {'loads': model}, {'drift_detected': drift}\n",
]


def health(url: str) -> dict[str, dict]:
    entries = httpx.get(f"{url}/_peach/health", timeout=5).json()["components"]
    return {entry["component"]: entry["replicas"][0] for entry in entries}


def start(peach_dev, tmp_path, timeout_s: str):
    project = write_project(tmp_path / "threads", CONF, {"nb.ipynb": CELLS})
    process = peach_dev(project, "--timeout-s", timeout_s)
    process.wait_ready()  # every replica healthy: timeout_s bounds the calls, not start-up
    return process


@pytest.fixture
def dev(peach_dev, tmp_path):
    return start(peach_dev, tmp_path, "1")


@pytest.fixture
def patient(peach_dev, tmp_path):
    return start(peach_dev, tmp_path, "90")


def test_calls_run_side_by_side_and_each_gets_its_own_answer(patient):
    count = 12  # the barrier's parties: each call returns once all are running
    with httpx.Client(base_url=patient.url, timeout=90) as client:
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            answers = list(
                pool.map(
                    lambda i: client.get("/echo", params={"i": i, "meet": "true"}), range(count)
                )
            )
    assert [a.status_code for a in answers] == [200] * count, [a.text for a in answers]
    assert [a.json()["result"] for a in answers] == [{"i": i} for i in range(count)]


def test_a_call_past_timeout_s_is_a_timeout_and_its_late_answer_reaches_nobody(dev):
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        before = health(dev.url)["slow/main"]["pid"]
        late = client.get("/slow", params={"i": 1, "wait": 2.5})
        assert late.status_code == 504, late.text
        assert late.json()["error"]["code"] == "timeout"
        # While the abandoned thread still sleeps, and after it returned, every answer is
        # the one asked for (the late answer is dropped, never handed to a later call).
        deadline = time.monotonic() + 3.0
        i = 2
        while time.monotonic() < deadline:
            answer = client.get("/slow", params={"i": i})
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"] == {"i": i}
            i += 1
            time.sleep(0.05)
        assert health(dev.url)["slow/main"]["pid"] == before  # the same process served


def test_a_binding_error_in_a_def_method_is_a_bad_request(dev):
    answer = httpx.get(f"{dev.url}/echo", params={"i": "not a number"}, timeout=10)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "bad_request"


def test_sys_exit_in_a_def_method_restarts_its_replica(dev):
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        first = health(dev.url)["leave/main"]["pid"]
        answer = client.get("/leave")
        assert answer.status_code == 500, answer.text
        assert "exited with code" in answer.json()["error"]["message"]
        wait_until(
            lambda: (
                health(dev.url)["leave/main"]["state"] == "healthy"
                and health(dev.url)["leave/main"]["pid"] != first
            ),
            30,
            "the replica restarted",
        )


def test_a_drift_answer_from_a_def_method_reruns_init_and_later_calls_see_it(dev):
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        assert client.get("/drifting").json()["result"] == {"loads": 1}
        drifted = client.get("/drifting", params={"drift": "true"})
        assert drifted.json()["result"] == {"loads": 1}  # answered before the re-init
        wait_until(
            lambda: client.get("/drifting").json()["result"] == {"loads": 2}, 20, "the re-init"
        )
        assert health(dev.url)["drifting/main"]["state"] == "healthy"
