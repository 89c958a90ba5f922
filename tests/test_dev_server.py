"""`peach dev` itself: the command, replica processes, crashes, shutdown, reload plumbing.

What only the simulator does (or does its own way) is tested here; the serving rules shared
with Ray Serve are in test_gateway_semantics.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach
from conftest import PROJECTS, DevProcess, drain_stream, start_peach_dev
from projectkit import write_project
from waiting import wait_until

from peach_cli.checks.build import build_plan


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent is not running anymore
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


SMALL_CONF = """\
codops: small
timeout_s: 30
endpoints:
  hello:
    url: /hello
    components:
      main: {notebook: nb.ipynb, init: init_state, method: hello, memory: 1Mi}
  slow:
    url: /slow
    components:
      main: {notebook: nb.ipynb, method: slow}
  stream:
    url: /stream
    components:
      main: {notebook: nb.ipynb, method: words}
  held:
    url: /held
    components:
      main: {notebook: nb.ipynb, method: held}
"""
SMALL_CELLS = [
    'import os\n\ndef init_state():\n    return {"pid": os.getpid()}\n\n'
    'def hello(model, name: str = "world"):\n    print(f"hello called with {name}")\n'
    '    return {"hello": name, "pid": model["pid"]}\n',
    "import asyncio\n\nasync def slow(seconds: float = 5):\n    await asyncio.sleep(seconds)\n"
    '    return "done"\n',
    "import asyncio, pathlib\n\nasync def words(marker: str = ''):\n    try:\n"
    '        yield "first\\n"\n        await asyncio.sleep(60)\n        yield "never\\n"\n'
    "    finally:\n        if marker:\n            pathlib.Path(marker).write_text('closed')\n",
    "import asyncio, os, pathlib\n\nasync def held(gate: str, marker: str):\n    try:\n"
    "        for _ in range(3000):\n            if os.path.exists(gate):\n                break\n"
    '            await asyncio.sleep(0.01)\n        yield "released\\n"\n'
    "    finally:\n        pathlib.Path(marker).write_text('closed')\n",
]


@pytest.fixture
def small_project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "small", SMALL_CONF, {"nb.ipynb": SMALL_CELLS})


@pytest.fixture(scope="module")
def small_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`peach dev` of the small project for the tests that neither stop nor change it (each
    sees only the output written since it began: conftest marks it)."""
    folder = tmp_path_factory.mktemp("small-dev")
    project = write_project(folder / "small", SMALL_CONF, {"nb.ipynb": SMALL_CELLS})
    dev = start_peach_dev(project, folder / "peach-dev.log")
    try:
        yield dev
    finally:
        dev.stop()


# A replica that dies on request and one whose re-init after drift fails: the tests that do
# that get their own server, so the session's semantics server is never left changed.
FRAGILE_CONF = """\
codops: fragile
endpoints:
  crash:
    url: /crash
    components:
      main: {notebook: nb.ipynb, init: init_token, method: crash}
  drift_reinit_fails:
    url: /drift/reinit-fails
    components:
      main: {notebook: nb.ipynb, init: init_once_only, method: drifty}
"""
FRAGILE_CELLS = [
    "import os, uuid\n\ndef init_token():\n"
    '    return {"token": uuid.uuid4().hex, "pid": os.getpid()}\n\n'
    "def crash(model, die: bool = False):\n    if die:\n        os._exit(17)\n"
    '    return {"token": model["token"], "pid": model["pid"]}\n',
    "import uuid\n\n_init_calls = 0\n\ndef init_once_only():\n    global _init_calls\n"
    "    _init_calls += 1\n    if _init_calls > 1:\n"
    '        raise RuntimeError("re-init failed on purpose")\n'
    '    return {"token": uuid.uuid4().hex}\n\n'
    "def drifty(model, signal: bool = False):\n"
    '    return {"token": model["token"]}, {"drift_detected": signal}\n',
]


@pytest.fixture
def fragile(peach_dev, tmp_path: Path) -> DevProcess:
    dev = peach_dev(write_project(tmp_path / "fragile", FRAGILE_CONF, {"nb.ipynb": FRAGILE_CELLS}))
    dev.wait_ready()
    return dev


