"""Fault injection against a real `peach dev`: replicas killed, methods that never return,
inits that hang, generators that raise, results that are not JSON or far too large, floods
of output, and a project that breaks on disk while it is served.

Every test drives the server over real HTTP on loopback and asserts what a user would see
(the status, the error envelope, how fast it came) and that nothing is lost afterwards (the
next request works, no process is left behind, the gateway's memory stays bounded).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_support import PEACH
from conftest import PROJECTS, REPO, URL_LINE, DevProcess, drain_stream, start_peach_dev
from lifetime_support import dies_with_this_process
from waiting import poll, wait_until

from peach_cli.runtime.tree import descendants

FAULTS = PROJECTS / "faults"
SERVING = FAULTS / "serving"
MiB = 1024 * 1024


# -- helpers --------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def memory_kib(pid: int, field: str = "VmRSS") -> int:
    """A ``/proc/PID/status`` memory figure in KiB (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def health(dev: DevProcess) -> dict:
    return httpx.get(f"{dev.url}/_peach/health", timeout=5).json()


def replica(dev: DevProcess, component: str) -> dict:
    """The health record of the (only) replica of ``component``."""
    for entry in health(dev)["components"]:
        if entry["component"] == component:
            return entry["replicas"][0]
    raise AssertionError(f"no component {component}")


class Background:
    """An HTTP request running in a thread; ``result()`` waits for it (bounded)."""

    def __init__(self, method: str, url: str, **kwargs) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self.finished_at = 0.0
        self._thread = threading.Thread(target=self._run, args=(method, url), kwargs=kwargs)
        self._thread.daemon = True
        self._thread.start()

    def _run(self, method: str, url: str, **kwargs) -> None:
        try:
            self.response = httpx.request(method, url, timeout=60, **kwargs)
        except BaseException as error:  # noqa: BLE001 - reported by result()
            self.error = error
        finally:
            self.finished_at = time.monotonic()

    def result(self, timeout_s: float = 60.0) -> httpx.Response:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the request did not finish"
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


def stop_cleanly(dev: DevProcess) -> None:
    """Ctrl-C after the faults: exit 0 in time, and no process below it left behind (its
    keeper, the replicas and what they started)."""
    replicas = descendants(dev.process.pid)
    assert replicas, "peach dev has no replica processes to check"
    os.kill(dev.process.pid, signal.SIGINT)
    try:
        code = dev.process.wait(timeout=15)
    finally:
        dev.stop()
    assert code == 0, dev.output()[-3000:]
    wait_until(lambda: not any(alive(pid) for pid in replicas), 10, "the replicas to exit")


def start_session_server(factory: pytest.TempPathFactory, project: Path, *args: str):
    dev = start_peach_dev(project, factory.mktemp("faults") / "peach-dev.log", *args)
    try:
        dev.wait_ready()
    except BaseException:
        dev.stop()
        raise
    return dev


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """`peach dev tests/projects/faults/serving`, timeout_s = 1 s."""
    dev = start_session_server(tmp_path_factory, SERVING)
    try:
        yield dev
    finally:
        stop_cleanly(dev)  # with hung threads, killed replicas and streams behind it


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    """The same project with a 60 s timeout, for the calls that take a while to misbehave."""
    dev = start_session_server(tmp_path_factory, SERVING, "--timeout-s", "60")
    try:
        yield dev
    finally:
        stop_cleanly(dev)


# -- a replica killed -----------------------------------------------------------------------


def test_sigkill_mid_request_is_an_error_at_once_and_the_replica_restarts(faults):
    before = replica(faults, "sleepy/main")
    call = Background("GET", f"{faults.url}/sleepy", params={"seconds": 30})
    wait_until(lambda: replica(faults, "sleepy/main")["outstanding"] == 1, what="the call")
    os.kill(before["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    response = call.result()
    # Long before the 30 s call would have ended: the caller did not wait for it.
    assert call.finished_at - killed_at < 15, "the caller waited instead of failing at once"
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "method_error"
    assert "killed by SIGKILL" in error["message"] and "restarting" in error["message"]
    assert response.headers["x-peach-replica"] == before["id"]
    deadline = time.monotonic() + 30
    while True:  # later requests succeed on a fresh process (init ran again)
        again = httpx.get(f"{faults.url}/sleepy", params={"seconds": 0}, timeout=30)
        if again.status_code == 200:
            break
        assert again.json()["error"]["code"] in ("unavailable", "method_error"), again.text
        assert time.monotonic() < deadline, again.text
        time.sleep(0.05)
    assert again.json()["result"]["pid"] not in (before["pid"], None)
    assert not alive(before["pid"])
    faults.wait_for_output(r"sleepy/main#\d+ restarting: the replica process was killed by SIGKILL")
    assert httpx.get(f"{faults.url}/hello", timeout=10).status_code == 200


def test_sigkill_mid_stream_ends_the_stream_and_the_next_one_works(faults):
    with httpx.Client(base_url=faults.url, timeout=30) as client:
        with client.stream("GET", "/drip", params={"stream": "1"}) as response:
            assert response.status_code == 200
            chunks = response.iter_raw()
            assert next(chunks) == b"drop-0\n"
            os.kill(replica(faults, "drip/main")["pid"], signal.SIGKILL)
            killed_at = time.monotonic()
            rest, clean = drain_stream(chunks)  # cut at once instead of hanging
            assert time.monotonic() - killed_at < 15  # (the client's own timeout is 30 s)
        assert b"drop-0" not in rest and not clean
        deadline = time.monotonic() + 30
        while True:
            with client.stream("GET", "/drip", params={"stream": "1"}) as response:
                if response.status_code == 200:
                    assert next(response.iter_raw()) == b"drop-0\n"
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_requests_arriving_while_a_killed_replica_restarts_wait_for_it(faults):
    before = replica(faults, "hello/main")
    os.kill(before["pid"], signal.SIGKILL)  # idle: nothing of its own is in flight
    # Gone, not only a zombie: a killed process's leader thread is one while its other
    # threads are still exiting, and its socket is open until the last one has.
    wait_until(lambda: not os.path.exists(f"/proc/{before['pid']}"), 5, "the replica to go")
    calls = [Background("GET", f"{faults.url}/hello", params={"name": str(i)}) for i in range(5)]
    for i, call in enumerate(calls):  # none is lost: each waits for the restart
        response = call.result()
        assert response.status_code == 200, response.text
        assert response.json()["result"]["hello"] == str(i)
        assert response.json()["result"]["pid"] != before["pid"]


# -- a replica's socket held by another process ---------------------------------------------

HOLDER_CONF = """codops: holder
timeout_s: 30
endpoints:
  hold:
    url: /hold
    components:
      main: {notebook: nb.ipynb, method: hold}
  fds:
    url: /fds
    components:
      main: {notebook: nb.ipynb, method: fds}
"""
HOLDER_CELLS = [
    # a process forked mid-call, left running: it holds every fd the replica had
    "import os\nimport time\n\n\ndef hold(seconds: float = 0, pidfile: str = ''):\n"
    "    if pidfile:\n"
    "        child = os.fork()\n"
    "        if child == 0:\n"
    "            time.sleep(120)\n"
    "            os._exit(0)\n"
    "        with open(pidfile, 'w') as out:\n"
    "            out.write(str(child))\n"
    "    time.sleep(seconds)\n"
    "    return os.getpid()\n",
    # a program started keeping the fds it may inherit: which sockets does it get?
    "import subprocess\n\n\ndef fds():\n"
    "    listing = ['ls', '-l', '/proc/self/fd']\n"
    "    return subprocess.run(listing, close_fds=False, capture_output=True, text=True).stdout\n",
]


@pytest.fixture
def holder(tmp_path: Path) -> Path:
    from projectkit import write_project

    return write_project(tmp_path / "holder", HOLDER_CONF, {"nb.ipynb": HOLDER_CELLS})


@pytest.mark.slow
def test_a_replica_killed_while_a_process_it_forked_lives_on_is_restarted_at_once(
    peach_dev, holder, tmp_path, monkeypatch
):
    """The process a call forked keeps the replica's end of its socket open after the
    replica is killed: peach dev goes by the replica's exit, not by its socket closing. No
    subreaper (``PEACH_LINUX_WITHOUT``): nothing kills the forked process behind peach's
    back, so it holds the socket for the whole test."""
    monkeypatch.setenv("PEACH_LINUX_WITHOUT", "subreaper")
    dev = peach_dev(holder)
    dev.wait_ready()
    pidfile = tmp_path / "forked.pid"
    before = replica(dev, "hold/main")["pid"]
    call = Background("GET", f"{dev.url}/hold", params={"seconds": 25, "pidfile": str(pidfile)})
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), 30, "the forked process")
        forked = int(pidfile.read_text())
        os.kill(before, signal.SIGKILL)
        killed_at = time.monotonic()
        response = call.result()
        assert response.status_code == 500, response.text  # not 504 after timeout_s = 30 s
        assert "killed by SIGKILL" in response.json()["error"]["message"]
        assert call.finished_at - killed_at < 15
        assert alive(forked)  # it still holds the socket: the exit told peach dev
        wait_until(lambda: not alive(before), 10, "the replica to be gone")
        # a call after the replica is gone waits for the restart, and is served there
        again = httpx.get(f"{dev.url}/hold", timeout=30)
        assert again.status_code == 200, again.text
        assert again.json()["result"] not in (before, forked)
    finally:
        if pidfile.exists() and pidfile.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.mark.slow
def test_programs_a_replica_starts_get_no_socket_of_peach(peach_dev, holder):
    """A program the user's code starts keeping inheritable fds (``close_fds=False``,
    ``os.system``) gets neither the replica's socket to the gateway nor the keeper's to
    peach: it could not keep them open after the replica died."""
    dev = peach_dev(holder)
    dev.wait_ready()
    response = httpx.get(f"{dev.url}/fds", timeout=30)
    assert response.status_code == 200, response.text
    listing = response.json()["result"]
    assert "/dev/null" in listing  # (what the program got: its stdin)
    assert "socket:" not in listing, listing


# -- methods that never return --------------------------------------------------------------


@pytest.mark.parametrize("url", ["/hang", "/hang-async"])
def test_a_method_that_never_returns_times_out_and_its_replica_keeps_serving(faults, url, tmp_path):
    started = [tmp_path / f"started-{i}" for i in range(3)]
    hung = [
        Background("GET", f"{faults.url}{url}", params={"mode": "forever", "started": str(path)})
        for path in started
    ]
    wait_until(lambda: all(path.exists() for path in started), 30, "the hung calls to run")
    with httpx.Client(base_url=faults.url, timeout=30) as client:
        for _ in range(5):  # the same replica answers its other requests meanwhile
            fast = client.get(url)  # (its three hung calls never end: not queued behind them)
            assert fast.status_code == 200
    for call in hung:
        # A 504 at all is the bound: the method never returns.
        response = call.result()
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "timeout"
        assert "timeout_s = 1 s" in response.json()["error"]["message"]
        assert response.headers["x-peach-replica"] == fast.headers["x-peach-replica"]
    assert httpx.get(f"{faults.url}{url}", timeout=10).json()["result"]["mode"] == "ok"


@pytest.mark.slow
def test_a_replica_whose_threads_are_all_held_restarts_and_says_why(peach_dev):
    """README: once all 64 threads of a replica are held by calls that never return, the
    replica restarts and says why."""
    from peach_cli.runtime.contract import ComponentRunner

    dev = peach_dev(SERVING)
    dev.wait_ready()
    before = replica(dev, "hang/main")["pid"]
    hung = [
        Background("GET", f"{dev.url}/hang", params={"mode": "forever"})
        for _ in range(ComponentRunner.max_threads + 2)
    ]
    for call in hung:  # cut at timeout_s, or failed at once when the replica left
        answer = call.result()
        assert answer.status_code == 504 or (
            answer.status_code == 500 and "peach dev is restarting it" in answer.text
        ), answer.text
    # the restart line itself says why (the replica's exit code carries the reason)
    dev.wait_for_output(
        r"hang/main#1 restarting: the replica process left: every thread it has for sync "
        r"calls is held by a call that never returned; restarting"
    )

    def restarted() -> dict | None:
        now = replica(dev, "hang/main")
        return now if now["pid"] not in (None, before) and now["state"] == "healthy" else None

    poll(restarted, "a new, healthy hang/main replica", 60)
    assert not alive(before)
    response = httpx.get(f"{dev.url}/hang", timeout=10)
    assert response.status_code == 200, response.text


# -- an init that never returns -------------------------------------------------------------


@pytest.mark.slow
def test_an_init_that_hangs_is_reported_and_ctrl_c_still_exits_without_orphans(peach_dev):
    from simulator.replica import INIT_STUCK_S

    dev = peach_dev(FAULTS / "stuck_init")
    with httpx.Client(base_url=dev.url, timeout=10) as client:
        deadline = time.monotonic() + 30
        while client.get("/ok").status_code != 200:  # the other endpoint answers meanwhile
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stuck = replica(dev, "stuck/main")
        assert stuck["state"] == "starting" and alive(stuck["pid"])
        dev.wait_for_output(
            r"stuck/main#1 starting: init has not returned after \d+ s", INIT_STUCK_S + 10
        )
        stuck = replica(dev, "stuck/main")
        assert stuck["state"] == "starting"
        assert "init has not returned" in (stuck["error"] or "")
        assert client.get("/ok").json()["result"] == "pong"
    pids = [r["pid"] for c in health(dev)["components"] for r in c["replicas"]]
    assert len(pids) == 2 and all(pids), pids  # stuck/main's (starting) and ok/main's
    os.killpg(dev.process.pid, signal.SIGINT)  # Ctrl-C in the terminal
    assert dev.process.wait(timeout=15) == 0
    wait_until(lambda: not any(alive(pid) for pid in pids), 10, "the replicas to exit")
    assert "Traceback" not in dev.output()


SLOW_INIT_CONF = """codops: slowinit
endpoints:
  greet:
    url: /greet
    components:
      main: {notebook: nb.ipynb, init: slow_init, method: greet}
      fallback: {notebook: nb.ipynb, method: plain}
  lonely:
    url: /lonely
    components:
      main: {notebook: nb.ipynb, init: slow_init, method: greet}
"""
SLOW_INIT_CELLS = [
    "import time\n\ndef slow_init():\n    time.sleep(1000)\n    return 1\n",
    "def greet(model):\n    return 'main'\n",
    "def plain():\n    return 'fallback'\n",
]


@pytest.mark.slow
def test_a_slow_init_never_holds_a_call_past_timeout_s(peach_dev, tmp_path):
    from projectkit import write_project

    project = write_project(tmp_path / "slowinit", SLOW_INIT_CONF, {"nb.ipynb": SLOW_INIT_CELLS})
    dev = peach_dev(project, "--timeout-s", "1")
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        wait_until(lambda: replica(dev, "greet/fallback")["state"] == "healthy", 30, "the fallback")
        began = time.monotonic()
        answered = client.get("/greet")  # main's replica is starting: the fallback answers
        assert answered.status_code == 200, answered.text
        assert answered.json()["result"] == "fallback"
        assert answered.headers["x-peach-component"] == "fallback"
        refused = client.get("/lonely")  # no fallback: 504 saying why
        took = time.monotonic() - began
        assert refused.status_code == 504, refused.text
        error = refused.json()["error"]
        assert error["code"] == "timeout"
        assert re.search(r"still starting \(\d+ s so far\)", error["message"]), error
        assert took < 15  # each bounded by timeout_s (was: until init returned)
        # the log lines are written when the answers are, not when peach stops
        dev.wait_for_output(r"GET /greet 200 fallback")
        dev.wait_for_output(r"GET /lonely 504 main .*replicas are still starting")
        assert dev.process.poll() is None
        assert replica(dev, "lonely/main")["state"] == "starting"


# -- streams that fail ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "chunks", "error"),
    [
        ("/three-then-raise", [b"chunk-0\n", b"chunk-1\n", b"chunk-2\n"], "after 3 chunks"),
        ("/sync-three-then-raise", [b"sync-0\n", b"sync-1\n", b"sync-2\n"], "sync generator"),
    ],
)
def test_a_generator_raising_after_three_chunks_cuts_the_stream(
    faults, tmp_path, url, chunks, error
):
    marker = tmp_path / "closed"
    with httpx.Client(base_url=faults.url, timeout=10) as client:
        for attempt in range(2):  # and the next request works the same
            params = {"stream": "true"}
            if url == "/three-then-raise":
                params["marker"] = str(marker)
            with client.stream("GET", url, params=params) as response:
                assert response.status_code == 200
                received = drain_stream(response.iter_raw())
            assert received == (b"".join(chunks), False), attempt  # the chunks, then cut
        assert client.get("/hello").status_code == 200
    if url == "/three-then-raise":
        assert marker.read_text() == "closed"
    faults.wait_for_output(error)
    # the request line says the stream was cut, after how much, and by what exception
    faults.wait_for_output(
        rf"GET {url} 200 .*stream cut after 3 chunks: RuntimeError: the .*{error}"
    )


