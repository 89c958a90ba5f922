"""The samplers of a `peach dev` (the project's simulator, or a ``--url`` on this machine
whose health declares ``host: "dev"``): every replica of an endpoint's components samples
itself (``simulator.profiling``), started and stopped by ``/_peach/profile/start`` and
``/stop``; ``/_peach/profile/init`` instead restarts the components that have an ``init``
with the sampler on. The actions are sent by ``peach_cli.client.actions``::

    with DevSampling("http://127.0.0.1:8000", "/hot", cpu=False, duration_s=10.0) as sampled:
        ...                                    # the load runs
    sampled.profiles                           # one raw profile a replica
"""

from __future__ import annotations

from typing import Any

from peach_cli.errors import PeachError, UsageError

INTERVAL_S = 0.01
"""The sampling interval in every replica (100 a second)."""


class ProfileFailed(PeachError):
    """The host refused or failed a profile action (the message says why)."""


class DevSampling:
    """The samplers of the replicas serving ``path`` on the `peach dev` at ``origin``, for
    one run: started as the ``with`` begins (the server ends the session by itself if this
    process dies before it is stopped), stopped as it ends, whatever ended it; their raw
    profiles are then ``profiles``. With ``init`` the components that have an ``init`` are
    restarted under the sampler as the ``with`` begins, and nothing is left to stop."""

    def __init__(
        self, origin: str, path: str, *, cpu: bool, duration_s: float, init: bool = False
    ) -> None:
        self.origin = origin
        self.settings: dict[str, Any] = {"url": path, "interval_s": INTERVAL_S, "cpu": cpu}
        self.duration_s = duration_s
        self.init = init
        self.profiles: list[dict[str, Any]] = []
        self._session: str | None = None

    def __enter__(self) -> DevSampling:
        if self.init:
            self.profiles = _action(self.origin, "init", self.settings, timeout_s=600.0)["profiles"]
        else:
            settings = {**self.settings, "duration_s": self.duration_s}
            self._session = _action(self.origin, "start", settings)["session"]
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._session is not None:
            self.profiles = _action(self.origin, "stop", {"session": self._session})["profiles"]


def _action(
    origin: str, action: str, settings: dict[str, Any], timeout_s: float = 30.0
) -> dict[str, Any]:
    from peach_cli.client.actions import Unreachable, peach_post

    try:
        answer = peach_post(
            origin, f"profile/{action}", settings, tool="profile", timeout_s=timeout_s
        )
    except Unreachable as error:
        raise ProfileFailed(error.message) from None
    body = answer.body if isinstance(answer.body, dict) else {}
    refusal = body.get("error") if isinstance(body.get("error"), dict) else None
    if answer.status == 404 and refusal is None:
        raise UsageError(
            f"the server at {origin} cannot profile (an older `peach dev`?)",
            hint="restart `peach dev` with this version of peach",
        )
    if answer.status != 200 or body.get("status") != "ok":
        message = (refusal or {}).get("message") or f"HTTP {answer.status}"
        if answer.status in (400, 403, 404):
            raise UsageError(f"cannot profile: {message}")
        raise ProfileFailed(f"cannot profile: {message}")
    result = body.get("result")
    return result if isinstance(result, dict) else {}
