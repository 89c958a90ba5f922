"""A lone surrogate where peach shows project text (SPEC §6, issue 49): a notebook's JSON can
hold one (``"\\udcff"``) in a docstring or a default, and code can name a function with one.
It is no character — it cannot be encoded — so it is shown as its escape: never a
traceback from `peach openapi`, never a 500 from ``/_peach/openapi.json`` or
``/_peach/profile/stop``. And a JSON body nested 30,000 deep to ``/_peach/profile/*`` is a
``400``, not a 500.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach
from conftest import DevProcess, start_peach_dev
from projectkit import write_project

from peach_cli.devtoken import TOKEN_HEADER, read_token

CONF = """codops: surrogates
endpoints:
  doc:
    url: /doc
    components:
      main: {notebook: nb.ipynb, method: doc}
  spin:
    url: /spin
    components:
      main: {notebook: nb.ipynb, method: spin}
"""
CODE = '''import time


def doc(word: str = "a\\udcffb"):
    """Answers the word \\udcff back.

    More text with \\ud800 in it.
    """
    return len(word)


def _busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


named = type(_busy)(_busy.__code__.replace(co_qualname="busy\\udcff"), globals())


def spin(seconds: float = 0.5):
    named(seconds)
    return "spun"
'''
ESCAPED = "\\udcff"
"""What is shown: a backslash, then ``udcff``."""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("surrogates")
    return write_project(root / "project", CONF, {"nb.ipynb": [CODE]})


@pytest.fixture(scope="module")
def served(project: Path) -> Iterator[DevProcess]:
    dev = start_peach_dev(project, project.parent / "peach-dev.log")
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


def test_peach_openapi_shows_a_lone_surrogate_escaped(project: Path) -> None:
    done = run_peach("openapi", str(project), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    operation = json.loads(done.stdout)["paths"]["/doc"]["get"]
    assert operation["summary"] == f"Answers the word {ESCAPED} back."
    assert operation["parameters"][0]["schema"]["default"] == f"a{ESCAPED}b"


def test_the_served_document_shows_it_escaped_too(served: DevProcess) -> None:
    answer = httpx.get(f"{served.url}/_peach/openapi.json")
    assert answer.status_code == 200, answer.text
    operation = answer.json()["paths"]["/doc"]["get"]
    assert operation["summary"] == f"Answers the word {ESCAPED} back."
    assert "Traceback" not in served.output()


def token(dev: DevProcess) -> dict[str, str]:
    return {TOKEN_HEADER: read_token(int(dev.url.rsplit(":", 1)[1])) or ""}


def test_a_frame_named_with_a_lone_surrogate_is_profiled_and_shown_escaped(
    served: DevProcess,
) -> None:
    started = httpx.post(
        f"{served.url}/_peach/profile/start",
        json={"url": "/spin", "interval_s": 0.005},
        headers=token(served),
    )
    assert started.status_code == 200, started.text
    call = threading.Thread(target=httpx.get, args=(f"{served.url}/spin",))
    call.start()
    call.join(30)
    stopped = httpx.post(
        f"{served.url}/_peach/profile/stop",
        json={"session": started.json()["result"]["session"]},
        headers=token(served),
        timeout=30,
    )
    assert stopped.status_code == 200, stopped.text
    (profile,) = stopped.json()["result"]["profiles"]
    assert f"busy{ESCAPED}" in [frame[-1] for frame in profile["frames"]]
    assert "Traceback" not in served.output()


@pytest.mark.parametrize("action", ["start", "stop", "init"])
def test_deep_json_to_a_profile_action_is_a_bad_request(served: DevProcess, action: str) -> None:
    deep = b"[" * 30_000 + b"]" * 30_000
    for body in (deep, b'{"url": ' + b"[" * 150 + b"]" * 150 + b"}"):
        answer = httpx.post(
            f"{served.url}/_peach/profile/{action}", content=body, headers=token(served)
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "bad_request"
    assert "Traceback" not in served.output()


# -- profile sessions end by themselves --------------------------------------------------------


@pytest.mark.slow  # it waits out the session's grace (GRACE_S, 10 s)
def test_a_profile_session_nobody_stops_ends_by_itself(served: DevProcess) -> None:
    """A killed `peach profile` leaves no replica sampling: the session ends at its
    duration plus a grace period (``GRACE_S``), its samples dropped."""
    from simulator.profiling import GRACE_S

    for bad in ("NaN", "Infinity", "0", "-1", '"10"'):
        body = b'{"url": "/spin", "duration_s": ' + bad.encode() + b"}"
        refused = httpx.post(
            f"{served.url}/_peach/profile/start", content=body, headers=token(served)
        )
        assert refused.status_code == 400, (bad, refused.text)
    started = httpx.post(
        f"{served.url}/_peach/profile/start",
        json={"url": "/spin", "duration_s": 0.2},
        headers=token(served),
    )
    assert started.status_code == 200, started.text
    time.sleep(0.2 + GRACE_S + 1.0)  # nothing to poll: a stop would end it itself
    stopped = httpx.post(
        f"{served.url}/_peach/profile/stop",
        json={"session": started.json()["result"]["session"]},
        headers=token(served),
    )
    assert stopped.status_code == 404, stopped.text
