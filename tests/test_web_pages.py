"""What a web page can make `peach dev` do (SPEC §6, issue 49): Fetch Metadata and the
session token.

A page of another origin sends no ``Origin`` with an ``<img>``, a ``<script>``, a no-cors
``fetch`` or a navigation, but it does send ``Sec-Fetch-Site``: such a request is
``403 forbidden_origin`` before any user code runs, on the fast lane and on the general
path, unless its ``Origin`` (or its ``Referer``'s) is allowed. A script in a page of the
same origin (an endpoint that answers HTML) passes those checks, but it cannot read the
session token ``peach dev`` wrote to a private file, so it cannot start a profile.
Checked over HTTP and in a real headless Chromium (``browser_support``).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from browser_support import Browser, find_chromium
from conftest import DevProcess, start_peach_dev
from projectkit import write_project

from peach_cli.devtoken import TOKEN_HEADER, read_token, token_file

CHROMIUM = find_chromium()
ALLOWED = "http://app.test:3000"
ATTACKER_NAME = "attacker.test"

CONF = """codops: web-pages
endpoints:
  spawn:
    url: /spawn
    components:
      main: {{notebook: nb.ipynb, method: spawn, args: {{marks: "{marks}"}}}}
  page:
    url: /page
    components:
      main: {{notebook: nb.ipynb, method: page, media_type: "text/html; charset=utf-8"}}
"""
CODE = '''import os


def spawn(marks: str, tag: str = ""):
    """Leave a mark: the test sees whether the method ran."""
    with open(marks, "a") as out:
        out.write(tag + "\\n")
    return tag


async def page():
    """An HTML page whose script tries the state-changing /_peach/ actions."""
    yield """<!doctype html><title>page</title><script>
    async function attempt(path, body) {
      const answer = await fetch(path, {method: "POST", body: JSON.stringify(body),
                                        headers: {"content-type": "application/json"}});
      return [answer.status, await answer.text()];
    }
    Promise.all([
      attempt("/_peach/profile/start", {url: "/spawn"}),
      attempt("/_peach/reinit/spawn/main", {}),
      fetch("/_peach/openapi.json").then(r => r.status),
    ]).then(done => { window.answers = done; }, e => { window.answers = String(e); });
    </script>"""
'''


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A runtime folder of this test's own (``XDG_RUNTIME_DIR``), for peach dev and us."""
    folder = tmp_path_factory.mktemp("runtime")
    folder.chmod(0o700)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_RUNTIME_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, runtime: Path
) -> Iterator[tuple[DevProcess, Path]]:
    root = tmp_path_factory.mktemp("web-pages")
    marks = root / "marks.txt"
    marks.touch()
    project = write_project(root / "project", CONF.format(marks=marks), {"nb.ipynb": [CODE]})
    dev = start_peach_dev(project, root / "peach-dev.log", "--allow-origin", ALLOWED)
    try:
        dev.wait_ready()
        yield dev, marks
    finally:
        dev.stop()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# -- Fetch Metadata ---------------------------------------------------------------------------

# The fast lane takes a plain GET; an escape in the path sends the same call the general way.
PATHS = {"fast lane": "/spawn", "general path": "/sp%61wn"}


@pytest.mark.parametrize("site", ["cross-site", "same-site", "Cross-Site"])
@pytest.mark.parametrize("path", list(PATHS.values()), ids=list(PATHS))
def test_a_page_of_another_origin_cannot_run_a_method(served, site: str, path: str) -> None:
    dev, marks = served
    tag = f"{site}-{path.strip('/').replace('%', '')}"
    cases = [
        {"Sec-Fetch-Site": site},  # an <img> with no-referrer
        {"Sec-Fetch-Site": site, "Referer": "http://attacker.example/page.html"},
        {"Sec-Fetch-Site": site, "Referer": "not a url"},
    ]
    for headers in cases:
        answer = httpx.get(f"{dev.url}{path}", params={"tag": tag}, headers=headers)
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "forbidden_origin"
    dev.wait_for_output(r"GET /sp(a|%61)wn 403 .*forbidden_origin")
    assert tag not in marks.read_text()  # the method did not run


@pytest.mark.parametrize("path", list(PATHS.values()), ids=list(PATHS))
@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "none"},
        {},
        {"Sec-Fetch-Site": "cross-site", "Referer": f"{ALLOWED}/app/page"},
        {"Sec-Fetch-Site": "same-site", "Referer": "http://localhost:5173/"},
        {"Sec-Fetch-Site": "cross-site", "Origin": ALLOWED},
    ],
    ids=["same-origin", "none", "absent", "allowed-referer", "loopback-referer", "origin"],
)
def test_requests_of_this_origin_typed_urls_and_allowed_pages_are_answered(
    served, path: str, headers: dict[str, str]
) -> None:
    dev, marks = served
    tag = f"ok-{len(marks.read_text())}"
    answer = httpx.get(f"{dev.url}{path}", params={"tag": tag}, headers=headers)
    assert answer.status_code == 200, answer.text
    assert tag in marks.read_text()


