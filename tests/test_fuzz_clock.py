"""`peach fuzz` by the clock, and findings that reproduce (SPEC §11), as a user runs it.

- A stream is read for 0.25 s of the clock after its answer starts, then closed (its
  generator too), whatever the generator does: a stream that sleeps is no finding and costs
  no read timeout — so the project of `peach init --streaming` is fuzzed in seconds, with a
  progress line on a terminal; under `peach test` such a stream fails as stalled, not cut.
- TARGETS are endpoint names or urls; one that names none is exit 2 with "did you mean".
- A timeout is reported on a request that times out with a margin: its ready case fails
  under `peach test` every time. With ``--url`` the request after one that killed a replica
  waits for its restart instead of becoming a false timeout.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from cli_support import on_a_terminal, run_peach
from projectkit import write_project

PROJECTS = Path(__file__).parent / "projects" / "fuzzing"
pytestmark = pytest.mark.timeout(600)  # each starts a simulator (or two) and a fuzzing run

DRIP = '''import asyncio
import time


async def drip(word: str = "x"):
    """Sleeps half a minute after its first chunk; says when it opened and was closed."""
    with open({log!r}, "a") as log:
        log.write(f"opened {{time.time()}}\\n")
    try:
        yield word
        await asyncio.sleep(30)
        yield word
    finally:
        with open({log!r}, "a") as log:
            log.write(f"closed {{time.time()}}\\n")
'''

PAUSE = '''import time


def pause(ms: int = 0):
    """Takes ms milliseconds (at most 4 s): past timeout_s from 1000 on."""
    time.sleep(min(max(ms, 0), 4000) / 1000)
    return ms
'''

SPIN = '''import time


def spin(n: int = 0):
    """Busy on a core for 20 s from n = 1000 on (timeout_s is 1); logs while it runs."""
    if n < 1000:
        return n
    began = time.time()
    beat = began
    while time.time() - began < 20:
        if time.time() - beat > 0.25:
            beat = time.time()
            with open({log!r}, "a") as log:
                log.write(f"{{began}} {{beat}}\\n")
    return n
'''

CRASH = '''import os
import time


def warm_up():
    """A slow start: a restart takes longer than timeout_s."""
    time.sleep(1.5)
    return {}


def crash(model, code: int = 0):
    """Exits the process for a negative code."""
    if code < 0:
        os._exit(3)
    return code
'''


def _project(tmp_path: Path, name: str, endpoint: str, cell: str, extra: str = "") -> Path:
    conf = (
        f"codops: {name}\ntimeout_s: 1\nendpoints:\n  {endpoint}:\n    url: /{endpoint}\n"
        f"    components:\n      main: {{notebook: notebooks/N.ipynb, method: {endpoint}{extra}}}\n"
    )
    return write_project(tmp_path / name, conf, {"notebooks/N.ipynb": [cell]})


def _drip_project(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "drip.log"
    return _project(tmp_path, "drip", "drip", DRIP.format(log=str(log))), log


def _fuzz_json(project: Path, *args: str, timeout: float = 300) -> tuple[int, dict]:
    done = run_peach("fuzz", *args, "--format", "json", cwd=project)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _fuzz_url_json(project: Path, tmp_path: Path, *args: str) -> tuple[int, dict]:
    """`peach fuzz --url` against a `peach dev` of ``project``."""
    from tests.conftest import start_peach_dev

    dev = start_peach_dev(project, tmp_path / "dev.log")
    try:
        dev.wait_ready()
        return _fuzz_json(project, "--url", dev.url, *args)
    finally:
        dev.stop()


def _opened_and_closed(log: Path) -> list[tuple[float, float]]:
    """Each generator's (opened, closed) times, in order."""
    opened: list[float] = []
    closed: list[float] = []
    for line in log.read_text().splitlines():
        what, at = line.split()
        (opened if what == "opened" else closed).append(float(at))
    return list(zip(opened, closed, strict=True))