def test_a_stream_to_a_client_that_stops_reading_keeps_memory_bounded(faults):
    import socket

    gateway, worker = faults.process.pid, replica(faults, "flood/main")["pid"]
    before = memory_kib(gateway) + memory_kib(worker)
    host, port = faults.url.removeprefix("http://").rsplit(":", 1)
    peak = before
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /flood?stream=1&chunks=300&kb=1024 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 3  # the client reads nothing more for 3 s
        while time.monotonic() < deadline:
            peak = max(peak, memory_kib(gateway) + memory_kib(worker))
            time.sleep(0.05)
    assert peak - before < 100 * 1024, f"grew {(peak - before) // 1024} MiB for one stream"


# -- results that cannot be sent ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("object", "result is of type peach_component_not_json_main.Opaque, which is not JSON"),
        ("nested", "result['items'][2] is of type peach_component_not_json_main.Opaque"),
        ("nan", "result[0] is nan, which JSON cannot represent"),
    ],
)
def test_a_result_that_is_not_json_is_a_method_error_naming_the_type(faults, kind, expected):
    response = httpx.get(f"{faults.url}/not-json", params={"kind": kind}, timeout=10)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "method_error"
    assert "not_json() returned a result that is not JSON" in error["message"]
    assert expected in error["message"]
    assert httpx.get(f"{faults.url}/hello", timeout=10).status_code == 200


