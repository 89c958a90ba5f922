"""The REST client of a Ray cluster's dashboard: the only way peach talks to a cluster.

Every call has an explicit timeout; every transport failure and every unexpected status is
translated here, at one boundary, into a ``DeployError`` a user can act on. The token, found
as Ray's own tools find it (``auth_token``), is sent as ``Authorization: Bearer …`` and never
appears in a message.

Example::

    address, warnings = resolve_address(None)          # env PEACH_RAY_ADDRESS or the default
    with DashboardClient(address) as dashboard:
        dashboard.version()                              # {"ray_version": "2.60.0", ...}
        dashboard.serve_details()["applications"]
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from peach_cli.addresses import is_loopback
from peach_cli.errors import DeployError, UsageError

if TYPE_CHECKING:
    import httpx

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
ADDRESS_ENV = "PEACH_RAY_ADDRESS"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
APPLICATIONS_PATH = "/api/serve/applications/"

_USERINFO = re.compile(r"^((?:[a-z][a-z0-9+.-]*://)?[^:/@\s]*):[^@/\s]*@", re.IGNORECASE)
"""``user:password@`` at the start of an address, with or without a scheme."""

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
UPLOAD_TIMEOUT_S = 300.0


def resolve_address(address: str | None) -> tuple[str, list[str]]:
    """The dashboard URL to use (``--address``, env ``PEACH_RAY_ADDRESS``, the default).

    Returns the URL without a trailing slash and warnings to show (plain HTTP to a host
    that is not loopback). Raises ``UsageError`` for something that is not an http(s) URL.

    >>> resolve_address("http://127.0.0.1:8265/")
    ('http://127.0.0.1:8265', [])
    """
    text = (address or os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS).strip()
    hint = f"pass the dashboard's URL, e.g. --address {DEFAULT_ADDRESS}"
    shown = _USERINFO.sub(r"\1:***@", text)  # a message never shows a password
    if text == "auto" or text.startswith("ray://"):
        raise UsageError(
            f"'{shown}' is a Ray client address; peach talks to the dashboard REST API "
            "(port 8265 by default)",
            hint=hint,
        )
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        port_hint = ""
        if text.rsplit(":", 1)[-1] in ("6379", "10001"):
            port_hint = " (that port is the cluster's GCS/client port, not its dashboard)"
        raise UsageError(
            f"'{shown}' is not a dashboard URL{port_hint}: expected http(s)://HOST:PORT",
            hint=hint,
        )
    warnings = []
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        warnings.append(
            f"talking to {parts.hostname} over plain HTTP: requests (and any token) "
            "are not encrypted"
        )
    return text.rstrip("/"), warnings


def shown_address(address: str) -> str:
    """``address`` as it may be shown: a password written into it replaced by ``***``.

    >>> shown_address("http://me:secret@127.0.0.1:8265")
    'http://me:***@127.0.0.1:8265'
    """
    try:
        parts = urlsplit(address)
        if parts.password is None:
            return address
    except ValueError:
        return address
    userinfo, host = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:***@{host}"))


def auth_token(environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The dashboard token as Ray's tools read it, and where it came from (for hints).

    ``RAY_AUTH_TOKEN``, else the file named by ``RAY_AUTH_TOKEN_PATH``, else
    ``~/.ray/auth_token``; surrounding whitespace stripped. The token itself is never put
    in a message. Raises ``DeployError`` when ``RAY_AUTH_TOKEN_PATH`` names a file that
    cannot be read.

    >>> auth_token({"RAY_AUTH_TOKEN": " abc\\n"})
    ('abc', 'RAY_AUTH_TOKEN')
    """
    environ = os.environ if environ is None else environ
    value = (environ.get(TOKEN_ENV) or "").strip()
    if value:
        return value, TOKEN_ENV
    named = (environ.get(TOKEN_PATH_ENV) or "").strip()
    if named:
        path = Path(named).expanduser()
        try:
            return path.read_text().strip() or None, f"the file {path} ({TOKEN_PATH_ENV})"
        except OSError as error:
            raise DeployError(
                f"cannot read the token file {path} named by {TOKEN_PATH_ENV}: "
                f"{error.strerror or error}"
            ) from None
    path = Path(environ.get("HOME") or Path.home()) / ".ray" / "auth_token"
    try:
        return path.read_text().strip() or None, f"the file {path}"
    except OSError:
        return None, ""


