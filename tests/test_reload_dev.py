"""Hot reload of `peach dev`, end to end: a real server, real HTTP, real file edits.

Every test serves a fresh copy of ``tests/projects/reload_basic`` with reload on in
``--reload restart`` mode (every change starts new replicas; ``tests/test_reload_patch.py``
covers the default, patching), edits it
the way a user saves (Jupyter's temp file + rename + checkpoint), and polls with a deadline
until the server's answer or output shows the reload. Broken saves are made while a thread
hammers an endpoint: not one of its requests may fail.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import DevProcess, drain_stream
from hammer_support import Hammer
from projectkit import write_project
from reload_support import append_file, copy_project, edit_cell, edit_file
from waiting import assert_gone
from waiting import poll as poll_until

DEADLINE_S = 30.0
WATCHING = r"watching .* for changes"
KEPT = "still serving the previous version"

pytestmark = [pytest.mark.timeout(120)]


def poll(check: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    return poll_until(check, what, timeout_s)


def count(dev: DevProcess, pattern: str) -> int:
    return len(re.findall(pattern, dev.output()))


def wait_count(dev: DevProcess, pattern: str, at_least: int) -> None:
    """Poll the server output until ``pattern`` has appeared ``at_least`` times."""
    try:
        poll(lambda: count(dev, pattern) >= at_least, f"{pattern!r} x{at_least}")
    except AssertionError:
        raise AssertionError(f"{pattern!r} x{at_least} not in output:\n{dev.output()}") from None


@dataclass
class Served:
    dev: DevProcess
    project: Path
    client: httpx.Client

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.client.get(path, params=params)

    def result(self, path: str, **params: Any) -> Any:
        response = self.get(path, **params)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    def wait_result(self, path: str, expected: Any) -> None:
        poll(lambda: self.get(path).json().get("result") == expected, f"{path} -> {expected!r}")


@pytest.fixture
def served(tmp_path: Path, peach_dev: Callable[..., DevProcess]) -> Iterator[Served]:
    project = copy_project("reload_basic", tmp_path)
    dev = peach_dev(project, "--reload", "restart", reload=True)
    dev.wait_ready()
    dev.wait_for_output(WATCHING)
    with httpx.Client(base_url=dev.url, timeout=10) as client:
        yield Served(dev, project, client)


@pytest.fixture
def hammer(served: Served) -> Iterator[Callable[..., Hammer]]:
    """``hammer(path, expected)`` starts a ``Hammer`` on ``path`` whose answers'
    ``result`` must pass ``expected``; each is stopped after the test."""
    running: list[Hammer] = []

    def start(path: str, expected: Callable[[Any], bool]) -> Hammer:
        loop = Hammer(served.dev.url, {path: lambda r: expected(r.json()["result"])}, 10)
        running.append(loop.start())
        return loop

    try:
        yield start
    finally:
        for loop in running:
            loop.stop()


# --- tests ------------------------------------------------------------------------------


def test_editing_a_cell_serves_the_new_code_and_keeps_other_state(served: Served) -> None:
    token = served.result("/token")
    loud_replica = served.get("/loud").headers["x-peach-replica"]
    assert served.result("/hello") == "v1 hello world"

    edit_cell(served.project, '"v1"', '"v2"')
    served.wait_result("/hello", "v2 hello world")

    assert served.result("/token") == token  # same replica, same init state
    assert served.get("/loud").headers["x-peach-replica"] == loud_replica
    served.dev.wait_for_output(
        r"restarted hello/main \(code changed\) in \d+\.\d\d s \(init \d+\.\d\d s\); "
        r"4 components unchanged"
    )
    # A Jupyter save is one reload: a later save of an unused file is the next thing seen.
    (served.project / "scratch.py").write_text("UNUSED = 1\n")
    served.dev.wait_for_output(r"scratch\.py changed: nothing to reload")
    assert count(served.dev, r"restarted hello/main") == 1


@pytest.mark.parametrize(
    ("broken", "edit"),
    [
        ("syntax error", lambda p: edit_cell(p, "def hello(", "def hello(:")),
        ("missing method", lambda p: edit_cell(p, "def hello(", "def hallo(")),
        ("conf typo", lambda p: edit_file(p, "peach.yaml", "method: hello}", "methd: hello}")),
    ],
)
def test_a_broken_save_keeps_the_old_version_serving_without_a_failed_request(
    served: Served, hammer: Callable[..., Hammer], broken: str, edit: Callable[[Path], None]
) -> None:
    loop = hammer("/hello", lambda result: result in ("v1 hello world", "v3 hello world"))
    began = time.monotonic()
    edit(served.project)
    wait_count(served.dev, KEPT, 1)
    assert served.result("/hello") == "v1 hello world"
    output = served.dev.output()
    assert re.search(r"(peach\.yaml|notebooks/Endpoints\.ipynb):\S+: error PC\d+ ", output), output
    assert "Traceback" not in output

    # The next good save recovers.
    copy = copy_project("reload_basic", served.project.parent / "pristine")
    (served.project / "peach.yaml").write_text((copy / "peach.yaml").read_text())
    notebook = served.project / "notebooks" / "Endpoints.ipynb"
    notebook.write_text((copy / "notebooks" / "Endpoints.ipynb").read_text())
    edit_cell(served.project, '"v1"', '"v3"')
    served.wait_result("/hello", "v3 hello world")
    loop.finish(began, time.monotonic())  # through the broken save and the recovery


def test_a_stream_started_before_the_edit_finishes_on_the_old_code(
    served: Served, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with served.client.stream("GET", "/story", params={"stream": "true", "gate": str(gate)}) as old:
        chunks = old.iter_raw()
        assert next(chunks) == b"s1 begins\n"

        edit_cell(served.project, 'STORY = "s1"', 'STORY = "s2"')

        def new_story() -> bool:
            response = served.get("/story", stream="true")
            return response.text == "s2 begins\ns2 ends\n"

        poll(new_story, "the new stream code")
        gate.write_text("open")
        assert b"".join(chunks) == b"s1 ends\n"


def test_ctrl_c_after_a_reload_ends_a_stream_still_on_the_old_replica(
    served: Served, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"  # never written: the old stream runs until peach dev stops
    with served.client.stream("GET", "/story", params={"stream": "true", "gate": str(gate)}) as old:
        chunks = old.iter_raw()
        assert next(chunks) == b"s1 begins\n"
        edit_cell(served.project, 'STORY = "s1"', 'STORY = "s2"')
        served.dev.wait_for_output(r"restarted story/main \(code changed\)")

        os.kill(served.dev.process.pid, signal.SIGINT)
        # the server stops: the stream is cut (it did not finish), it does not hang
        assert drain_stream(chunks) == (b"", False)
    assert served.dev.process.wait(timeout=DEADLINE_S) == 0
    output = served.dev.output()
    assert "story/main#1 stopped" in output
    assert "Traceback" not in output and "never retrieved" not in output


def test_a_replaced_replica_that_dies_while_draining_is_not_restarted(
    served: Served, tmp_path: Path
) -> None:
    health = served.get("/_peach/health").json()
    [story] = [c for c in health["components"] if c["component"] == "story/main"]
    pid = story["replicas"][0]["pid"]
    gate = tmp_path / "gate"  # never written: the old stream runs until its replica dies
    with served.client.stream("GET", "/story", params={"stream": "true", "gate": str(gate)}) as old:
        chunks = old.iter_raw()
        assert next(chunks) == b"s1 begins\n"
        edit_cell(served.project, 'STORY = "s1"', 'STORY = "s2"')
        served.dev.wait_for_output(r"restarted story/main \(code changed\)")
        served.dev.wait_for_output(r"story/main#1 draining")  # at once, while it streams
        os.kill(pid, signal.SIGKILL)
        assert drain_stream(chunks) == (b"", False)  # its replica died: the stream is cut
    served.dev.wait_for_output(r"story/main#1 stopped")
    assert "story/main#1 restarting" not in served.dev.output()
    assert served.get("/story", stream="true").text == "s2 begins\ns2 ends\n"


def test_a_stream_on_another_endpoint_does_not_hold_the_replaced_replicas(
    served: Served, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with served.client.stream("GET", "/story", params={"stream": "true", "gate": str(gate)}) as old:
        chunks = old.iter_raw()
        assert next(chunks) == b"s1 begins\n"

        edit_cell(served.project, '"v1"', '"v2"')
        served.wait_result("/hello", "v2 hello world")
        # The old hello replica stops now, not when the unrelated stream ends.
        served.dev.wait_for_output(r"hello/main#1 stopped")
        gate.write_text("open")
        assert b"".join(chunks) == b"s1 ends\n"


def test_an_init_that_raises_after_an_edit_leaves_the_old_version_serving(
    served: Served, hammer: Callable[..., Hammer]
) -> None:
    loop = hammer("/guarded", lambda result: result in ("ready", "steady"))
    began = time.monotonic()
    edit_cell(served.project, 'return "ready"', 'raise RuntimeError("index missing")')
    served.dev.wait_for_output(r"guarded/main: the new version failed to start", DEADLINE_S)
    output = served.dev.output()
    assert "RuntimeError: index missing" in output
    assert "on the platform this replica would stay unhealthy" in output
    assert served.result("/guarded") == "ready"

    edit_cell(served.project, 'raise RuntimeError("index missing")', 'return "steady"')
    served.wait_result("/guarded", "steady")
    loop.finish(began, time.monotonic())  # through the failed init and the recovery


def test_adding_an_endpoint_in_the_conf_serves_it(served: Served) -> None:
    assert served.get("/extra").status_code == 404
    token = served.result("/token")
    append_file(
        served.project,
        "peach.yaml",
        "  extra:\n    url: /extra\n    components:\n"
        "      main: {notebook: notebooks/Endpoints.ipynb, method: hello, args: {name: extra}}\n",
    )
    served.wait_result("/extra", "v1 hello extra")
    served.dev.wait_for_output(r"started extra/main in ")
    assert served.result("/token") == token

    # Removing it again: the url is gone, nothing else moved.
    copy = copy_project("reload_basic", served.project.parent / "pristine")
    (served.project / "peach.yaml").write_text((copy / "peach.yaml").read_text())
    poll(lambda: served.get("/extra").status_code == 404, "/extra to be gone")
    served.dev.wait_for_output(r"stopped extra/main in ")
    assert served.result("/token") == token


def test_a_replicas_change_in_the_conf_restarts_only_that_component(served: Served) -> None:
    token = served.result("/token")
    hello_replica = served.get("/hello").headers["x-peach-replica"]
    edit_file(served.project, "peach.yaml", "method: token}", "method: token, replicas: 2}")
    served.dev.wait_for_output(r"restarted token/main \(replicas changed\) in ")

    def two_new_tokens() -> set[str]:
        tokens = {served.result("/token") for _ in range(8)}
        return tokens if len(tokens) == 2 else set()

    tokens = poll(two_new_tokens, "two replicas of /token, each with its own init")
    assert token not in tokens  # new replicas, new init
    assert served.get("/hello").headers["x-peach-replica"] == hello_replica


DECORATED_CELL = (
    "import uuid\n\nfrom peach_cli import endpoint\n\n\ndef load():\n"
    "    return uuid.uuid4().hex\n\n\n"
    '@endpoint("/similar", init_fn=load)\ndef similar(init_state):\n'
    '    return ["d1", init_state]\n'
)


def test_decorator_endpoints_are_added_and_reloaded(served: Served) -> None:
    token = served.result("/token")
    write_project(served.project, None, {"notebooks/Decorated.ipynb": [DECORATED_CELL]})
    append_file(
        served.project, "peach.yaml", "decorator_endpoints:\n  - notebooks/Decorated.ipynb\n"
    )
    first = poll(lambda: served.get("/similar").json().get("result"), "/similar to be served")
    assert first[0] == "d1"

    edit_cell(served.project, '"d1"', '"d2"', notebook="notebooks/Decorated.ipynb")

    def new_code() -> list | None:
        result = served.result("/similar")
        return result if result[0] == "d2" else None

    second = poll(new_code, "the new code of /similar")
    assert second[1] != first[1]  # a new replica ran init_fn again
    served.dev.wait_for_output(r"restarted similar/main \(code changed\) in ")
    assert served.result("/token") == token


def test_a_url_change_re_routes_without_restarting(served: Served) -> None:
    replica = served.get("/hello").headers["x-peach-replica"]
    edit_file(served.project, "peach.yaml", "url: /hello", "url: /hi")
    served.wait_result("/hi", "v1 hello world")
    assert served.get("/hello").status_code == 404
    assert served.get("/hi").headers["x-peach-replica"] == replica
    served.dev.wait_for_output(r"hello moved from /hello to /hi in ")


def test_a_helper_module_edit_reloads_only_the_components_importing_it(served: Served) -> None:
    token = served.result("/token")
    hello_replica = served.get("/hello").headers["x-peach-replica"]
    assert served.result("/loud") == "HI!"

    edit_file(served.project, "helpers.py", '+ "!"', '+ "!!"')
    served.wait_result("/loud", "HI!!")

    served.dev.wait_for_output(r"restarted loud/main \(helpers\.py changed\) in ")
    assert count(served.dev, r"restarted ") == 1
    assert served.result("/token") == token
    assert served.get("/hello").headers["x-peach-replica"] == hello_replica


def since_boot() -> float:
    """Seconds since the machine started: the clock of ``started_at`` (a process's start
    time since the epoch is only as exact as the boot time's whole second)."""
    return float(Path("/proc/uptime").read_text().split()[0])


def started_at(pid: int) -> float:
    """When process ``pid`` started, in seconds since boot, or +inf once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("inf")
    return int(stat.rpartition(")")[2].split()[19]) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> set[int]:
    """The direct child processes of ``pid``, and those of its keeper: peach's keeper
    starts its workers (Linux)."""
    found = direct_children(pid)
    for child in list(found):
        try:
            if b"peach_cli.runtime.keeper" in Path(f"/proc/{child}/cmdline").read_bytes():
                found |= direct_children(child)
        except OSError:
            continue
    return found


def runs(pid: int, module: bytes) -> bool:
    """Whether process ``pid`` runs ``module`` (its command line names it)."""
    try:
        return module in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def direct_children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_no_replica_or_spare_process_outlives_peach_dev(served: Served, how: str) -> None:
    """With reload on, a spare replica process waits for the next reload; it goes with
    the server, whether the server stops or is killed."""
    pid = served.dev.process.pid

    def idle_spares() -> set[int]:
        # A spare is a spawned replica worker that serves nothing yet: not the keeper, not a
        # warm template (with those counted, the save could come before any spare existed).
        health = served.dev.wait_ready()
        replicas = {r["pid"] for c in health["components"] for r in c["replicas"]}
        return {p for p in children(pid) - replicas if runs(p, b"peach_cli.runtime.replica_worker")}

    first = poll(idle_spares, "a spare replica process")
    saved = since_boot()
    edit_cell(served.project, '"v1"', '"v2"')
    served.wait_result("/hello", "v2 hello world")
    # The reload took a spare (a process already waiting before the save now serves /hello)
    # and a new one replaces it. Judged by start time, not against ``first``: the spares of
    # the first start may still be coming up when ``first`` is read (a busy machine).
    health = served.get("/_peach/health").json()
    hello = [c for c in health["components"] if c["component"] == "hello/main"]
    assert all(started_at(r["pid"]) < saved for r in hello[0]["replicas"]), health
    second = poll(
        lambda: {p for p in idle_spares() if started_at(p) > saved}, "a new spare after the reload"
    )
    everything = first | second | children(pid)
    if how == "ctrl-c":
        assert served.dev.stop() == 0
    else:
        os.kill(pid, signal.SIGKILL)
        served.dev.process.wait(timeout=DEADLINE_S)
    poll(lambda: not any(alive(p) for p in everything), "every child process to exit")


def test_a_save_while_an_init_never_returns_supersedes_it_and_is_served(
    served: Served, hammer: Callable[..., Hammer], tmp_path: Path
) -> None:
    """An edit whose init never returns, then a fixed save: the hung reload is dropped, its
    replica stopped, the fixed version served; the old one serves until then."""
    pid_file = tmp_path / "hung.pid"
    hang = (
        f"import os, pathlib, time\n\n    pathlib.Path({str(pid_file)!r}).write_text("
        "str(os.getpid()))\n    while True:\n        time.sleep(1)"
    )
    loop = hammer("/guarded", lambda result: result in ("ready", "steady"))
    began = time.monotonic()
    edit_cell(served.project, 'return "ready"', hang)
    hung = int(poll(lambda: pid_file.exists() and pid_file.read_text(), "the hung init"))
    assert served.result("/guarded") == "ready"  # the old version serves meanwhile

    edit_cell(served.project, hang, 'return "steady"')
    served.dev.wait_for_output(r"saved again while reloading: dropping that reload", DEADLINE_S)
    served.wait_result("/guarded", "steady")
    loop.finish(began, time.monotonic())
    assert_gone(hung)  # the replica whose init never returned is stopped
    assert "Traceback" not in served.dev.output()