def test_a_200_mb_result_is_a_clear_error_and_the_gateway_stays_small(patient):
    from peach_cli.runtime.replica_worker import MAX_RESULT_BYTES

    gateway = patient.process.pid
    before = memory_kib(gateway)
    response = httpx.get(f"{patient.url}/huge", params={"megabytes": 200}, timeout=60)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "method_error"
    assert "huge() returned" in error["message"] and "over the limit" in error["message"]
    assert f"{MAX_RESULT_BYTES // MiB} MiB" in error["message"]
    # The gateway never held the result: its peak memory barely moved.
    assert memory_kib(gateway, "VmHWM") - before < 64 * 1024
    small = httpx.get(f"{patient.url}/huge", params={"megabytes": 1}, timeout=60)
    assert small.status_code == 200 and len(small.json()["result"]) == 1_000_000


@pytest.mark.serial  # answers must come while 100 MB are printed
@pytest.mark.parametrize("lines", [True, False], ids=["100-byte-lines", "one-line"])
def test_100_mb_of_prints_neither_stall_the_gateway_nor_flood_the_log(patient, lines, tmp_path):
    gateway = patient.process.pid
    before = memory_kib(gateway, "VmHWM")
    log_before = patient.log_path.stat().st_size
    started = tmp_path / "started"
    params = {"megabytes": 100, "lines": lines, "started": str(started)}
    loud = Background("GET", f"{patient.url}/loud", params=params)
    wait_until(started.exists, 30, "the replica to start printing")
    answered_meanwhile = 0
    with httpx.Client(base_url=patient.url, timeout=30) as client:
        while loud.finished_at == 0.0:  # other requests are answered meanwhile
            began = time.monotonic()
            assert client.get("/hello").status_code == 200
            # A generous bound (its latency is a benchmark's): the gateway never stalls.
            assert time.monotonic() - began < 10
            answered_meanwhile += loud.finished_at == 0.0
    response = loud.result()
    assert response.status_code == 200, response.text
    assert response.json()["result"] == {"printed_mb": 100}
    # At least one answer came while the replica printed (its writes wait on the gateway
    # reading them): the gateway did not stop serving until the prints were done.
    assert answered_meanwhile >= 1
    assert memory_kib(gateway, "VmHWM") - before < 64 * 1024
    assert patient.log_path.stat().st_size - log_before < 2 * MiB  # summarised, not copied
    patient.wait_for_output(r"loud/main#1 \| .*not shown")


