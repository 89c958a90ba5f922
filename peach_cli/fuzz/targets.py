"""What `peach fuzz` sends requests to: each endpoint's url and parameters, read from the
project's OpenAPI document (SPEC §11) — the one place parameters get their JSON Schemas.

    targets = targets_of(document)                  # every endpoint, in the document's order
    targets = select(targets, ["divide", "/greet"])  # or the named ones (name or url)

Nothing here imports Hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from peach_cli.errors import UsageError
from peach_cli.internal import is_internal
from peach_cli.printable import printable

STREAM_PARAM = "stream"
"""Taken by the gateway, never passed to a method: not fuzzed (a target streams or not)."""


@dataclass(frozen=True)
class Parameter:
    """One parameter of an endpoint: its name, its JSON Schema, whether a request needs it."""

    name: str
    schema: dict[str, Any]
    required: bool = False


@dataclass(frozen=True)
class Target:
    """One endpoint to fuzz."""

    endpoint: str
    url: str
    parameters: tuple[Parameter, ...] = ()
    streams: bool = False
    """Its method is a generator: every request asks for the stream."""
    definitions: dict[str, Any] = field(default_factory=dict, compare=False)
    """The document's ``components.schemas``, which a ``$ref`` points into."""


def _endpoint_name(url: str, operation: dict[str, Any]) -> str:
    extension = operation.get("x-peach-endpoint")
    if isinstance(extension, str) and extension:
        return extension
    operation_id = operation.get("operationId")
    if isinstance(operation_id, str) and operation_id:
        for suffix in ("_get", "_post", "__get", "__post"):
            if operation_id.endswith(suffix):
                return operation_id[: -len(suffix)]
        return operation_id
    return url.strip("/") or url


def _body_schema(operation: dict[str, Any]) -> dict[str, Any]:
    content = (operation.get("requestBody") or {}).get("content") or {}
    media: Any = content.get("application/json") or next(iter(content.values()), {})
    schema = media.get("schema") if isinstance(media, dict) else None
    return schema if isinstance(schema, dict) else {}


def _streams(get: dict[str, Any] | None, body: dict[str, Any]) -> bool:
    """Whether requests must ask for the stream: ``stream`` is a required parameter."""
    if STREAM_PARAM in (body.get("required") or ()):
        return True
    for parameter in (get or {}).get("parameters") or ():
        if isinstance(parameter, dict) and parameter.get("name") == STREAM_PARAM:
            return bool(parameter.get("required"))
    return False


def _query_schema(parameter: dict[str, Any]) -> dict[str, Any]:
    schema = parameter.get("schema")
    if not isinstance(schema, dict):  # ``content``: the parameter is JSON text
        content = parameter.get("content") or {}
        media: Any = next(iter(content.values()), {}) if isinstance(content, dict) else {}
        schema = media.get("schema") if isinstance(media, dict) else None
    return schema if isinstance(schema, dict) else {}


def target_of(url: str, item: dict[str, Any], definitions: dict[str, Any]) -> Target | None:
    """The target of one path item: parameters from the POST body's schema (every
    parameter a JSON body can carry), else from the GET query parameters."""
    post = item.get("post") if isinstance(item.get("post"), dict) else None
    get = item.get("get") if isinstance(item.get("get"), dict) else None
    operation = post or get
    if operation is None:
        return None
    parameters: dict[str, Parameter] = {}
    body = _body_schema(post) if post else {}
    required = set(body.get("required") or ())
    for name, schema in (body.get("properties") or {}).items():
        if name != STREAM_PARAM:
            parameters[name] = Parameter(
                name, schema if isinstance(schema, dict) else {}, name in required
            )
    for parameter in (get or {}).get("parameters") or ():
        if not isinstance(parameter, dict) or parameter.get("in") != "query":
            continue
        name = parameter.get("name")
        if isinstance(name, str) and name != STREAM_PARAM and name not in parameters:
            parameters[name] = Parameter(
                name, _query_schema(parameter), bool(parameter.get("required"))
            )
    return Target(
        _endpoint_name(url, operation),
        url,
        tuple(parameters.values()),
        _streams(get, body),
        definitions,
    )


def targets_of(document: dict[str, Any]) -> list[Target]:
    """Every endpoint of an OpenAPI document, in its order; ``UsageError`` for a path that
    names a scheme, a host or a port (requests go only to the base, as replay's lines)."""
    definitions = (document.get("components") or {}).get("schemas") or {}
    found = []
    for url, item in (document.get("paths") or {}).items():
        _check_path(url)
        if isinstance(item, dict) and not is_internal(url):
            target = target_of(url, item, definitions)
            if target is not None:
                found.append(target)
    return found


def _names(target: Target) -> tuple[str, ...]:
    """What names a target on the command line: its endpoint name, its url (``/greet``)."""
    return (target.endpoint, target.url)


def _matches(target: Target, name: str) -> bool:
    """``name`` is the target's endpoint name or its url (a trailing ``/`` aside)."""
    if name == target.endpoint:
        return True
    url = name.rstrip("/") or "/"
    return url.startswith("/") and url == (target.url.rstrip("/") or "/")


def _check_path(url: object) -> None:
    """Refuse a document's path that is not a path on the base (``http://other/x``,
    ``//other/x``): fuzz sends only to the base's host."""
    if isinstance(url, str) and url.startswith("/") and not url.startswith("//"):
        return
    raise UsageError(
        f"the OpenAPI document's path '{printable(str(url))}' names a host: fuzz sends "
        "requests only to the base it was given (nothing was sent)",
        hint="a path of the document is like /greet; the host is the one of --url",
    )


def select(targets: list[Target], wanted: Sequence[str]) -> list[Target]:
    """The targets named (by endpoint name, ``greet``, or url, ``/greet``), in the order
    given; ``UsageError`` naming what matches nothing, with the closest name or url.

    >>> found = select([Target("greet", "/greet"), Target("story", "/v1/story")], ["/v1/story"])
    >>> [t.endpoint for t in found]
    ['story']
    """
    if not wanted:
        return targets
    chosen: list[Target] = []
    for name in wanted:
        match = [t for t in targets if _matches(t, name)]
        if not match:
            raise _unknown(name, targets)
        chosen += [t for t in match if t not in chosen]
    return chosen


def _unknown(name: str, targets: list[Target]) -> UsageError:
    """The usage error of a TARGET that names no endpoint: ``did you mean`` the closest."""
    import difflib

    choices = [n for t in targets for n in _names(t)]
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if not close and not name.startswith("/"):  # a url given without its slash
        close = difflib.get_close_matches("/" + name, choices, n=1, cutoff=0.6)
    guess = f"; did you mean {close[0]}?" if close else ""
    known = ", ".join(f"{t.url} ({t.endpoint})" for t in targets) or "none"
    return UsageError(f"no endpoint {name!r} in the project{guess}", hint=f"endpoints: {known}")


def request_to(
    target: Target, method: str, params: dict[str, Any], base: str, read_timeout_s: float
) -> Any:
    """The ``AskRequest`` of a generated request: a SPEC §8 case's, marked ``x-peach-tool:
    fuzz`` (a finding's ready case sends exactly it)."""
    from peach_cli.testing.cases import Case
    from peach_cli.testing.run import request_for

    case = Case.model_construct(
        name="fuzz",
        url=target.url,
        method=method,
        params=params,
        stream=target.streams,
    )
    return request_for(case, base, read_timeout_s, tool="fuzz")