# -- crashes and broken replicas ----------------------------------------------------------


def test_crashed_replica_fails_its_request_and_restarts(fragile: DevProcess):
    with httpx.Client(base_url=fragile.url, timeout=20) as client:
        before = client.get("/crash").json()["result"]
        response = client.get("/crash", params={"die": "true"})
        assert response.status_code == 500  # a clear error, not a hang until the timeout
        message = response.json()["error"]["message"]
        assert "exited with code 17" in message and "restarting" in message
        deadline = time.monotonic() + 30
        while True:
            response = client.get("/crash")
            if response.status_code == 200:
                break
            assert time.monotonic() < deadline, response.text
        after = response.json()["result"]
    assert after["pid"] != before["pid"] and after["token"] != before["token"]  # init ran again
    assert not alive(before["pid"])
    fragile.wait_for_output(r"crash/main#\d+ restarting: the replica process exited with code 17")
    fragile.wait_for_output(r"crash/main#\d+ healthy \(pid \d+\): restarted")


def test_failed_init_is_503_with_the_error_and_other_endpoints_answer(peach_dev):
    dev = peach_dev(PROJECTS / "broken")
    dev.wait_ready()
    with httpx.Client(base_url=dev.url, timeout=20) as client:
        response = client.get("/broken")
        assert response.status_code == 503
        body = response.json()
        assert body["error"]["code"] == "unavailable"
        assert "model file missing: /models/never.bin" in body["error"]["message"]
        assert response.headers["x-peach-component"] == "main"  # no replica answered
        assert client.get("/ok").json() == {"result": "pong", "status": "ok"}
    output = dev.output()
    assert "unhealthy" in output and "raise RuntimeError" in output  # the user's traceback


GATED_CONF = """\
codops: gated
timeout_s: 0.5
endpoints:
  words:
    url: /words
    components:
      main: {notebook: nb.ipynb, init: init_state, method: words}
"""
GATED_CELLS = [
    "import pathlib, time\n\ndef init_state():\n    deadline = time.monotonic() + 60\n"
    "    while not pathlib.Path('gate').exists() and time.monotonic() < deadline:\n"
    "        time.sleep(0.01)\n    return {}\n\n"
    'async def words(model):\n    yield "w\\n"\n',
]


@pytest.mark.slow
def test_a_plain_call_to_a_generator_still_starting_is_bounded_by_timeout_s(peach_dev, tmp_path):
    """A request without ``stream`` is a call like any other, whatever the method: while
    the replica's init runs, it waits at most ``timeout_s`` (SPEC "Starting replicas")."""
    project = write_project(tmp_path / "gated", GATED_CONF, {"nb.ipynb": GATED_CELLS})
    dev = peach_dev(project)
    try:
        began = time.monotonic()
        response = httpx.get(f"{dev.url}/words", timeout=10)
        assert response.status_code == 504, response.text
        assert response.json()["error"]["code"] == "timeout"
        assert time.monotonic() - began < 5
    finally:
        (project / "gate").write_text("open")
    dev.wait_ready()
    deadline = time.monotonic() + 30
    while True:  # timeout_s is 0.5 s: on a busy machine even this answer can take longer
        response = httpx.get(f"{dev.url}/words", timeout=10)
        if response.status_code != 504 or time.monotonic() > deadline:
            break
    assert response.status_code == 400 and response.json()["error"]["code"] == "stream_required"
    assert response.headers["x-peach-replica"] == "words/main#1"


@pytest.mark.parametrize(
    ("path", "params", "code"),
    [
        ("/stream", {}, "stream_required"),  # a generator called without `stream`
        ("/sync-stream", {"stream": "true", "count": "x"}, "bad_request"),  # refused to bind
    ],
)
def test_errors_on_the_stream_path_name_the_replica(base_url, path, params, code):
    with httpx.Client(base_url=base_url, timeout=20) as client:
        response = client.get(path, params=params)
    assert response.status_code == 400 and response.json()["error"]["code"] == code
    assert response.headers["x-peach-component"] == "main"
    endpoint = path.strip("/").replace("-", "_")
    assert re.fullmatch(rf"{endpoint}/main#\d+", response.headers["x-peach-replica"])


