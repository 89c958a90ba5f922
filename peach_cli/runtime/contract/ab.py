"""A/B tests: which component (arm) answers a request, decided once for both hosts.

An endpoint with ``ab: {by: user, split: {main: 80, diverse: 20}}`` splits its requests by
the value of ``user_id`` (``client_id``, ``session_id``) — from the query string or the JSON
body, the body winning as for every parameter. The value is hashed with the endpoint's name
(SPEC §2, a decision, so that any tool can reproduce it)::

    bucket = int.from_bytes(sha256(f"{endpoint_name}:{value}".encode()).digest()[:8], "big") % 100

and the arms own consecutive bucket ranges in the order ``split`` lists them: ``main`` buckets
0–79, ``diverse`` 80–99. A request without the parameter (or with an empty one) goes to
``main``. The parameter is still passed to the method like any other.

>>> from peach_cli.runtime.plan import ABSpec, EndpointSpec
>>> split = ABSpec("user", (("main", 80), ("diverse", 20)))
>>> spec = EndpointSpec("recommend", "/recommend", {}, ab=split)
>>> bucket("recommend", "u-0"), choose_arm(spec, RequestParams(query={"user_id": "u-0"}))
(84, 'diverse')
>>> bucket("recommend", "u-1"), choose_arm(spec, RequestParams(body={"user_id": "u-1"}))
(8, 'main')
>>> choose_arm(spec, RequestParams())
'main'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from peach_cli.runtime.contract.request import RequestParams
from peach_cli.runtime.plan import PRIMARY, EndpointSpec

BUCKETS = 100


def bucket(endpoint_name: str, value: str) -> int:
    """The bucket (0–99) of one id for one endpoint: SPEC §2's hash."""
    digest = hashlib.sha256(f"{endpoint_name}:{value}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % BUCKETS


def assignment_value(params: RequestParams, name: str) -> str | None:
    """The text of parameter ``name`` that is hashed: the body's value, else the query's.

    A query value is used as sent (the last one when the key is repeated); a body string as
    it is and any other JSON value as its JSON text (``42`` → ``"42"``, the same as
    ``?user_id=42``). Missing, ``null`` or empty: None.
    """
    value: Any = None
    if name in params.body:
        value = params.body[name]
    elif name in params.query:
        value = params.query[name]
        if isinstance(value, list):
            value = value[-1] if value else None
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text or None


def choose_arm(endpoint: EndpointSpec, params: RequestParams) -> str:
    """The component that answers this request as the primary (the fallback covers it)."""
    ab = endpoint.ab
    if ab is None:
        return endpoint.primary
    value = assignment_value(params, ab.param)
    if value is None:
        return PRIMARY if PRIMARY in endpoint.components else endpoint.primary
    position = bucket(endpoint.name, value)
    upper = 0
    for arm, percent in ab.split:
        upper += percent
        if position < upper:
            return arm
    return endpoint.primary  # unreachable for a validated split (it sums to 100)


def ab_route(endpoint: EndpointSpec, requests: Mapping[str, int]) -> dict[str, Any] | None:
    """An endpoint's A/B test as both hosts' ``GET /_peach/routes`` show it: who is split,
    the split, and ``requests`` (arm → requests routed to it) for every arm."""
    ab = endpoint.ab
    if ab is None:
        return None
    return {
        "by": ab.by,
        "param": ab.param,
        "split": dict(ab.split),
        "requests": {arm: requests.get(arm, 0) for arm in ab.arms},
    }