@pytest.mark.slow
def test_a_stream_that_sleeps_is_closed_at_its_deadline_and_is_no_finding(tmp_path: Path) -> None:
    """Before: each request waited for the read timeout (31 s here: 5 minutes for the
    run); the generators were closed only when the simulator stopped."""
    project, log = _drip_project(tmp_path)
    began = time.monotonic()
    code, found = _fuzz_json(project, "drip", "--examples", "10", "--seed", "1")
    took = time.monotonic() - began
    assert (code, found["findings"]) == (0, []), found
    lives = _opened_and_closed(log)
    assert len(lives) >= 10, lives
    assert all(closed - opened < 10 for opened, closed in lives), lives  # not 30 s
    assert took < 200, took  # (a loaded machine's bound: the clock is benchmarks/fuzz.py's)


@pytest.mark.slow
def test_with_url_a_stream_that_sleeps_is_no_cut_finding(tmp_path: Path) -> None:
    """Before: through --url each such stream waited the 60 s read timeout, then was
    reported as "method_error … the stream was cut"."""
    project, log = _drip_project(tmp_path)
    code, found = _fuzz_url_json(project, tmp_path, "--examples", "3", "--seed", "1")
    assert (code, found["findings"]) == (0, []), found
    assert all(closed - opened < 10 for opened, closed in _opened_and_closed(log))


@pytest.mark.slow
def test_a_stream_that_stalls_fails_under_peach_test_as_stalled_not_cut(tmp_path: Path) -> None:
    project, _log = _drip_project(tmp_path)
    case = [{"name": "drip", "url": "/drip", "stream": True, "expect": {"cut": False}}]
    (project / "drip.peach-test.yaml").write_text(yaml.safe_dump(case, sort_keys=False))
    done = run_peach("test", "--timeout", "1", "--format", "json", cwd=project)
    assert done.returncode == 1, done.stdout + done.stderr
    [result] = json.loads(done.stdout)["cases"]
    messages = {f["key"]: f["message"] for f in result["failures"]}
    assert set(messages) == {"stream"}, messages  # no "cut": the server never cut it
    assert "the stream stalled" in messages["stream"], messages


@pytest.fixture(scope="module")
def tour_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, float]:
    """`peach init shop --streaming && cd shop && peach fuzz` on a terminal, timed."""
    root = tmp_path_factory.mktemp("tour")
    made = run_peach("init", "shop", "--streaming", cwd=root)
    assert made.returncode == 0, made.stdout + made.stderr
    began = time.monotonic()
    code, shown = on_a_terminal(
        "fuzz", "--seed", "1", cwd=root / "shop", env={"TERM": "xterm"}, timeout=300
    )
    return code, shown, time.monotonic() - began


@pytest.mark.slow
def test_the_streaming_tour_project_is_fuzzed_in_bounded_time(tour_run) -> None:
    """Before: 506 s with this seed (each /story with a large delay_s waited 60 s)."""
    code, shown, took = tour_run
    assert code == 0, shown
    assert "nothing found in 2 endpoints, 100 requests" in shown, shown
    assert took < 240, took  # (a loaded machine's bound: the clock is benchmarks/fuzz.py's)


@pytest.mark.slow
def test_a_terminal_shows_a_progress_line_while_an_endpoint_is_fuzzed(tour_run) -> None:
    _code, shown, _took = tour_run
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown)  # styles off; the line's own \r and erase kept
    progress = re.findall(r"\r\x1b\[K  … /story  (\d+) requests? · [\d.]+ s", text)
    assert progress, text
    assert len(set(progress)) > 1  # rewritten as requests are answered
    assert re.search(r"\r\x1b\[K  ✓ /story  50 requests", text), text  # then replaced