def test_a_failed_reinit_after_drift_is_reported(fragile: DevProcess):
    with httpx.Client(base_url=fragile.url, timeout=20) as client:
        response = client.get("/drift/reinit-fails", params={"signal": "true"})
        assert response.status_code == 200
    fragile.wait_for_output(
        r"drift_reinit_fails/main#\d+ healthy \(pid \d+\): re-init failed, kept the previous "
        r"state \(re-init after drift failed, keeping the previous state: init_once_only\(\) "
        r"raised RuntimeError: re-init failed on purpose\)"
    )


# -- the command --------------------------------------------------------------------------


def test_invalid_project_prints_diagnostics_and_exits_1(peach_dev, tmp_path):
    project = write_project(tmp_path / "bad", "codops: bad\nendpoints:\n  x: {url: nope}\n")
    dev = peach_dev(project, wait_url=False)
    assert dev.process.wait(timeout=30) == 1
    output = dev.output()
    assert "peach.yaml:" in output and "error" in output
    assert "Traceback" not in output and "serving on" not in output


def test_port_in_use_is_a_clear_error(tmp_path, small_project):

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_peach("dev", str(small_project), "--port", str(port), "--no-reload")
    assert result.returncode == 1
    # Checked before anything starts: one error line (and its hint), nothing to stop.
    assert result.stdout == ""
    error, hint = result.stderr.splitlines()
    assert error.startswith(f"error: peach dev cannot start: port {port} is in use on 127.0.0.1")
    assert hint.startswith("hint: ") and "--port" in hint


def test_non_loopback_host_is_warned_about(peach_dev, small_project):
    dev = peach_dev(small_project, "--host", "0.0.0.0")
    dev.wait_for_output(r"warning: bound to 0\.0\.0\.0")


def test_request_log_lines_and_replica_output(small_dev):
    dev = small_dev
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", dev.url)
    assert dev.output().splitlines()[0] == f"peach dev serving on {dev.url}"
    assert httpx.get(f"{dev.url}/hello?name=log", timeout=20).status_code == 200
    dev.wait_for_output(r"GET /hello 200 main hello/main#1 [\d.]+ m?s")
    dev.wait_for_output(r"hello/main#1 \| hello called with log")  # the user's print


def test_memory_over_the_request_is_warned_about(peach_dev, small_project):
    dev = peach_dev(small_project)  # hello/main asks for 1Mi; a Python process uses more
    dev.wait_for_output(
        r"warning: hello/main#1 uses [\d.]+ MiB, over its memory request of 1\.0 MiB", 30
    )


def test_timeout_option_overrides_the_conf(peach_dev, small_project):
    dev = peach_dev(small_project, "--timeout-s", "0.3")
    dev.wait_ready()
    response = httpx.get(f"{dev.url}/slow", timeout=20)  # a 5 s call, the conf's bound 30 s
    assert response.status_code == 504, response.text  # not 200 "done": cut at 0.3 s
    assert "timeout_s = 0.3 s" in response.json()["error"]["message"]
    assert response.headers["x-peach-component"] == "main"
    assert response.headers["x-peach-replica"] == "slow/main#1"  # the replica cut off


def test_routes_and_health(small_dev):
    dev = small_dev
    health = dev.wait_ready()
    assert health["status"] == "ok"
    assert {c["component"] for c in health["components"]} == {
        "hello/main",
        "slow/main",
        "stream/main",
        "held/main",
    }
    routes = httpx.get(f"{dev.url}/_peach/routes", timeout=20).json()
    assert routes["codops"] == "small"
    by_url = {e["url"]: e for e in routes["endpoints"]}
    assert by_url["/hello"] == {
        "name": "hello",
        "url": "/hello",
        "components": ["main"],
        "streams": False,
    }
    assert by_url["/stream"]["streams"] is True


