"""The OpenAPI 3.1 document of a project (SPEC §11), built from its plan without running code.

``build_document(plan)`` is what ``peach openapi`` prints, what ``peach dev`` serves at
``GET /_peach/openapi.json`` (``document_of`` over its routing table, so a reload shows at
once) and what ``peach deploy`` ships to the Ray gateway (with the route prefix in
``servers``)::

    document = build_document(plan)                       # servers: [{"url": "/"}]
    document = build_document(plan, route_prefix="/zz")   # servers: [{"url": "/zz"}]

One path per endpoint url with ``get`` (the parameters in the query string, as
``contract.request`` reads it: a list as repeated keys, anything nested as JSON text) and
``post`` (a JSON object body); ``stream`` for generators, their media type as the 200; the
envelope ``{result, status}``; the error envelope with the codes each status carries
(``contract.errors.ERROR_STATUS``); the ``X-Peach-Component`` and ``X-Peach-Replica`` headers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from peach_cli.openapi.contract import EndpointContract, Parameter, SourceCache, endpoint_contract
from peach_cli.printable import without_surrogates
from peach_cli.runtime.contract.errors import ERROR_STATUS
from peach_cli.runtime.plan import EndpointSpec, ProjectPlan

OPENAPI_VERSION = "3.1.0"
JSON = "application/json"
ERROR_STATUSES = (400, 404, 405, 413, 500, 503, 504)
"""The statuses an endpoint answers with the error envelope (SPEC §2 "Envelope")."""
_REASONS = {
    400: "A bad request: invalid JSON, a body that is not an object, a missing or "
    "unconvertible parameter",
    404: "No endpoint at this url",
    405: "Not GET or POST",
    413: "The body is over the limit",
    500: "The method raised and no fallback answered",
    503: "No healthy replica",
    504: "The call ran past timeout_s and no fallback answered",
}
_STREAM_REQUIRED = "stream_required"


def build_document(plan: ProjectPlan, *, route_prefix: str | None = None) -> dict[str, Any]:
    """The OpenAPI document of ``plan``; ``route_prefix`` is the server the app is under."""
    return document_of(plan.codops, plan.endpoints.values(), route_prefix=route_prefix)


def endpoint_contracts(endpoints: Iterable[EndpointSpec]) -> list[EndpointContract]:
    """Each endpoint's contract (parameters with their schemas, streams, result), by url."""
    cache = SourceCache()
    return [endpoint_contract(e, cache) for e in sorted(endpoints, key=lambda e: e.url)]


def document_of(
    codops: str, endpoints: Iterable[EndpointSpec], *, route_prefix: str | None = None
) -> dict[str, Any]:
    """The OpenAPI document of these endpoints (``build_document`` for a whole plan); a
    lone surrogate in its text is written as its escape (``\\udcff``)."""
    paths: dict[str, Any] = {}
    for contract in endpoint_contracts(endpoints):
        paths[contract.url] = {"get": _get(contract), "post": _post(contract)}
    # a lone surrogate in a docstring or a default (a notebook's JSON can hold one) is no
    # character: shown as its escape, so the document can be encoded, printed and served
    paths = without_surrogates(paths)
    prefix = (route_prefix or "").rstrip("/") or "/"
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": f"{codops} endpoints",
            "version": _fingerprint(paths),
            "description": f"The endpoints of the PEACH project {codops}, served by peach.",
        },
        "servers": [{"url": prefix}],
        "paths": paths,
        "components": _components(),
    }


