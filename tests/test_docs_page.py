"""``GET /_peach/docs`` (SPEC §11, issue 38): the page to try a project's endpoints, in a real
headless Chromium (Debian's ``chromium``, driven through the DevTools protocol:
``browser_support``) against a real ``peach dev``.

The page lists the endpoints of the project, a form call answers with its status, headers
and result, a stream's chunks appear one by one (the second is not yielded before the test
has seen the first on the page), text from the project stays text, and reloading the page
after a hot reload shows the new document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browser_support import Browser, Page, find_chromium
from conftest import PROJECTS, REPO, DevProcess, start_peach_dev
from projectkit import write_project
from reload_support import edit_cell
from waiting import poll

from peach_cli.checks.build import build_plan
from peach_cli.openapi import build_document

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on this machine: the docs page is tested in a real browser "
    "(apt-get install chromium, as .ci/run does)",
)

INJECTED = '<img src=x onerror="window.pwned=1">'
CONF = """codops: docs-demo
endpoints:
  greet:
    url: /greet
    components:
      main: {notebook: nb.ipynb, method: greet, args: {greeting: "<i>hi</i>"}}
  ticks:
    url: /ticks
    components:
      main: {notebook: nb.ipynb, method: ticks}
  held:
    url: /held
    components:
      main: {notebook: nb.ipynb, method: held, media_type: application/json}
  snaps:
    url: /snaps
    components:
      main: {notebook: nb.ipynb, method: snaps}