@pytest.mark.slow
def test_a_target_is_an_endpoint_name_or_url(tmp_path: Path) -> None:
    """Before, `peach fuzz /divide` fuzzed every endpoint, and `/nope` too."""
    import shutil

    project = Path(shutil.copytree(PROJECTS / "clean", tmp_path / "clean"))
    for target in ("/divide", "divide"):
        done = run_peach("fuzz", target, "--examples", "3", "--seed", "1", cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr
        fuzzed = re.findall(r"✓ (/\w+)", done.stderr)
        assert fuzzed == ["/divide"], done.stderr
        assert "nothing found in 1 endpoint, 3 requests" in done.stderr
    for target, says in [
        ("/nope", "error: no endpoint '/nope' in the project\n"),
        ("/divde", "no endpoint '/divde' in the project; did you mean /divide?"),
        ("divde", "no endpoint 'divde' in the project; did you mean divide?"),
    ]:
        done = run_peach("fuzz", target, cwd=project)
        assert done.returncode == 2, (target, done.stdout + done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_a_timeout_is_reported_on_a_request_that_times_out_with_a_margin(tmp_path: Path) -> None:
    """Before: shrunk to the boundary (ms=1001 or so, timeout_s 1), whose ready case passed
    under `peach test` about as often as it failed."""
    project = _project(tmp_path, "pause", "pause", PAUSE)
    code, found = _fuzz_json(project, "--examples", "30", "--seed", "2")
    assert code == 1
    [timeout] = found["findings"]
    assert timeout["kind"] == "timeout" and timeout["status"] == 504, timeout
    assert timeout["params"]["ms"] >= 1500, timeout  # timeout_s and its margin, 0.5 s
    [case] = yaml.safe_load(timeout["case"])
    cases = [{**case, "name": f"try {n}"} for n in range(5)]
    (project / "found.peach-test.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    done = run_peach("test", "--format", "json", cwd=project)
    report = json.loads(done.stdout)
    assert [c["status"] for c in report["cases"]] == [504] * 5, report
    assert not any(c["passed"] for c in report["cases"])


@pytest.mark.slow
def test_with_url_the_request_after_a_replica_died_waits_for_its_restart(
    tmp_path: Path,
) -> None:
    """Its restart takes longer than timeout_s: before, the next request met it restarting
    and was reported as a timeout of an innocent input."""
    project = _project(tmp_path, "crash", "crash", CRASH, extra=", init: warm_up")
    code, found = _fuzz_url_json(project, tmp_path, "--examples", "10", "--seed", "1")
    assert code == 1
    kinds = [(f["kind"], f["params"]) for f in found["findings"]]
    assert [k for k, _ in kinds] == ["method_error"], kinds  # the crash, and nothing else
    assert kinds[0][1]["code"] < 0


@pytest.mark.slow
def test_a_call_that_timed_out_does_not_run_on_in_its_replica(tmp_path: Path) -> None:
    """A call past timeout_s keeps running in its replica, and a busy one slowed the rest
    of the run (before: each ran its 20 s, one beside the other); now its replica is
    restarted as soon as the timeout is seen."""
    log = tmp_path / "spin.log"
    project = _project(tmp_path, "spin", "spin", SPIN.format(log=str(log)))
    code, found = _fuzz_json(project, "--examples", "10", "--seed", "1")
    assert code == 1
    assert [f["kind"] for f in found["findings"]] == ["timeout"], found
    runs: dict[str, float] = {}
    for line in log.read_text().splitlines():
        began, beat = line.split()
        runs[began] = max(runs.get(began, 0.0), float(beat) - float(began))
    assert runs and max(runs.values()) < 8, runs  # stopped soon after its timeout


def test_a_replica_spinning_on_a_starved_machine_counts_as_busy() -> None:
    """On a machine too busy to give it its share, a process spinning on a core gets under
    ``BUSY_PERCENT`` and was taken for idle, so the fuzzer left its call running (a whole
    suite's run once saw one run on for 11.7 s); a thread waiting for a core is runnable,
    an idle replica's threads sleep."""
    import os
    import subprocess
    import sys

    from peach_cli.fuzz.run import _busy

    spin = "import threading, time\ndef f():\n    while True: pass\n"
    spin += "threading.Thread(target=f, daemon=True).start()\ntime.sleep(60)"
    hog = "while True: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range((os.cpu_count() or 1) + 1)]
    starved = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", spin])
    # the idle one says when it sleeps: while it starts it is runnable too
    sleeps = "import time; print('sleeping', flush=True); time.sleep(60)"
    idle = subprocess.Popen([sys.executable, "-c", sleeps], stdout=subprocess.PIPE)
    try:
        assert idle.stdout is not None and idle.stdout.readline() == b"sleeping\n"
        assert _busy(starved.pid)
        assert not _busy(idle.pid)
    finally:
        for process in [*hogs, starved, idle]:
            process.kill()
            process.wait()