def _fingerprint(paths: dict[str, Any]) -> str:
    """The document's version: a hash of its paths, which changes when the contract does."""
    import hashlib
    import json

    text = json.dumps(paths, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _operation(contract: EndpointContract, method: str) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": f"{contract.name}_{method}"}
    if contract.summary:
        operation["summary"] = contract.summary
    if contract.description:
        operation["description"] = contract.description
    operation["x-peach-endpoint"] = contract.name
    return operation


def _get(contract: EndpointContract) -> dict[str, Any]:
    operation = _operation(contract, "get")
    parameters = [_query_parameter(p) for p in contract.parameters]
    if contract.streams:
        parameters.append(_stream_parameter())
    if parameters:
        operation["parameters"] = parameters
    operation["responses"] = _responses(contract)
    return operation


def _post(contract: EndpointContract) -> dict[str, Any]:
    operation = _operation(contract, "post")
    properties: dict[str, Any] = {}
    for parameter in contract.parameters:
        properties[parameter.name] = _with_default(parameter)
    if contract.streams:
        properties["stream"] = _stream_schema()
    body: dict[str, Any] = {"type": "object", "properties": properties}
    required = [p.name for p in contract.parameters if p.required]
    if contract.streams:
        required.append("stream")
    if required:
        body["required"] = required
    operation["requestBody"] = {
        "required": bool(required),
        "content": {JSON: {"schema": body}},
    }
    operation["responses"] = _responses(contract)
    return operation


def _with_default(parameter: Parameter) -> dict[str, Any]:
    schema = dict(parameter.schema)
    if parameter.has_default:
        schema["default"] = parameter.default
    if parameter.description:
        schema["description"] = parameter.description
    return schema


def _query_parameter(parameter: Parameter) -> dict[str, Any]:
    found: dict[str, Any] = {"name": parameter.name, "in": "query"}
    if parameter.description:
        found["description"] = parameter.description
    if parameter.required:
        found["required"] = True
    schema = _with_default(parameter)
    schema.pop("description", None)
    if parameter.query == "json":
        found["content"] = {JSON: {"schema": schema}}
    else:
        found["schema"] = schema
        if _is_array(parameter.schema):
            found["style"] = "form"
            found["explode"] = True
    return found


def _is_array(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    options = [o.get("type") for o in schema.get("anyOf", [])]
    return kinds == "array" or (isinstance(kinds, list) and "array" in kinds) or "array" in options


def _stream_schema() -> dict[str, Any]:
    return {
        "type": "boolean",
        "const": True,
        "description": "the method is a generator: send stream=true to get its chunks",
    }


def _stream_parameter() -> dict[str, Any]:
    schema = _stream_schema()
    description = schema.pop("description")
    return {
        "name": "stream",
        "in": "query",
        "required": True,
        "description": description,
        "schema": schema,
    }


def _responses(contract: EndpointContract) -> dict[str, Any]:
    # here, not at the top: `peach validate` imports this package and never needs asyncio
    from peach_cli.runtime.contract.answers import COMPONENT_HEADER, REPLICA_HEADER

    ok: dict[str, Any] = {
        "description": "The answer",
        "headers": {
            COMPONENT_HEADER: {"$ref": "#/components/headers/Component"},
            REPLICA_HEADER: {"$ref": "#/components/headers/Replica"},
        },
    }
    if contract.streams:
        ok["description"] = "The stream: each chunk as the method yields it"
        ok["content"] = {
            media_type: {"schema": {"type": "string"}} for media_type in contract.media_types
        }
    else:
        ok["content"] = {JSON: {"schema": _envelope(contract.result)}}
    responses: dict[str, Any] = {"200": ok}
    for status in ERROR_STATUSES:
        name = "BadRequestStream" if status == 400 and contract.streams else f"Error{status}"
        responses[str(status)] = {"$ref": f"#/components/responses/{name}"}
    return responses


def _envelope(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["result", "status"],
        "properties": {"result": result, "status": {"const": "ok"}},
    }


def _error_codes(status: int, *, streams: bool = False) -> list[str]:
    codes = [c for c, s in ERROR_STATUS.items() if s == status and c in _PUBLIC]
    if status == 400 and not streams:
        codes.remove(_STREAM_REQUIRED)
    return codes


_PUBLIC = (
    "bad_request",
    "stream_required",
    "not_found",
    "method_not_allowed",
    "payload_too_large",
    "method_error",
    "unavailable",
    "timeout",
)
"""The envelope's codes of SPEC §2 (``ERROR_STATUS`` also holds the dev server's own 403s)."""


def _error_response(status: int, codes: list[str]) -> dict[str, Any]:
    from peach_cli.runtime.contract.answers import COMPONENT_HEADER, REPLICA_HEADER

    header = {"schema": {"type": "string"}}
    return {
        "description": _REASONS[status],
        "headers": {
            COMPONENT_HEADER: {
                **header,
                "description": "the component that answered, when one did",
            },
            REPLICA_HEADER: {**header, "description": "the replica that answered, when one did"},
        },
        "content": {
            JSON: {
                "schema": {
                    "type": "object",
                    "required": ["status", "error"],
                    "properties": {
                        "status": {"const": "error"},
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string", "enum": codes},
                                "message": {"type": "string"},
                            },
                        },
                    },
                }
            }
        },
    }


def _components() -> dict[str, Any]:
    responses = {f"Error{s}": _error_response(s, _error_codes(s)) for s in ERROR_STATUSES}
    responses["BadRequestStream"] = _error_response(400, _error_codes(400, streams=True))
    return {
        "headers": {
            "Component": {
                "description": "the component that answered (main, fallback, an A/B arm)",
                "required": True,
                "schema": {"type": "string"},
            },
            "Replica": {
                "description": "a stable id of the replica that answered",
                "required": True,
                "schema": {"type": "string"},
            },
        },
        "responses": responses,
    }
