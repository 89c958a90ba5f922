"""``GET /_peach/docs``: the page to try a project's endpoints in a browser (SPEC §11).

A small page of peach's own — one HTML file, one script, one style sheet, all in this
package and served by ``peach dev`` itself (it works offline; nothing comes from a CDN). The
script reads ``/_peach/openapi.json`` when the page loads (so reloading the page after a hot
reload shows the new document), builds a form per endpoint from its parameters' JSON
Schemas, sends it to the endpoint, and shows the answer's status and headers and its body —
a stream chunk by chunk as the body's reader gets them. Why not Swagger UI or Scalar:
docs/api-contract.md ("The docs page").

Every text that comes from the project (names, docstrings, defaults, answers) is put in the
page as text (``textContent``), never parsed as HTML; the ``Content-Security-Policy`` of
these answers refuses inline scripts and any other origin besides, and forbids framing the
page (a foreign page cannot overlay it to steer clicks on Send).
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from peach_cli.internal import DOCS_PATH
from peach_cli.runtime import contract

PAGE = "page.html"
ASSETS = {"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8"}
"""The files the page loads, under ``/_peach/docs/``, with their media types."""
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class DocsPage:
    """The page and its assets, read from this package on first use."""

    def __init__(self) -> None:
        self._files: dict[str, bytes] = {}

    def routes(self) -> list[Route]:
        """``GET /_peach/docs`` and ``GET /_peach/docs/<asset>``."""
        return [
            Route(DOCS_PATH, self._page, methods=["GET"]),
            Route(DOCS_PATH + "/{asset}", self._asset, methods=["GET"]),
        ]

    def read(self, name: str) -> bytes:
        """The bytes of one of the page's files."""
        data = self._files.get(name)
        if data is None:
            data = resources.files(__package__).joinpath(name).read_bytes()
            self._files[name] = data
        return data

    async def _page(self, request: Request) -> Response:
        return Response(self.read(PAGE), media_type="text/html; charset=utf-8", headers=HEADERS)

    async def _asset(self, request: Request) -> Response:
        name = request.path_params["asset"]
        media_type = ASSETS.get(name)
        if media_type is None:
            envelope = contract.error_envelope("not_found", f"the docs page has no file {name!r}")
            return JSONResponse(envelope, status_code=404, headers=HEADERS)
        return Response(self.read(name), media_type=media_type, headers=HEADERS)
