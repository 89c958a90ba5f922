"""One request's log line, as `peach dev` prints it and the deployed gateway logs it.

``GET /facts 200 main facts/main#1 2.1 ms``: method, path, status, the component that
answered (its A/B arm when it was rerouted), its replica, the latency, ``stream`` for a
stream, and the error of an error answer. The caller escapes what came from the client
(the output boundary's ``shown``) before it is put in the line.
"""

from __future__ import annotations


def format_latency(seconds: float) -> str:
    """``0.8 ms`` / ``12 ms`` / ``1.50 s``.

    >>> format_latency(0.0008), format_latency(0.012), format_latency(1.5)
    ('0.8 ms', '12 ms', '1.50 s')
    """
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def request_line(
    method: str,
    path: str,
    status: int,
    component: str | None,
    replica: str | None,
    latency_s: float,
    *,
    rerouted_to: str | None = None,
    stream: bool = False,
    error: str | None = None,
) -> str:
    """The line, plain text.

    >>> request_line("GET", "/facts", 200, "main", "facts/main#1", 0.0021)
    'GET /facts 200 main facts/main#1 2.1 ms'
    >>> request_line("GET", "/x", 503, None, None, 0.5, error="unavailable: no replica")
    'GET /x 503 500 ms  unavailable: no replica'
    """
    text = f"{method} {path} {status}"
    if component:
        text += f" {component}"
    if rerouted_to:
        text += f" (arm {rerouted_to})"
    if replica:
        text += f" {replica}"
    text += f" {format_latency(latency_s)}"
    if stream:
        text += " stream"
    if error:
        text += f"  {error}"
    return text