class DashboardClient:
    """A small, synchronous client of the endpoints peach needs."""

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        self.address = address
        self.shown = shown_address(address)
        """The address as messages show it (without a password)."""
        source = "the token passed in"
        if token is None:
            token, source = auth_token()
        self._token_source = source
        self._secrets = [s for s in (token, urlsplit(address).password) if s]
        headers = {"User-Agent": "peach-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(
            base_url=address,
            headers=headers,
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            transport=transport,
            follow_redirects=False,
        )

    def __enter__(self) -> DashboardClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    # -- the endpoints -------------------------------------------------------------------

    def version(self) -> dict[str, Any]:
        """``GET /api/version``: checks that the address is a reachable Ray dashboard."""
        response = self._request("GET", "/api/version")
        data = _json(response, "/api/version", self._redact)
        if not isinstance(data, dict) or "ray_version" not in data:
            raise DeployError(f"{self.shown} answered, but it is not a Ray dashboard")
        return data

    def serve_details(self) -> dict[str, Any]:
        """``GET /api/serve/applications/``: Serve's applications, deployments, replicas."""
        data = _json(self._request("GET", APPLICATIONS_PATH), APPLICATIONS_PATH, self._redact)
        if not isinstance(data, dict):
            raise DeployError(
                f"unexpected answer from {APPLICATIONS_PATH}: {self._redact(f'{data!r:.200}')}"
            )
        return data

    def put_applications(self, config: dict[str, Any]) -> None:
        """``PUT /api/serve/applications/``: the whole declarative set of applications."""
        self._request("PUT", APPLICATIONS_PATH, json=config)

    def cluster_status(self) -> dict[str, Any]:
        """``GET /api/cluster_status``: the cluster's resource usage (used, total) by node."""
        data = _json(
            self._request("GET", "/api/cluster_status"), "/api/cluster_status", self._redact
        )
        try:
            return data["data"]["clusterStatus"]["loadMetricsReport"]
        except (KeyError, TypeError):
            raise DeployError("the dashboard did not report the cluster's resources") from None

    def package_exists(self, name: str) -> bool:
        """Whether ``gcs://<name>`` is already stored on the cluster."""
        response = self._request("GET", f"/api/packages/gcs/{name}", allow=(404,))
        return response.status_code == 200

    def upload_package(self, name: str, data: bytes) -> None:
        """``PUT /api/packages/gcs/<name>``: store a zip for ``runtime_env`` to reference."""
        import httpx

        self._request(
            "PUT",
            f"/api/packages/gcs/{name}",
            content=data,
            headers={"Content-Type": "application/zip"},
            timeout=httpx.Timeout(UPLOAD_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        )

    # -- the state and log API (`peach logs`) ---------------------------------------------

    def list_actors(self, class_name: str) -> list[dict[str, Any]]:
        """``GET /api/v0/actors``: the actors of one class, alive and dead (as GCS keeps them)."""
        return self._list_state("actors", "class_name", class_name)

    def worker_end_times(self) -> dict[tuple[str, int], int]:
        """``GET /api/v0/workers``: when each worker process that exited ended (ms since the
        epoch), by ``(node_id, pid)`` — the join key an actor's record carries. Actors
        themselves have no times; this is what orders stopped replicas newest first."""
        return {
            (str(w.get("node_id")), int(w["pid"])): int(w.get("end_time_ms") or 0)
            for w in self._list_state("workers", "is_alive", "False")
            if w.get("pid") is not None
        }

    def _list_state(self, kind: str, key: str, value: str) -> list[dict[str, Any]]:
        """``GET /api/v0/<kind>`` filtered on ``key = value``, with details (1,000 at most)."""
        path = f"/api/v0/{kind}"
        params = {
            "filter_keys": key,
            "filter_predicates": "=",
            "filter_values": value,
            "detail": "true",
            "limit": "1000",
        }
        data = _json(self._request("GET", path, params=params), path, self._redact)
        try:
            return list(data["data"]["result"]["result"])
        except (KeyError, TypeError):
            raise DeployError(f"unexpected answer from {path}: {data!r:.200}") from None

    def actor_log(self, actor_id: str, suffix: str, lines: int) -> str | None:
        """``GET /api/v0/logs/file``: the last ``lines`` of an actor's stdout or stderr
        (``suffix`` ``out`` or ``err``); None when the cluster no longer has it."""
        response = self._request(
            "GET", "/api/v0/logs/file", params=_log_params(actor_id, suffix, lines), allow=(500,)
        )
        return response.text if response.status_code == 200 else None

    def follow_actor_log(self, actor_id: str, suffix: str, lines: int) -> Iterator[str]:
        """``GET /api/v0/logs/stream``: the last ``lines`` and then each new line, until the
        actor's log ends or the caller stops iterating."""
        import httpx

        params = _log_params(actor_id, suffix, lines)
        try:
            with self._client.stream(
                "GET",
                "/api/v0/logs/stream",
                params=params,
                timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S),
            ) as response:
                if response.status_code != 200:
                    return
                yield from response.iter_lines()
        except httpx.HTTPError:
            return

    def get_text(self, path: str, *, params: dict[str, str], timeout_s: float) -> tuple[int, str]:
        """``GET path``: its status and its body (token and password masked), whatever the
        status — for an answer whose refusal is itself the message (``/worker/cpu_profile``)."""
        import httpx

        try:
            response = self._client.get(
                path, params=params, timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
            )
        except httpx.TimeoutException:
            raise DeployError(
                f"the Ray dashboard at {self.shown} did not answer GET {path} in time"
            ) from None
        except httpx.HTTPError as error:
            raise DeployError(
                f"cannot reach the Ray dashboard at {self.shown}: {self._redact(_reason(error))}"
            ) from None
        return response.status_code, self._redact(response.text)

    # -- the boundary --------------------------------------------------------------------

    def _request(
        self, method: str, path: str, *, allow: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        import httpx

        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise DeployError(
                f"the Ray dashboard at {self.shown} did not answer {method} {path} in time"
            ) from None
        except httpx.HTTPError as error:
            raise DeployError(
                f"cannot reach the Ray dashboard at {self.shown}: {self._redact(_reason(error))}",
                hint="start a cluster with `ray start --head`, or pass --address "
                f"(env {ADDRESS_ENV})",
            ) from None
        if response.status_code in (401, 403):
            has_token = "Authorization" in self._client.headers
            raise DashboardRefused(
                response.status_code,
                f"the Ray dashboard at {self.shown} refused the request ({response.status_code})",
                hint=f"check the token in {self._token_source}"
                if has_token
                else f"the cluster needs a token: set {TOKEN_ENV} (or {TOKEN_PATH_ENV}, "
                "or write it to ~/.ray/auth_token)",
            )
        if response.status_code >= 400 and response.status_code not in allow:
            detail = self._redact(response.text.strip())  # a server may echo the request
            if len(detail) > 2000:
                detail = detail[:2000] + " …"
            raise DeployError(
                f"{method} {path} failed with HTTP {response.status_code}: {detail or '(no body)'}"
            )
        return response

    def _redact(self, text: str) -> str:
        """``text`` without the token or the password, as is or in the forms a server may
        echo them back in (JSON-escaped, percent-encoded, base64)."""
        from peach_cli.boundary import mask

        text = mask(text, self._secrets)
        for secret in self._secrets:  # a short one too (``mask`` skips those)
            text = text.replace(secret, "***")
        return text


def _json(
    response: httpx.Response, path: str, redact: Callable[[str], str] = lambda text: text
) -> Any:
    try:
        return response.json()
    except ValueError:
        raise DeployError(f"{path} did not answer JSON: {redact(response.text[:200])!r}") from None


def _log_params(actor_id: str, suffix: str, lines: int) -> dict[str, str]:
    return {
        "actor_id": actor_id,
        "suffix": suffix,
        "lines": str(lines),
        "filter_ansi_code": "true",
    }


def _reason(error: Exception) -> str:
    text = str(error).strip()
    return text or type(error).__name__


class DashboardRefused(DeployError):
    """The dashboard refused the request: 401 (no token sent) or 403 (a wrong token)."""

    def __init__(self, status_code: int, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status_code = status_code