# -- the project breaks on disk while it is served ------------------------------------------


def start_reloading(project: Path, log_path: Path) -> DevProcess:
    """`peach dev PROJECT --port 0` with hot reload (the shared fixture turns it off)."""
    log = log_path.open("wb")
    process = subprocess.Popen(
        # a real process: a `peach dev` server
        [*PEACH, "dev", str(project), "--port", "0"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env=dict(os.environ, NO_COLOR="1", COLUMNS="200", PYTHONUNBUFFERED="1"),
        start_new_session=True,
        preexec_fn=dies_with_this_process(),
    )
    log.close()
    dev = DevProcess(process, log_path)
    try:
        dev.url = dev.wait_for_output(URL_LINE.pattern, 60).group(1)
        dev.wait_ready()
        dev.wait_for_output(r"watching .* for changes")
    except BaseException:
        dev.stop()
        raise
    return dev


def edited_notebook(version: int) -> str:
    from projectkit import notebook_json

    return notebook_json(
        [f'VERSION = {version}\n\n\ndef version():\n    return {{"version": VERSION}}\n']
    )


@pytest.mark.slow
def test_a_project_broken_on_disk_during_reload_keeps_the_old_version_serving(tmp_path):
    project = tmp_path / "soak"
    shutil.copytree(FAULTS / "soak", project)
    notebook = project / "notebooks" / "Edited.ipynb"
    dev = start_reloading(project, tmp_path / "peach-dev.log")
    try:
        url = f"{dev.url}/edited"
        with httpx.Client(timeout=10) as client:

            def version() -> int:
                return client.get(url).json()["result"]["version"]

            notebook.write_text(edited_notebook(1))
            wait_until(lambda: version() == 1, 30, "the first reload")
            good = notebook.read_bytes()
            rejected = 0

            def breaks(damage) -> None:
                nonlocal rejected
                damage()
                rejected += 1
                wait_until(
                    lambda: dev.output().count("still serving the previous version") >= rejected,
                    30,
                    "the reload to be refused",
                )
                assert version() == 1
                assert client.get(f"{dev.url}/recommend").status_code == 200

            # a disk that filled up mid-save: the notebook is cut short
            breaks(lambda: notebook.write_bytes(good[: len(good) // 2]))
            breaks(lambda: notebook.write_bytes(b""))  # a save that wrote nothing
            breaks(notebook.unlink)  # the file is gone
            breaks(lambda: notebook.symlink_to(tmp_path / "nowhere.ipynb"))  # dangling link
            notebook.unlink()
            breaks(lambda: notebook.mkdir())  # a folder where the notebook was
            notebook.rmdir()
            notebook.write_text(edited_notebook(2))  # fixed: the new version serves
            wait_until(lambda: version() == 2, 30, "the reload after the fix")
        assert "Traceback" not in dev.output()
    finally:
        assert dev.stop() == 0
