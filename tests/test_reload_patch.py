"""Hot patch in `peach dev`, end to end: a real server, real HTTP, real notebook saves.

Each test serves a fresh copy of ``tests/projects/reload_patch``, whose inits return a
random token: an answer with the same token after an edit comes from the same replica
state. ``init_model`` also sleeps for the seconds written in the project's ``init_delay``
file, so an edit served long before that delay did not wait for an init.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import subprocess
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import PEACH
from conftest import REPO, URL_LINE, DevProcess, with_group_killed
from lifetime_support import dies_with_this_process
from netns_support import other_machine
from reload_support import copy_project, edit_cell
from waiting import poll as poll_until

from peach_cli.devtoken import token_headers

NOTEBOOK = "notebooks/Patch.ipynb"
DEADLINE_S = 20.0
SLOW_INIT_S = 60
"""Longer than any deadline here: an edit that re-ran init_model would time out."""
WATCHING = r"watching .* for changes"

pytestmark = [pytest.mark.timeout(120)]


def poll(check: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    return poll_until(check, what, timeout_s)


class Served:
    def __init__(self, dev: DevProcess, project: Path) -> None:
        self.dev = dev
        self.project = project
        # as peach's own tools do: the session token of this server (for /_peach/reinit)
        self.client = httpx.Client(base_url=dev.url, timeout=10, headers=token_headers(dev.url))

    def result(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    def edit(self, old: str, new: str) -> None:
        edit_cell(self.project, old, new, notebook=NOTEBOOK)

    def wait_result(self, path: str, check: Callable[[Any], bool], what: str) -> Any:
        def ready() -> Any:
            value = self.result(path)
            return value if check(value) else None

        return poll(ready, what)


@pytest.fixture
def serve(tmp_path: Path, peach_dev: Callable[..., DevProcess]) -> Iterator[Callable[..., Served]]:
    clients: list[Served] = []

    def start(*args: str) -> Served:
        project = copy_project("reload_patch", tmp_path)
        dev = peach_dev(project, *args, reload=True)
        dev.wait_ready()
        dev.wait_for_output(WATCHING)
        served = Served(dev, project)
        clients.append(served)
        return served

    try:
        yield start
    finally:
        for served in clients:
            served.client.close()


@pytest.mark.slow
def test_a_method_edit_keeps_the_init_state_and_does_not_wait_for_init(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    label, token = served.result("/model").split()
    assert label == "m1"
    replica = served.client.get("/model").headers["x-peach-replica"]
    (served.project / "init_delay").write_text(str(SLOW_INIT_S))  # a re-run would block

    served.edit('LABEL = "m1"', 'LABEL = "m2"')
    served.wait_result("/model", lambda r: r.startswith("m2 "), "the patched method")

    assert served.result("/model") == f"m2 {token}"
    assert served.client.get("/model").headers["x-peach-replica"] == replica
    served.dev.wait_for_output(
        r"patched model/main \(method changed; init state kept\) in \d+\.\d\d s"
    )
    assert "restarted model/main" not in served.dev.output()


@pytest.mark.slow
def test_a_method_edit_restarts_when_the_state_also_lives_in_the_module(
    serve: Callable[..., Served],
) -> None:
    """A patch keeps only what init returned. This init also sets a global and fills a
    module-level dict, and the method checks the state against the code's own class: a
    patched method would see none of that, so the edit restarts the component, and the
    answer after it is right."""
    served = serve()
    first = served.result("/kept")
    assert first[:4] == ["k1", True, "w1", True]
    served.edit('return ["k1",', 'return ["k2",')
    after = served.wait_result("/kept", lambda r: r[0] == "k2", "the edited method")
    assert after[:4] == ["k2", True, "w1", True] and after[4] != first[4]
    served.dev.wait_for_output(
        r"restarted kept/main \(init sets module globals, which a patched method would not"
    )
    assert "patched kept/main" not in served.dev.output()


@pytest.mark.slow
def test_an_init_edit_restarts_and_runs_init_again(serve: Callable[..., Served]) -> None:
    served = serve()
    token = served.result("/model").split()[1]
    served.edit("return token", 'return "i2-" + token')
    fresh = served.wait_result("/model", lambda r: " i2-" in r, "a new init state")
    assert token not in fresh
    served.dev.wait_for_output(
        r"restarted model/main \(init changed\) in \d+\.\d\d s \(init \d+\.\d\d s\)"
    )


@pytest.mark.slow
def test_a_method_edit_inside_the_cell_it_shares_with_init_is_patched(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    label, token = served.result("/shared")
    assert label == "s1"
    served.edit('return ["s1", model]', 'return ["s2", model]')
    assert served.wait_result("/shared", lambda r: r[0] == "s2", "the patched method") == [
        "s2",
        token,
    ]
    served.dev.wait_for_output(r"patched shared/main \(method changed; init state kept\)")

    # The same cell, edited in init: a restart, and a new state.
    served.edit('return "s-" + uuid', 'return "i2-" + uuid')
    served.wait_result("/shared", lambda r: r[1].startswith("i2-"), "a new init state")
    served.dev.wait_for_output(r"restarted shared/main \(init changed\)")


@pytest.mark.slow
def test_a_patch_superseded_while_its_code_runs_changes_nothing(
    serve: Callable[..., Served],
) -> None:
    """A save that reverts a method edit while the edit's code still runs in the replicas:
    the first patch is dropped, never committed later, and the original method serves."""
    served = serve()
    original = served.result("/model")
    # the new code says it runs (a file in the project folder, the replica's working
    # directory), then takes 3 s
    slow = 'LABEL = "m3"\nimport pathlib, time\npathlib.Path("patching").touch()\ntime.sleep(3)'
    served.edit('LABEL = "m1"', slow)
    poll(lambda: (served.project / "patching").exists(), "the new code to run")
    served.edit(slow, 'LABEL = "m1"')
    served.dev.wait_for_output(r"saved again while reloading", DEADLINE_S)
    # the dropped patch's code ends 3 s after it began: watch past that, it never serves
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert served.result("/model") == original
        time.sleep(0.1)


@pytest.mark.slow
def test_a_patch_whose_code_is_slow_never_stalls_requests(serve: Callable[..., Served]) -> None:
    """The new code's top level runs off the serving path: until it is ready, the old code
    answers at once; then the new one, with the same state."""
    served = serve()
    token = served.result("/model").split()[1]
    # the new code says it runs, then waits for the test to let it finish
    slow = (
        'LABEL = "m5"\nimport pathlib, time\npathlib.Path("patching").touch()\n'
        'while not pathlib.Path("release").exists():\n    time.sleep(0.02)'
    )
    served.edit('LABEL = "m1"', slow)
    poll(lambda: (served.project / "patching").exists(), "the new code to run")
    for _ in range(3):  # each answered while the new code still runs (it waits for us)
        response = served.client.get("/model", timeout=5)
        assert response.status_code == 200, response.text
        assert response.json()["result"] == f"m1 {token}"
    (served.project / "release").touch()
    assert served.wait_result("/model", lambda r: r.startswith("m5"), "the new code") == (
        f"m5 {token}"
    )
    served.dev.wait_for_output(r"patched model/main \(method changed; init state kept\)")


@pytest.mark.slow
def test_a_patch_that_raises_keeps_the_old_method_serving_and_says_why(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    token = served.result("/model").split()[1]
    served.edit('LABEL = "m1"', 'LABEL = "m1"\nraise RuntimeError("no such index")')
    served.dev.wait_for_output(r"model/main: the new version failed to start", DEADLINE_S)
    output = served.dev.output()
    assert "RuntimeError: no such index" in output
    assert "still serving the previous version" in output.lower()
    assert served.result("/model") == f"m1 {token}"

    served.edit('LABEL = "m1"\nraise RuntimeError("no such index")', 'LABEL = "m3"')
    assert served.wait_result("/model", lambda r: r.startswith("m3"), "the fix") == f"m3 {token}"


@pytest.mark.slow
def test_a_patch_during_a_stream_lets_the_stream_finish_on_the_old_code(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    served = serve()
    gate = tmp_path / "gate"
    params = {"stream": "true", "gate": str(gate)}
    with served.client.stream("GET", "/story", params=params) as old:
        chunks = old.iter_raw()
        first = next(chunks).decode()
        assert first.startswith("t1 begins ")
        token = first.split()[-1]

        served.edit('STORY = "t1"', 'STORY = "t2"')

        def new_story() -> bool:
            response = served.client.get("/story", params={"stream": "true"})
            return response.text == f"t2 begins {token}\nt2 ends\n"

        poll(new_story, "the patched stream code, with the same init state")
        gate.write_text("open")
        assert b"".join(chunks) == b"t1 ends\n"
    served.dev.wait_for_output(r"patched story/main \(method changed; init state kept\)")


@pytest.mark.slow
def test_every_replica_of_a_component_is_patched(serve: Callable[..., Served]) -> None:
    served = serve()

    def both_tokens() -> set[str]:
        tokens = {served.result("/pair")[1] for _ in range(8)}
        return tokens if len(tokens) == 2 else set()

    tokens = poll(both_tokens, "both replicas of /pair")
    served.edit('return ["p1", model]', 'return ["p2", model]')
    served.dev.wait_for_output(r"patched pair/main \(method changed; init state kept\)")
    answers = [served.result("/pair") for _ in range(8)]
    assert {label for label, _ in answers} == {"p2"}
    assert {token for _, token in answers} == tokens


@pytest.mark.slow
def test_reload_restart_always_starts_new_replicas(serve: Callable[..., Served]) -> None:
    served = serve("--reload", "restart")
    token = served.result("/model").split()[1]
    served.edit('LABEL = "m1"', 'LABEL = "m2"')
    fresh = served.wait_result("/model", lambda r: r.startswith("m2 "), "the new code")
    assert fresh.split()[1] != token
    served.dev.wait_for_output(r"restarted model/main \(code changed\) in ")
    assert "patched" not in served.dev.output()


def test_a_bad_reload_mode_is_a_usage_error(peach_dev: Callable[..., DevProcess]) -> None:
    project = Path(__file__).parent / "projects" / "reload_patch"
    dev = peach_dev(project, "--reload", "hot", wait_url=False)
    assert dev.process.wait(timeout=DEADLINE_S) == 2
    assert "--reload must be patch or restart, not 'hot'" in dev.output()
    assert "Traceback" not in dev.output()


@pytest.mark.slow
def test_reinit_reruns_init_on_demand(serve: Callable[..., Served]) -> None:
    served = serve()
    label, token = served.result("/model").split()
    response = served.client.post("/_peach/reinit/model")
    assert response.status_code == 200, response.text
    assert response.json()["result"]["reinitialized"] == ["model/main"]
    assert served.result("/model").split()[1] != token  # at once: the new replicas serve
    served.dev.wait_for_output(r"re-ran init of model/main in \d+\.\d\d s")

    story = served.result("/shared")[1]
    assert served.client.post("/_peach/reinit/shared/main").status_code == 200
    assert served.result("/shared")[1] != story

    missing = served.client.post("/_peach/reinit/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "no endpoint named 'nope'"
    assert served.client.post("/_peach/reinit/model/other").status_code == 404
    assert served.client.get("/_peach/reinit/model").status_code == 405


@pytest.mark.slow
def test_reinit_whose_init_raises_keeps_the_old_state(serve: Callable[..., Served]) -> None:
    served = serve()
    token = served.result("/model").split()[1]
    (served.project / "init_delay").write_text("not a number")
    response = served.client.post("/_peach/reinit/model")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "init_error"
    assert "ValueError" in error["message"] and "previous replicas keep serving" in error["message"]
    assert served.result("/model") == f"m1 {token}"
    served.dev.wait_for_output(r"model/main: the new init failed: .*ValueError")


@pytest.mark.slow
def test_reinit_refuses_clients_that_are_not_on_loopback(
    tmp_path: Path, peach_dev: Callable[..., DevProcess]
) -> None:
    project = copy_project("reload_patch", tmp_path)
    with other_machine() as link:
        dev = peach_dev(project, "--host", link.host_address)
        dev.wait_for_output(r"replicas? healthy")  # /_peach/health is for loopback too
        url = f"{dev.url}/_peach/reinit/model"
        code = (
            "import httpx, json\n"
            f"response = httpx.post({url!r}, timeout=20)\n"
            f"health = httpx.get({dev.url + '/_peach/health'!r}, timeout=20)\n"
            "print(json.dumps([response.status_code, response.json(), health.status_code]))\n"
        )
        done = link.python(code)
    assert done.returncode == 0, done.stderr
    status, body, health = json.loads(done.stdout)
    assert status == 403, body
    assert body["error"]["message"] == "/_peach/reinit is for loopback clients"
    assert health == 403  # every /_peach/ route, whatever --host says
    assert "re-ran init" not in dev.output()


def _take_terminal() -> None:
    """In the child, after ``setsid``: its standard input (the pty) becomes its controlling
    terminal, with peach dev in the foreground, as when started from a shell."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.slow
