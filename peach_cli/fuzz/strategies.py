"""Hypothesis strategies from the JSON Schemas of an endpoint's parameters, edge values
included: empty strings, 0, negatives, huge ints, NaN and infinities where a float is
allowed (in a query string: JSON has no literal for them), unicode, empty and long lists.

    requests = request_strategy(target)      # draws Request("GET" | "POST", {name: value})

A GET request carries what a query string can say — scalars, lists of scalars, objects as
JSON text — converted back by the gateway as SPEC §2 says; a POST request carries any JSON
value in its body. GET comes first, so a finding shrinks towards a GET request when one
shows it. Each strategy puts the schema's own values first and the edge values second:
Hypothesis shrinks towards the first, so a divisor shrinks to 0 and a list to ``[]``.

The schemas are those ``peach openapi`` writes: ``type`` (one or a list), ``enum``,
``const``, ``anyOf``/``oneOf``, ``allOf``, ``$ref`` into the document's schemas, ``items``,
``prefixItems``, ``properties``/``required``/``additionalProperties`` and the numeric and
length bounds; ``{}`` (an annotation the document cannot express) is any JSON value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from peach_cli.fuzz.targets import Parameter, Target

LONG_LIST = 1000
"""The length of the long list drawn for every array."""
LONG_TEXT = 2000
"""The length of the long string drawn for every string (a query string stays well under
the usual 8 KiB request-line limits)."""
MAX_SIZE = 8
"""The most items or keys a generated list or object gets (long lists aside)."""

EDGE_INTEGERS = (0, -1, 1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 10**30, -(10**30))
EDGE_FLOATS = (0.0, -0.0, -1.0, 0.5, 1e-308, 5e-324, 1.7976931348623157e308, -1e308)
NON_FINITE = ("NaN", "Infinity", "-Infinity")
"""Non-finite floats as a query string says them (``float()`` reads each)."""
EDGE_TEXTS = (
    "",
    " ",
    "0",
    "-1",
    "null",
    "true",
    "ünïcødé — 日本語",
    "😀👍🏽",
    "\u202eright-to-left",
    "\x00",
    "a" * LONG_TEXT,
)


@dataclass(frozen=True)
class Request:
    """One generated request."""

    method: str
    params: dict[str, Any]


def _text(min_size: int = 0, max_size: int | None = None) -> st.SearchStrategy[str]:
    """Any text UTF-8 can carry. (The alphabet is spelled out: ``st.text()``'s default
    builds a table of the UTF-8 codec's characters, seconds of work on a first run.)"""
    return st.text(_ALPHABET, min_size=min_size, max_size=max_size)


_ALPHABET = st.characters(codec=None, exclude_categories=["Cs"])
_FORMATS: dict[Any, Any] = {
    "date": lambda: st.dates().map(str),
    "date-time": lambda: st.datetimes().map(lambda moment: moment.isoformat()),
    "time": lambda: st.times().map(lambda moment: moment.isoformat()),
    "uuid": lambda: st.uuids().map(str),
}
"""Strings of a ``format`` the gateway converts (dates, times, UUIDs): well-formed ones, so
the method runs, besides the edge texts."""


class _Builder:
    """Strategies for one target's schemas, for a query string or for a JSON body."""

    def __init__(self, definitions: dict[str, Any], *, query: bool) -> None:
        self.definitions = definitions
        self.query = query
        self._refs: dict[str, st.SearchStrategy[Any]] = {}

    # ``None`` means "a query string cannot say it" (only for ``query``).
    def of(self, schema: Any) -> st.SearchStrategy[Any] | None:
        if not isinstance(schema, dict):
            return self.anything()
        if "$ref" in schema:
            return self.ref(str(schema["$ref"]))
        if "const" in schema:
            return self.constant(schema["const"])
        if "enum" in schema:
            options = [v for v in schema["enum"] if self.sayable(v)]
            return st.sampled_from(options) if options else None
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return self.union(schema[key])
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(self.resolve(part))
            return self.of(merged)
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.union([{**schema, "type": k} for k in kind])
        match kind:
            case "integer":
                return self.integers(schema)
            case "number":
                return self.numbers(schema)
            case "boolean":
                return st.booleans()
            case "string":
                return self.texts(schema)
            case "null":
                return st.none()
            case "array":
                return self.arrays(schema)
            case "object":
                return self.objects(schema)
        return self.anything()

    def resolve(self, schema: Any) -> dict[str, Any]:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            schema = self.definitions.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
            seen += 1
        return schema if isinstance(schema, dict) else {}

    def ref(self, ref: str) -> st.SearchStrategy[Any] | None:
        if ref not in self._refs:
            target = self.definitions.get(ref.rsplit("/", 1)[-1], {})
            if self.query:  # no recursion can be said in a query string: resolve at once
                built = self.of(target)
                if built is None:
                    return None
                self._refs[ref] = built
            else:
                self._refs[ref] = st.deferred(lambda: self.of(target) or self.anything())
        return self._refs[ref]

    def sayable(self, value: Any) -> bool:
        if not self.query:
            return True
        if isinstance(value, list):
            return all(not isinstance(v, list | dict) for v in value)
        return True

    def constant(self, value: Any) -> st.SearchStrategy[Any] | None:
        return st.just(value) if self.sayable(value) else None

    def union(self, options: list[Any]) -> st.SearchStrategy[Any] | None:
        built = [self.of(option) for option in options]
        if self.query and any(b is None for b in built):
            return None
        return st.one_of(*[b for b in built if b is not None])

    def integers(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        low, high = _bounds(schema, integer=True)
        edges = [v for v in EDGE_INTEGERS if _within(v, low, high)]
        natural = st.integers(min_value=low, max_value=high)
        return st.one_of(natural, st.sampled_from(edges)) if edges else natural

    def numbers(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        low, high = _bounds(schema, integer=False)
        natural = st.floats(
            min_value=low, max_value=high, allow_nan=False, allow_infinity=False
        ) | st.integers(min_value=_ceil(low), max_value=_floor(high))
        edges: list[Any] = [v for v in EDGE_FLOATS if _within(v, low, high)]
        if self.query and low is None and high is None:
            edges += NON_FINITE
        return st.one_of(natural, st.sampled_from(edges)) if edges else natural

    def texts(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        low = int(schema.get("minLength") or 0)
        high = schema.get("maxLength")
        formatted = _FORMATS.get(schema.get("format"))
        natural = (
            formatted()
            if formatted is not None
            else _text(low, min(high, 40) if high is not None else 40)
        )
        edges = [t for t in EDGE_TEXTS if len(t) >= low and (high is None or len(t) <= high)]
        return st.one_of(natural, st.sampled_from(edges)) if edges else natural

    def arrays(self, schema: dict[str, Any]) -> st.SearchStrategy[Any] | None:
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list):
            parts = [self.scalar_item(p) if self.query else self.of(p) for p in prefix]
            if any(p is None for p in parts):
                return None
            return st.tuples(*[p for p in parts if p is not None]).map(list)
        item = (
            self.scalar_item(schema.get("items", {}))
            if self.query
            else self.of(schema.get("items", {}))
        )
        if item is None:
            return None
        low = int(schema.get("minItems") or 0)
        high = schema.get("maxItems")
        natural = st.lists(
            item, min_size=low, max_size=max(low, min(high, MAX_SIZE) if high else MAX_SIZE)
        )
        if high is not None and high < LONG_LIST:
            return natural
        return st.one_of(natural, _long_lists(item, low))

    def scalar_item(self, schema: Any) -> st.SearchStrategy[Any] | None:
        """An item of a list in a query string: a scalar (lists are flattened there)."""
        resolved = self.resolve(schema)
        kinds = resolved.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if any(k in ("array", "object") for k in kinds) or not resolved:
            return _text(max_size=20) if not resolved else None
        return self.of(resolved)

    def objects(self, schema: dict[str, Any]) -> st.SearchStrategy[Any] | None:
        if self.query:  # an object in a query string is its JSON text: any JSON value
            body = _Builder(self.definitions, query=False)
            return body.objects(schema)
        properties = schema.get("properties")
        if isinstance(properties, dict) and properties:
            required = set(schema.get("required") or ())
            built = {name: self.of(sub) or self.anything() for name, sub in properties.items()}
            return st.fixed_dictionaries(
                {k: v for k, v in built.items() if k in required},
                optional={k: v for k, v in built.items() if k not in required},
            )
        extra = schema.get("additionalProperties")
        values = self.of(extra) if isinstance(extra, dict) else self.anything()
        return st.dictionaries(_text(max_size=12), values or self.anything(), max_size=MAX_SIZE)

    def anything(self) -> st.SearchStrategy[Any]:
        """Any JSON value (a string in a query string: what an unannotated parameter gets)."""
        if self.query:
            return self.texts({})
        leaves = (
            st.none()
            | st.booleans()
            | st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | _text(max_size=20)
        )
        return st.recursive(
            leaves,
            lambda inner: (
                st.lists(inner, max_size=4) | st.dictionaries(_text(max_size=8), inner, max_size=4)
            ),
            max_leaves=12,
        )


def _long_lists(item: st.SearchStrategy[Any], low: int) -> st.SearchStrategy[list[Any]]:
    """Lists longer than ``MAX_SIZE``, of one value: ``LONG_LIST`` long half the time, and
    a length that shrinks, so a bug that needs 10 items is shrunk to 10 of them, not left at
    a thousand."""
    longest = max(LONG_LIST, low)
    lengths = st.integers(min_value=max(low, MAX_SIZE + 1), max_value=2 * longest)
    return st.tuples(lengths, item).map(lambda pair: [pair[1]] * min(pair[0], longest))


def _bounds(schema: dict[str, Any], *, integer: bool) -> tuple[Any, Any]:
    low = schema.get("minimum")
    high = schema.get("maximum")
    step = 1 if integer else 0
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        low = schema["exclusiveMinimum"] + step
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        high = schema["exclusiveMaximum"] - step
    if integer:
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
    return low, high


def _ceil(value: Any) -> int | None:
    return None if value is None else math.ceil(value)


def _floor(value: Any) -> int | None:
    return None if value is None else math.floor(value)


def _within(value: float, low: Any, high: Any) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _params(parameters: tuple[Parameter, ...], builder: _Builder) -> st.SearchStrategy[Any] | None:
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for parameter in parameters:
        built = builder.of(parameter.schema)
        if built is None:
            if parameter.required:
                return None  # this request cannot be said in a query string
            continue
        (required if parameter.required else optional)[parameter.name] = built
    return st.fixed_dictionaries(required, optional=optional)


def request_strategy(target: Target) -> st.SearchStrategy[Request]:
    """Requests to ``target``: GET with a query string when one can carry the required
    parameters, and POST with a JSON body."""
    forms: list[st.SearchStrategy[Request]] = []
    for method, query in (("GET", True), ("POST", False)):
        params = _params(target.parameters, _Builder(target.definitions, query=query))
        if params is not None:
            forms.append(params.map(lambda p, m=method: Request(m, p)))  # type: ignore[misc]
    return st.one_of(*forms)