"""
GREET = f'''from typing import Literal


def greet(name: str, greeting: str, times: int = 1, loud: bool = False,
          mode: Literal["plain", "fancy"] = "plain", tags: list[str] | None = None):
    """Greet {INJECTED}someone<script>window.pwned=2</script>.

    Answers <b>bold</b> HTML, which the page shows as text.
    """
    text = f"<b>{{greeting}} {{name}}</b>" * times
    return {{"text": text.upper() if loud else text, "mode": mode, "tags": tags or []}}
'''
TICKS = '''import os
import time


def ticks(gate: str, wait_s: float = 30.0):
    """Yield a chunk, wait until the file `gate` exists, yield another."""
    yield "chunk 1\\n"
    deadline = time.monotonic() + wait_s
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    yield "<i>chunk 2</i>\\n"
'''
HELD = '''import asyncio
from pathlib import Path


async def held(marker: str):
    """Yield a chunk, then wait until the client goes; mark the close."""
    try:
        yield "chunk 1\\n"
        while True:
            await asyncio.sleep(0.01)
    finally:
        Path(marker).write_text("closed")


async def snaps(gate: str):
    """One chunk; once the file `gate` exists, an exception: the server cuts the stream."""
    yield "chunk 1\\n"
    while not Path(gate).exists():
        await asyncio.sleep(0.01)
    raise RuntimeError("snapped")
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevProcess, Path]]:
    """``peach dev`` (hot reload on) of a project with a form endpoint and a stream."""
    root = tmp_path_factory.mktemp("docs-page")
    project = write_project(root / "project", CONF, {"nb.ipynb": [GREET, TICKS, HELD]})
    dev = start_peach_dev(project, root / "peach-dev.log", reload=True)
    try:
        dev.wait_ready()
        yield dev, project
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("no chromium")
    root = tmp_path_factory.mktemp("chromium")
    with Browser.start(CHROMIUM, root / "profile", root / "chromium.log") as running:
        yield running


@pytest.fixture
def page(served: tuple[DevProcess, Path], browser: Browser) -> Iterator[Page]:
    dev, _ = served
    opened = browser.open(f"{dev.url}/_peach/docs")
    wait_listed(opened)
    yield opened
    assert opened.exceptions() == []  # the page's script never threw
    opened.command("Page.close")


def wait_listed(page: Page) -> None:
    page.wait_for("document.querySelectorAll('section.endpoint').length > 0", "the endpoints")


def text_of(page: Page, selector: str) -> str:
    """The text of the element at ``selector`` (``textContent``: laid out or not)."""
    found = page.evaluate(f"document.querySelector({json.dumps(selector)})?.textContent")
    assert found is not None, f"nothing at {selector}"
    return found


# -- over HTTP -----------------------------------------------------------------------------


def test_the_page_and_its_assets_come_from_peach_and_cannot_be_framed(served) -> None:
    dev, _ = served
    page = httpx.get(f"{dev.url}/_peach/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert not re.search(r'(src|href)="(https?:)?//', page.text)  # no other host: no CDN
    for asset, media in (("page.js", "text/javascript"), ("page.css", "text/css")):
        answer = httpx.get(f"{dev.url}/_peach/docs/{asset}")
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(media)
        assert "https://" not in answer.text and "http://" not in answer.text
    missing = httpx.get(f"{dev.url}/_peach/docs/secrets.txt")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_a_foreign_web_origin_still_cannot_call_what_the_page_calls(served) -> None:
    dev, _ = served
    foreign = {"Origin": "http://docs.attacker.example"}
    call = httpx.post(f"{dev.url}/greet", json={"name": "x"}, headers=foreign)
    assert call.status_code == 403 and call.json()["error"]["code"] == "forbidden_origin"
    document = httpx.get(f"{dev.url}/_peach/docs", headers=foreign)
    assert document.status_code == 403


# -- in a browser --------------------------------------------------------------------------


@pytest.mark.slow
@needs_chromium
def test_the_page_lists_every_endpoint_of_the_project(page: Page) -> None:
    urls = page.evaluate(
        "[...document.querySelectorAll('section.endpoint')].map(s => s.dataset.url)"
    )
    assert urls == ["/greet", "/held", "/snaps", "/ticks"]
    assert page.evaluate("document.title").startswith("docs-demo")
    assert "stream" in text_of(page, "[data-url='/ticks'] h2")
    labels = page.evaluate(
        "[...document.querySelectorAll('[data-url=\"/greet\"] label')].map(l => l.control?.name)"
    )
    assert labels == ["name", "greeting", "times", "loud", "mode", "tags"]  # every input labelled


@pytest.mark.slow
@needs_chromium
def test_a_form_call_shows_its_status_headers_and_result(page: Page) -> None:
    page.evaluate("document.querySelector('[data-url=\"/greet\"] [name=mode]').value = '1'")
    page.type_into("[data-url='/greet'] [name=name]", "Ada")
    page.type_into("[data-url='/greet'] [name=times]", "2")
    page.press_enter()  # the keyboard submits the form
    page.wait_for("document.querySelector('[data-url=\"/greet\"] .end')?.textContent", "answer")
    assert text_of(page, "[data-url='/greet'] .status").startswith("200 OK")
    headers = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('[data-url=\"/greet\"] tr')]"
        ".map(r => [r.cells[0].textContent, r.cells[1].textContent]))"
    )
    assert headers["x-peach-component"] == "main"
    assert headers["x-peach-replica"].startswith("greet/main#")
    shown = json.loads(text_of(page, "[data-url='/greet'] pre.whole"))
    greeting = "<b><i>hi</i> Ada</b>"  # the args default, as text
    assert shown == {"status": "ok", "result": {"text": greeting * 2, "mode": "fancy", "tags": []}}
    assert page.evaluate("document.querySelectorAll('.answer b, .answer i').length") == 0

    page.evaluate("document.querySelector('[data-url=\"/greet\"] [name=name]').value = ''")
    page.evaluate("document.querySelector('[data-url=\"/greet\"] button[type=submit]').click()")
    page.wait_for(
        "document.querySelector('[data-url=\"/greet\"] .status')?.dataset.status === '400'",
        "the 400 of a missing parameter",
    )
    assert "name" in text_of(page, "[data-url='/greet'] pre.whole")


@pytest.mark.slow
@needs_chromium
def test_a_stream_shows_its_chunks_one_by_one_as_they_come(page: Page, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    chunks = "[...document.querySelectorAll('[data-url=\"/ticks\"] .chunks li pre')].map(p => p.textContent)"
    page.type_into("[data-url='/ticks'] [name=gate]", str(gate))
    page.press_enter()
    assert page.wait_for(f"{chunks}.length && {chunks}", "chunk 1 on the page") == ["chunk 1\n"]
    assert text_of(page, "[data-url='/ticks'] .status").startswith("200 OK")
    assert text_of(page, "[data-url='/ticks'] .end") == ""  # the stream is still open
    assert not gate.exists()  # so chunk 2 was not yielded yet
    gate.write_text("go")
    page.wait_for(f"{chunks}.length === 2", "chunk 2 on the page")
    assert page.evaluate(chunks) == ["chunk 1\n", "<i>chunk 2</i>\n"]  # as text
    assert page.evaluate("document.querySelectorAll('.answer i').length") == 0
    page.wait_for("document.querySelector('[data-url=\"/ticks\"] .end').textContent", "the end")
    assert text_of(page, "[data-url='/ticks'] .end").startswith("Stream ended: 2 chunks")


@pytest.mark.slow
@needs_chromium
def test_stop_closes_the_stream_and_a_cut_stream_is_said_to_be_cut(
    page: Page, tmp_path: Path
) -> None:
    marker = tmp_path / "closed"
    page.type_into("[data-url='/held'] [name=marker]", str(marker))
    page.press_enter()
    page.wait_for("document.querySelectorAll('[data-url=\"/held\"] .chunks li').length", "chunk 1")
    page.evaluate("document.querySelector('[data-url=\"/held\"] button.stop').click()")
    page.wait_for("document.querySelector('[data-url=\"/held\"] .end').textContent", "the end")
    assert text_of(page, "[data-url='/held'] .end") == "Stopped after 1 chunk."
    poll(marker.exists, "the generator closed (its finally ran)", tolerate=())

    gate = tmp_path / "gate"
    page.type_into("[data-url='/snaps'] [name=gate]", str(gate))
    page.press_enter()
    page.wait_for("document.querySelectorAll('[data-url=\"/snaps\"] .chunks li').length", "chunk 1")
    gate.write_text("raise")
    page.wait_for("document.querySelector('[data-url=\"/snaps\"] .end')?.textContent", "the end")
    assert text_of(page, "[data-url='/snaps'] .end").startswith("The stream was cut after 1 chunk")
    shown = "[...document.querySelectorAll('[data-url=\"/snaps\"] .chunks pre')]"
    assert page.evaluate(f"{shown}.map(p => p.textContent)") == ["chunk 1\n"]


EXAMPLES = sorted(p.parent for p in (REPO / "examples").glob("*/peach.yaml"))
FORMS = [*EXAMPLES, PROJECTS / "semantics", PROJECTS / "streams", PROJECTS / "faults" / "fuzz"]


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("project", FORMS, ids=lambda p: p.name)
def test_the_document_of_every_example_becomes_labelled_forms(page: Page, project: Path) -> None:
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    document = build_document(plan)
    page.evaluate(f"render({json.dumps(document)})")
    urls = page.evaluate(
        "[...document.querySelectorAll('section.endpoint')].map(s => s.dataset.url)"
    )
    assert urls == list(document["paths"])
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select, textarea')]"
        ".filter(e => e.labels.length === 0).map(e => e.id)"
    )
    assert unlabelled == []


@pytest.mark.slow
@needs_chromium
def test_text_from_the_project_stays_text(page: Page) -> None:
    summary = text_of(page, "[data-url='/greet'] .summary")
    assert INJECTED in summary and "<script>window.pwned=2</script>" in summary
    assert "<b>bold</b>" in text_of(page, "[data-url='/greet'] .description")
    hint = "document.querySelector('[data-url=\"/greet\"] [name=greeting]').closest('.field')"
    assert '"<i>hi</i>"' in page.evaluate(f"{hint}.querySelector('.hint').textContent")
    assert page.evaluate("document.images.length") == 0
    assert page.evaluate("document.scripts.length") == 1  # the page's own
    assert page.evaluate("typeof window.pwned") == "undefined"


@pytest.mark.slow
@needs_chromium
def test_reloading_the_page_after_a_hot_reload_shows_the_new_document(
    served: tuple[DevProcess, Path], page: Page
) -> None:
    _, project = served
    edit_cell(project, "Yield a chunk, wait", "Yield one chunk, wait", notebook="nb.ipynb")

    def shown() -> bool:
        page.reload()
        wait_listed(page)
        return "Yield one chunk" in text_of(page, "[data-url='/ticks'] .summary")

    poll(shown, "the new docstring on the reloaded page", tolerate=())