def test_the_i_key_reruns_every_init(tmp_path: Path) -> None:
    """Standard input a terminal (a pty), output in a file: typing ``i`` re-runs init."""
    project = copy_project("reload_patch", tmp_path)
    log_path = tmp_path / "dev.log"
    primary, secondary = pty.openpty()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            # a real process: a `peach dev` server on a pty
            [*PEACH, "dev", str(project), "--port", "0"],
            stdin=secondary,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, NO_COLOR="1", COLUMNS="200", PYTHONUNBUFFERED="1"),
            start_new_session=True,
            preexec_fn=dies_with_this_process(then=_take_terminal),
        )
    os.close(secondary)
    dev = DevProcess(process, log_path)
    try:
        dev.url = dev.wait_for_output(URL_LINE.pattern, DEADLINE_S).group(1)
        dev.wait_ready()
        dev.wait_for_output(r"press i to re-run every init")
        token = httpx.get(f"{dev.url}/model", timeout=10).json()["result"].split()[1]
        os.write(primary, b"i")
        dev.wait_for_output(
            r"re-ran init of model/main, shared/main, pair/main, story/main, kept/main in ",
            DEADLINE_S,
        )
        assert httpx.get(f"{dev.url}/model", timeout=10).json()["result"].split()[1] != token
        assert dev.stop() == 0
    finally:
        with_group_killed(process)
        process.wait(timeout=DEADLINE_S)
        os.close(primary)


@pytest.mark.slow
def test_keys_are_off_when_the_terminal_is_not_peach_devs_own(tmp_path: Path) -> None:
    """A pty on standard input that is not peach dev's controlling terminal (as for
    ``peach dev &``): no key handling, and peach dev serves instead of being stopped."""
    project = copy_project("reload_patch", tmp_path)
    log_path = tmp_path / "dev.log"
    primary, secondary = pty.openpty()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            # a real process: a `peach dev` server on a pty
            [*PEACH, "dev", str(project), "--port", "0"],
            stdin=secondary,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, NO_COLOR="1", COLUMNS="200", PYTHONUNBUFFERED="1"),
            start_new_session=True,
            preexec_fn=dies_with_this_process(),
        )
    os.close(secondary)
    dev = DevProcess(process, log_path)
    try:
        dev.url = dev.wait_for_output(URL_LINE.pattern, DEADLINE_S).group(1)
        dev.wait_ready()
        dev.wait_for_output(WATCHING)
        assert "press i" not in dev.output()
        assert dev.stop() == 0
    finally:
        with_group_killed(process)
        process.wait(timeout=DEADLINE_S)
        os.close(primary)
