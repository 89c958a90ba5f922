"""The ``@endpoint`` decorator that turns a notebook function into a PEACH endpoint.

``peach validate`` reads these calls statically (never running them); replicas run the
notebook, and the decorator only records its arguments on the function, which is returned
unchanged so the notebook keeps working when run by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

ENDPOINT_ATTRIBUTE = "__peach_endpoint__"


@dataclass(frozen=True)
class EndpointOptions:
    """What ``@endpoint(...)`` said about a function."""

    url: str
    init_fn: Callable[[], Any] | None = None
    args: dict[str, Any] = field(default_factory=dict)
    replicas: int = 1
    memory: str | int | None = None
    cpus: float | None = None
    media_type: str | None = None


def endpoint(
    url: str,
    *,
    init_fn: Callable[[], Any] | None = None,
    args: dict[str, Any] | None = None,
    replicas: int = 1,
    memory: str | int | None = None,
    cpus: float | None = None,
    media_type: str | None = None,
) -> Callable[[F], F]:
    """Declare a function as a PEACH endpoint served at ``url``.

    The function's name is the endpoint's name; ``init_fn``'s result reaches it as
    ``init_state``.

    Example:
        >>> @endpoint("/similar", init_fn=lambda: {"a": ["b"]}, args={"size": 5})
        ... def similar(init_state, item_id: str, size: int = 5):
        ...     return init_state.get(item_id, [])[:size]
        >>> similar({"a": ["b"]}, "a")
        ['b']
    """

    def mark(function: F) -> F:
        options = EndpointOptions(
            url=url,
            init_fn=init_fn,
            args=dict(args or {}),
            replicas=replicas,
            memory=memory,
            cpus=cpus,
            media_type=media_type,
        )
        setattr(function, ENDPOINT_ATTRIBUTE, options)
        return function

    return mark