def test_stream_headers_come_before_the_first_chunk(small_dev, tmp_path):
    dev = small_dev
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    params = {"stream": "1", "gate": str(gate), "marker": str(marker)}
    with httpx.Client(base_url=dev.url, timeout=20) as client:
        with client.stream("GET", "/held", params=params) as response:
            # Headers are here while the generator has not yielded anything yet.
            assert response.status_code == 200
            assert response.headers["x-peach-replica"] == "held/main#1"
            gate.write_text("go")
            assert response.read() == b"released\n"
    wait_until(marker.exists, what="the generator to finish")
    dev.wait_for_output(r"GET /held 200 main held/main#1 .* stream")  # logged before the next


def test_disconnect_before_the_first_chunk_closes_the_generator(small_dev, tmp_path):
    dev = small_dev
    gate, marker = tmp_path / "never", tmp_path / "marker"
    params = {"stream": "1", "gate": str(gate), "marker": str(marker)}
    with httpx.Client(base_url=dev.url, timeout=20) as client:
        with client.stream("GET", "/held", params=params) as response:
            assert response.status_code == 200
            assert not marker.exists()
    wait_until(marker.exists, what="the generator's finally")
    dev.wait_for_output(r"GET /held 200 main held/main#1 .* stream")


# -- shutdown -----------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_closes_streams_and_stops_every_replica(peach_dev, small_project, tmp_path):
    dev = peach_dev(small_project)
    dev.wait_ready()
    pids = list(dev.worker_pids)
    assert pids, "no replica processes to check"
    assert len(pids) == 4 and all(alive(pid) for pid in pids)
    marker = tmp_path / "marker"
    with httpx.Client(base_url=dev.url, timeout=20) as client:
        with client.stream(
            "GET", "/stream", params={"stream": "1", "marker": str(marker)}
        ) as response:
            chunks = response.iter_raw()
            assert next(chunks) == b"first\n"
            os.kill(dev.process.pid, signal.SIGINT)  # Ctrl-C to peach dev only
            rest = drain_stream(chunks)  # cut (it did not finish) instead of hanging
    assert rest == (b"", False)
    assert dev.process.wait(timeout=20) == 0
    assert marker.read_text() == "closed"  # the generator's finally ran
    wait_until(lambda: not any(alive(pid) for pid in pids), what="replicas to exit")


SLOW_CLOSE_CELL = (
    "import asyncio, pathlib, time\n\nasync def words(marker: str):\n    try:\n"
    '        yield "first\\n"\n        await asyncio.sleep(60)\n    finally:\n'
    "        time.sleep(1)  # closing takes a while: peach dev is stopping meanwhile\n"
    "        pathlib.Path(marker).write_text('closed')\n"
)


@pytest.mark.slow
def test_sigterm_to_the_process_group_stops_as_cleanly_as_ctrl_c(peach_dev, tmp_path):
    """What `timeout` and `kill -- -PGID` do: SIGTERM to peach dev, then to its whole
    process group (its replicas too) while it is stopping."""
    conf = "codops: term\nendpoints:\n  words:\n    url: /words\n    components:\n"
    conf += "      main: {notebook: nb.ipynb, method: words}\n"
    project = write_project(tmp_path / "term", conf, {"nb.ipynb": [SLOW_CLOSE_CELL]})
    dev = peach_dev(project)  # the leader of its own process group
    dev.wait_ready()
    pids = list(dev.worker_pids)
    assert pids, "no replica processes to check"
    marker = tmp_path / "marker"
    with httpx.Client(base_url=dev.url, timeout=20) as client:
        with client.stream(
            "GET", "/words", params={"stream": "1", "marker": str(marker)}
        ) as response:
            chunks = response.iter_raw()
            assert next(chunks) == b"first\n"
            os.kill(dev.process.pid, signal.SIGTERM)
            dev.wait_for_output("stopping: closing streams and replicas")
            os.killpg(dev.process.pid, signal.SIGTERM)
            assert drain_stream(chunks) == (b"", False)
    assert dev.process.wait(timeout=20) == 0
    assert marker.read_text() == "closed"  # the gateway closed the generator: finally ran
    assert "restarting" not in dev.output()
    wait_until(lambda: not any(alive(pid) for pid in pids), what="replicas to exit")


