"""The one client of a host's ``/_peach/*`` actions (a `peach dev`'s or a deployed app's):
what the host declares it is, the OpenAPI document it serves, and the actions `peach
profile` starts and stops its samplers with::

    declared_host("http://127.0.0.1:8000", tool="profile")          # "dev"
    openapi_document("http://127.0.0.1:8000", tool="fuzz", timeout_s=60)
    peach_post(base, "profile/start", {...}, tool="profile", timeout_s=30)

A ``POST`` to a loopback host carries the dev token (``peach_cli.devtoken``); every request
names the tool that sends it (``x-peach-tool``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from peach_cli.errors import PeachError, UsageError

if TYPE_CHECKING:
    from peach_cli.runtime.contract.status import HostKind

HEALTH_TIMEOUT_S = 5.0
"""How long a host may take to say what it is."""


class Unreachable(PeachError):
    """Nothing answered (the message names the error: ``ConnectError``, ``ReadTimeout``)."""


@dataclass(frozen=True)
class Answer:
    """A host's answer to a ``/_peach/*`` request: its status and its JSON body (None when
    the body is no JSON)."""

    status: int
    body: Any

    def field(self, name: str) -> Any:
        """The body's ``name``, None when the body is no object or lacks it."""
        return self.body.get(name) if isinstance(self.body, dict) else None


def peach_get(base: str, action: str, *, tool: str, timeout_s: float) -> Answer:
    """``GET base/_peach/ACTION`` (``Unreachable`` when nothing answers)."""
    return _peach_request("GET", base, action, None, tool, timeout_s)


def peach_post(
    base: str, action: str, settings: dict[str, Any], *, tool: str, timeout_s: float
) -> Answer:
    """``POST base/_peach/ACTION`` with ``settings`` as JSON, carrying the dev token of a
    loopback host (``Unreachable`` when nothing answers)."""
    return _peach_request("POST", base, action, settings, tool, timeout_s)


def _peach_request(
    method: str,
    base: str,
    action: str,
    settings: dict[str, Any] | None,
    tool: str,
    timeout_s: float,
) -> Answer:
    import httpx

    from peach_cli.devtoken import token_headers
    from peach_cli.internal import INTERNAL_PREFIX, TOOL_HEADER

    url = f"{base.rstrip('/')}{INTERNAL_PREFIX}/{action}"
    headers = {TOOL_HEADER: tool, **token_headers(base)}
    try:
        answer = httpx.request(
            method, url, json=settings, headers=headers, timeout=timeout_s, follow_redirects=False
        )
    except httpx.HTTPError as error:
        raise Unreachable(f"{url} failed: {type(error).__name__}") from None
    try:
        body = answer.json()
    except ValueError:
        body = None
    return Answer(answer.status_code, body)


def openapi_document(base: str, *, tool: str, timeout_s: float) -> dict[str, Any] | None:
    """The OpenAPI document the host at ``base`` serves, None when it serves none."""
    try:
        answer = peach_get(base, "openapi.json", tool=tool, timeout_s=timeout_s)
    except Unreachable:
        return None
    document = answer.body if answer.status == 200 else None
    return document if isinstance(document, dict) and "paths" in document else None


def declared_host(base: str, *, tool: str) -> HostKind:
    """What the host at ``base`` is, as its ``/_peach/health`` declares it: ``dev`` (a `peach
    dev`, its replicas on this machine) or ``ray`` (a deployed app). ``UsageError`` when
    nothing answers, or what answers declares neither."""
    from peach_cli.runtime.contract.status import HOST_KINDS

    try:
        answer = peach_get(base, "health", tool=tool, timeout_s=HEALTH_TIMEOUT_S)
    except Unreachable as error:
        reason = error.message.rsplit(": ", 1)[-1]
        raise UsageError(
            f"nothing answers at {base} ({reason})",
            hint=f"start `peach dev` first, or leave out --url to let peach {tool} start it",
        ) from None
    kind = answer.field("host")
    if answer.status in (200, 503) and kind in HOST_KINDS:
        return kind  # type: ignore[no-any-return]
    if answer.status in (200, 503) and isinstance(answer.field("components"), list):
        raise UsageError(
            f"{base} does not say which host it is (a `peach dev` or an app deployed by an "
            "older peach?)",
            hint="restart `peach dev`, or deploy again, with this version of peach",
        )
    raise UsageError(
        f"peach {tool} cannot work with {base}: it is neither a `peach dev` nor a deployed "
        "peach app (it does not answer /_peach/health as they do)",
        hint="give --url of a running `peach dev` or of a deployed app's proxy",
    )
