"""The contract's error codes and exceptions (SPEC §2 "Envelope").

ContractError       a request the contract refuses: ``code`` and its HTTP ``status``
InitError           a component's code or ``init`` failed: the replica never serves
ResultNotJSON       a method's result cannot be sent as JSON (a ``method_error``)
"""

from __future__ import annotations

ERROR_STATUS: dict[str, int] = {
    "bad_request": 400,
    "stream_required": 400,
    "forbidden": 403,  # the dev server's own: /_peach/* from a peer not on loopback
    "forbidden_host": 403,  # a Host the dev server does not answer (SPEC §6)
    "forbidden_origin": 403,  # a web origin the dev server does not answer (SPEC §6)
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,  # the dev server's own: a head or body that stopped arriving
    "payload_too_large": 413,
    "headers_too_large": 431,  # the dev server's own: a request head over its limit
    "method_error": 500,
    "unavailable": 503,
    "timeout": 504,
}


class ContractError(Exception):
    """A request the contract refuses, with its stable error code and HTTP status."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]


class InitError(Exception):
    """The component's code or its ``init`` failed: the replica cannot become healthy."""

    def __init__(
        self, message: str, details: str = "", *, cause: BaseException | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        """The user's traceback, for the server log."""
        self.cause = cause
        """What the user's code raised, if it raised (not chained: logs stay short)."""


class ResultNotJSON(TypeError):
    """A method returned something that cannot be sent as JSON."""


class StreamCut(Exception):
    """A stream failed after it began (the user's generator raised, its replica died).

    Hosts cut the HTTP response — it ends without its terminating chunk, as Ray Serve's
    proxy does — so that a client can tell a failed stream from a finished one. The
    message is the cause (``RuntimeError: text``); the user's traceback is in the log.
    """