def test_replicas_exit_when_peach_dev_is_killed(peach_dev, small_project):
    dev = peach_dev(small_project)
    dev.wait_ready()
    pids = list(dev.worker_pids)
    assert pids, "no replica processes to check"
    os.kill(dev.process.pid, signal.SIGKILL)
    dev.process.wait(timeout=10)
    wait_until(lambda: not any(alive(pid) for pid in pids), what="orphaned replicas to exit")


# -- reload plumbing (DevServer.apply_plan) -----------------------------------------------


@pytest.mark.slow
def test_apply_plan_restarts_only_changed_components(tmp_path, small_project):
    from simulator.session import DevSession, SessionConfig

    async def scenario() -> None:
        plan, diagnostics = build_plan(small_project)
        assert plan is not None, diagnostics
        async with DevSession(SessionConfig(plan, shared_env=True)) as session:
            server = session.server
            assert server is not None
            await server.wait_ready()
            async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
                hello_before = (await client.get("/hello")).json()["result"]["pid"]
                slow_before = (await client.get("/slow?seconds=0")).headers["x-peach-replica"]
                marker = tmp_path / "old-stream"
                async with client.stream("GET", f"/stream?stream=1&marker={marker}") as response:
                    chunks = response.aiter_raw()
                    assert await chunks.__anext__() == b"first\n"
                    # Change only the slow endpoint's code, then apply the new plan.
                    cells = list(SMALL_CELLS)
                    cells[1] = cells[1].replace('"done"', '"changed"')
                    write_project(small_project, None, {"nb.ipynb": cells})
                    new_plan, _ = build_plan(small_project)
                    assert new_plan is not None
                    change = await server.apply_plan(new_plan)
                    assert change.started == ["slow/main"]
                    assert sorted(change.kept) == ["held/main", "hello/main", "stream/main"]
                    assert not marker.exists()  # the kept stream component was not touched
                after = await client.get("/slow?seconds=0")
                assert after.json()["result"] == "changed"
                assert after.headers["x-peach-replica"] != slow_before
                assert (await client.get("/hello")).json()["result"]["pid"] == hello_before
            await asyncio.wait_for(server.wait_retired(), 20)

    from peach_cli.runtime import aio

    aio.run(scenario())


@pytest.mark.slow
def test_apply_plan_lets_in_flight_streams_finish_on_retired_replicas(tmp_path, small_project):
    from simulator.session import DevSession, SessionConfig

    async def scenario() -> None:
        plan, _ = build_plan(small_project)
        assert plan is not None
        async with DevSession(SessionConfig(plan, shared_env=True)) as session:
            server = session.server
            assert server is not None
            await server.wait_ready()
            async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
                marker = tmp_path / "marker"
                async with client.stream("GET", f"/stream?stream=1&marker={marker}") as response:
                    chunks = response.aiter_raw()
                    assert await chunks.__anext__() == b"first\n"
                    cells = list(SMALL_CELLS)
                    cells[2] = cells[2].replace("first", "second")
                    write_project(small_project, None, {"nb.ipynb": cells})
                    new_plan, _ = build_plan(small_project)
                    assert new_plan is not None
                    change = await server.apply_plan(new_plan)
                    assert change.retired == ["stream/main"]
                    async with client.stream("GET", "/stream?stream=1") as fresh:
                        assert await fresh.aiter_raw().__anext__() == b"second\n"
                    assert not marker.exists()  # the old stream is still running
                # The client closed the old stream: its generator is closed, then retired.
                await asyncio.wait_for(server.wait_retired(), 20)
                assert marker.read_text() == "closed"

    from peach_cli.runtime import aio

    aio.run(scenario())


def test_a_url_written_with_a_trailing_slash_answers_with_or_without_it(peach_dev, tmp_path):
    conf = SMALL_CONF.replace("url: /hello\n", "url: /hello/\n")
    assert conf != SMALL_CONF
    dev = peach_dev(write_project(tmp_path / "slash", conf, {"nb.ipynb": SMALL_CELLS}))
    dev.wait_ready()
    for path in ("/hello", "/hello/"):
        response = httpx.get(f"{dev.url}{path}", params={"name": "x"}, timeout=20)
        assert response.status_code == 200, (path, response.text)
        assert response.json()["result"]["hello"] == "x"