def test_fetch_metadata_guards_the_internal_routes_too(served) -> None:
    dev, _ = served
    answer = httpx.get(f"{dev.url}/_peach/openapi.json", headers={"Sec-Fetch-Site": "cross-site"})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden_origin"


# -- the session token ----------------------------------------------------------------------


def test_the_token_is_in_a_private_file_of_the_runtime_folder_named_by_port(
    served, runtime: Path
) -> None:
    dev, _ = served
    path = token_file(port_of(dev.url))
    assert path.parent.parent == runtime and path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_token(port_of(dev.url)) and len(read_token(port_of(dev.url)) or "") >= 32


def test_state_changing_actions_need_the_token_read_only_routes_do_not(served) -> None:
    dev, _ = served
    for action, body in [
        ("/_peach/profile/start", {"url": "/spawn"}),
        ("/_peach/reinit/spawn", {}),
    ]:
        for headers in ({}, {TOKEN_HEADER: "guessed"}):
            refused = httpx.post(f"{dev.url}{action}", json=body, headers=headers)
            assert refused.status_code == 403, refused.text
            assert TOKEN_HEADER in refused.json()["error"]["message"]
    for route in ("openapi.json", "routes", "health", "metrics", "docs"):
        assert httpx.get(f"{dev.url}/_peach/{route}").status_code == 200
    token = {TOKEN_HEADER: read_token(port_of(dev.url)) or ""}
    started = httpx.post(f"{dev.url}/_peach/profile/start", json={"url": "/spawn"}, headers=token)
    assert started.status_code == 200, started.text
    session = started.json()["result"]["session"]
    stopped = httpx.post(f"{dev.url}/_peach/profile/stop", json={"session": session}, headers=token)
    assert stopped.status_code == 200, stopped.text


# -- in a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("no chromium (apt-get install chromium, as .ci/run does)")
    root = tmp_path_factory.mktemp("chromium")
    rules = f"--host-resolver-rules=MAP {ATTACKER_NAME} 127.0.0.1"
    with Browser.start(CHROMIUM, root / "profile", root / "chromium.log", rules) as running:
        yield running


@pytest.fixture(scope="module")
def attacker() -> Iterator[tuple[int, dict[str, str]]]:
    """Another web server on loopback, serving the attacker's pages (``pages[path]``)."""
    pages: dict[str, str] = {}

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            body = pages.get(self.path.split("?")[0], "").encode()
            self.send_response(200 if body else 404)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], pages
    finally:
        server.shutdown()
        server.server_close()


HOSTILE = """<!doctype html><title>hostile</title>
<img src="{target}/spawn?tag={tag}-img" {policy}>
<img src="{target}/sp%61wn?tag={tag}-img-general" {policy}>
<script>
fetch("{target}/spawn?tag={tag}-fetch", {{mode: "no-cors"{fetch_policy}}})
  .then(() => {{ window.fetched = "answered"; }}, () => {{ window.fetched = "failed"; }});
</script>"""


@pytest.mark.parametrize(
    "origin, referrer",
    [("127.0.0.1", False), (ATTACKER_NAME, True)],
    ids=["another-loopback-origin-no-referrer", "another-site-with-referrer"],
)
def test_in_a_browser_a_page_of_another_origin_cannot_run_a_method(
    served, browser: Browser, attacker, origin: str, referrer: bool
) -> None:
    dev, marks = served
    port, pages = attacker
    tag = f"browser-{origin.replace('.', '-')}"
    pages[f"/{tag}.html"] = HOSTILE.format(
        target=dev.url,
        tag=tag,
        policy="" if referrer else 'referrerpolicy="no-referrer"',
        fetch_policy="" if referrer else ', referrerPolicy: "no-referrer"',
    )
    dev.mark()
    page = browser.open(f"http://{origin}:{port}/{tag}.html")
    try:
        page.wait_for("window.fetched", "the no-cors fetch to end")
        # the two images and the fetch reached the server, and were refused
        dev.wait_for_output(r"(?s)(GET /sp(a|%61)wn 403 .*forbidden_origin.*){3}")
    finally:
        page.command("Page.close")
    assert tag not in marks.read_text()  # the method never ran


def test_in_a_browser_a_script_of_the_same_origin_cannot_start_a_profile(
    served, browser: Browser
) -> None:
    dev, _ = served
    page = browser.open(f"{dev.url}/page?stream=true")
    try:
        answers = page.wait_for("window.answers", "the page's script to try the actions")
    finally:
        page.command("Page.close")
    assert isinstance(answers, list), answers
    (profile_status, profile_text), (reinit_status, reinit_text), openapi_status = answers
    assert profile_status == 403 and TOKEN_HEADER in profile_text, profile_text
    assert "session" not in json.loads(profile_text).get("result", {})
    assert reinit_status == 403 and TOKEN_HEADER in reinit_text, reinit_text
    assert openapi_status == 200  # read-only routes stay readable, as the docs page needs
    assert "re-ran init" not in dev.output()
    assert os.path.exists(token_file(port_of(dev.url)))  # the page could not reach it
