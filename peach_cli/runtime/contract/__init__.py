"""The request contract of a PEACH endpoint (SPEC §2), written once for both hosts.

``peach dev`` (the simulator) and ``peach deploy`` (the Ray Serve application) wrap this
package and add only transport: how bytes reach a replica and come back. Everything a user
can observe lives here, one concept a module:

* ``errors`` — the stable error codes, ``ContractError``, ``InitError``, ``ResultNotJSON``;
* ``request`` — ``parse_request`` (405/413/400, query + JSON body merge, ``stream`` taken
  out before any default applies);
* ``flow`` — ``Flow``: the whole request flow over an endpoint's ``Components`` (read the
  body, parse, choose the arm, stream or call, the reply and all its headers), in steps
  every driver calls (``prepare``, ``settle``, ``finish``); each gateway is a transport;
* ``deadline`` — ``Deadline``: ``timeout_s`` of one call, one loop timer on every path,
  which the debugger relay suspends;
* ``transport`` — what both gateways share: ``read_body`` up to the limit, the ``dispatch``
  decision (stream, ``stream_required`` or plain call), the 503 message;
* ``ab`` — ``choose_arm``: which component (arm) of an A/B test answers a request, and
  ``ab_route``: how ``/_peach/routes`` shows the test;
* ``status`` — ``routes_body`` and ``health_body``: ``/_peach/routes`` and ``/_peach/health``
  in the one shape both hosts answer;
* ``answers`` — ``answer`` (the per-codops timeout, fallback on a raise, a timeout or an
  empty result, the envelope) and ``stream_required_answer``;
* ``binding`` — arguments bound to the method's signature (``model``/``init_state``
  injected and never taken from a request, query strings converted to annotations,
  ``args`` defaults);
* ``results`` — results converted to JSON, ``(items, meta)`` drift detection, chunks
  encoded, tracebacks that name notebook cells;
* ``runner`` — ``ComponentRunner``: the notebook code executed in a fresh module, ``init``
  run once, the drift re-init, the user's generator always closed.

Nothing here imports a web framework, prints, or exits: it runs inside every replica, in
every user environment, with the standard library only.

Importing the package imports none of them: a name is loaded from its module on first use
(PEP 562), so what needs one piece (``peach validate`` needs ``binding``'s ``STATE_PARAMS``)
does not pay for ``asyncio`` and the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach_cli.runtime.contract.ab import ab_route, assignment_value, bucket, choose_arm
    from peach_cli.runtime.contract.answers import (
        COMPONENT_HEADER,
        REPLICA_HEADER,
        Answer,
        Attempt,
        CallResult,
        ComponentCall,
        answer,
        error_answer,
        error_envelope,
        not_found_answer,
        ok_envelope,
        stream_required_answer,
        stream_required_message,
    )
    from peach_cli.runtime.contract.binding import (
        STATE_PARAMS,
        MethodSignature,
        bind_arguments,
        convert_body_value,
        convert_query_value,
    )
    from peach_cli.runtime.contract.deadline import Deadline
    from peach_cli.runtime.contract.errors import (
        ERROR_STATUS,
        ContractError,
        InitError,
        ResultNotJSON,
        StreamCut,
    )
    from peach_cli.runtime.contract.flow import (
        Caller,
        ClientGone,
        Components,
        Flow,
        HttpReply,
        HttpRequest,
        Opened,
        Prepared,
        answer_reply,
        stream_reply,
    )
    from peach_cli.runtime.contract.request import (
        ALLOWED_METHODS,
        MAX_BODY_BYTES,
        MAX_BODY_DEPTH,
        RequestParams,
        is_truthy,
        parse_query_string,
        parse_request,
    )
    from peach_cli.runtime.contract.results import (
        describe_exception,
        encode_chunk,
        is_empty,
        notebook_position,
        split_drift,
        to_json_value,
        user_traceback,
    )
    from peach_cli.runtime.contract.runner import (
        ComponentRunner,
        LoadedCode,
        MethodKind,
        method_kind,
    )
    from peach_cli.runtime.contract.status import (
        component_health,
        health_body,
        replica_health,
        routes_body,
    )
    from peach_cli.runtime.contract.transport import (
        STREAMING_KINDS,
        Dispatch,
        dispatch,
        read_body,
        too_large,
        unavailable_message,
    )

_HOMES = {
    "ab": ("ab_route", "assignment_value", "bucket", "choose_arm"),
    "answers": (
        "COMPONENT_HEADER",
        "REPLICA_HEADER",
        "Answer",
        "Attempt",
        "CallResult",
        "ComponentCall",
        "answer",
        "error_answer",
        "error_envelope",
        "not_found_answer",
        "ok_envelope",
        "stream_required_answer",
        "stream_required_message",
    ),
    "binding": (
        "STATE_PARAMS",
        "MethodSignature",
        "bind_arguments",
        "convert_body_value",
        "convert_query_value",
    ),
    "deadline": ("Deadline",),
    "errors": ("ERROR_STATUS", "ContractError", "InitError", "ResultNotJSON", "StreamCut"),
    "flow": (
        "Caller",
        "ClientGone",
        "Components",
        "Flow",
        "HttpReply",
        "HttpRequest",
        "Opened",
        "Prepared",
        "answer_reply",
        "stream_reply",
    ),
    "request": (
        "ALLOWED_METHODS",
        "MAX_BODY_BYTES",
        "MAX_BODY_DEPTH",
        "RequestParams",
        "is_truthy",
        "parse_query_string",
        "parse_request",
    ),
    "results": (
        "describe_exception",
        "encode_chunk",
        "is_empty",
        "notebook_position",
        "split_drift",
        "to_json_value",
        "user_traceback",
    ),
    "runner": ("ComponentRunner", "LoadedCode", "MethodKind", "method_kind"),
    "status": ("component_health", "health_body", "replica_health", "routes_body"),
    "transport": (
        "STREAMING_KINDS",
        "Dispatch",
        "dispatch",
        "read_body",
        "too_large",
        "unavailable_message",
    ),
}


def __getattr__(name: str) -> Any:
    for module, names in _HOMES.items():
        if name in names:
            return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ALLOWED_METHODS",
    "COMPONENT_HEADER",
    "ERROR_STATUS",
    "MAX_BODY_BYTES",
    "MAX_BODY_DEPTH",
    "REPLICA_HEADER",
    "STATE_PARAMS",
    "STREAMING_KINDS",
    "Answer",
    "Attempt",
    "CallResult",
    "Caller",
    "Components",
    "ComponentCall",
    "ComponentRunner",
    "ClientGone",
    "ContractError",
    "Deadline",
    "Dispatch",
    "Flow",
    "HttpRequest",
    "InitError",
    "LoadedCode",
    "MethodKind",
    "MethodSignature",
    "Opened",
    "Prepared",
    "HttpReply",
    "RequestParams",
    "ResultNotJSON",
    "StreamCut",
    "ab_route",
    "answer",
    "answer_reply",
    "assignment_value",
    "bind_arguments",
    "bucket",
    "component_health",
    "choose_arm",
    "convert_body_value",
    "convert_query_value",
    "describe_exception",
    "dispatch",
    "encode_chunk",
    "error_answer",
    "error_envelope",
    "health_body",
    "is_empty",
    "is_truthy",
    "method_kind",
    "notebook_position",
    "not_found_answer",
    "ok_envelope",
    "parse_query_string",
    "parse_request",
    "read_body",
    "replica_health",
    "routes_body",
    "split_drift",
    "stream_reply",
    "stream_required_answer",
    "stream_required_message",
    "to_json_value",
    "too_large",
    "unavailable_message",
    "user_traceback",
]
