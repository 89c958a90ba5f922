"""The request contract of a PEACH endpoint (SPEC §2), written once for both hosts.

``peach dev`` (the simulator) and ``peach deploy`` (the Ray Serve application) wrap this
module and add only transport: how bytes reach a replica and come back. Everything a user
can observe lives here:

* gateway side — ``parse_request`` (405/413/400, query + JSON body merge, ``stream`` taken
  out before any default applies), ``answer`` (the per-codops timeout, fallback on a raise,
  a timeout or an empty result, the envelope and error codes), ``stream_required_answer``;
* replica side — ``ComponentRunner``: the notebook code executed in a fresh module, ``init``
  run once, arguments bound to the method's signature (``model``/``init_state`` injected and
  never taken from a request, query strings converted to annotations, ``args`` defaults),
  results converted to JSON, ``(items, meta)`` drift detection and the re-init that follows,
  streamed chunks encoded and the user's generator always closed.

Nothing here imports a web framework, prints, or exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import linecache
import logging
import math
import sys
import threading
import traceback
import types
import typing
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from peach_cli.plan import ComponentSpec, EndpointSpec

logger = logging.getLogger("peach.contract")

COMPONENT_HEADER = "X-Peach-Component"
REPLICA_HEADER = "X-Peach-Replica"
MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_BODY_DEPTH = 100
"""How deeply a request's JSON body may nest; deeper is a 400 (it could not be passed on)."""
ALLOWED_METHODS = frozenset({"GET", "POST"})
STATE_PARAMS = frozenset({"model", "init_state"})
"""Parameter names a request can never set: the gateway injects them."""

ERROR_STATUS: dict[str, int] = {
    "bad_request": 400,
    "stream_required": 400,
    "not_found": 404,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "method_error": 500,
    "unavailable": 503,
    "timeout": 504,
}

MethodKind = Literal["function", "coroutine", "generator", "async_generator"]
_TRUTHY = frozenset({"true", "1", "yes", "y", "on"})
_FALSY = frozenset({"false", "0", "no", "n", "off", ""})


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

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        """The user's traceback, for the server log."""


class ResultNotJSON(TypeError):
    """A method returned something that cannot be sent as JSON."""


# --------------------------------------------------------------------------------------
# Gateway side: parsing the request
# --------------------------------------------------------------------------------------


@dataclass
class RequestParams:
    """A request's parameters: query-string values (strings) and JSON body values."""

    query: dict[str, str | list[str]] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "body": self.body}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestParams:
        return cls(query=dict(data.get("query") or {}), body=dict(data.get("body") or {}))


def is_truthy(value: Any) -> bool:
    """Whether a ``stream`` value asks for a stream: ``true``, ``1``, ``yes`` or JSON true.

    >>> [is_truthy(v) for v in ("true", "1", "yes", True, "false", 0, None)]
    [True, True, True, True, False, False, False]
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value == 1
    if isinstance(value, str):
        return value.strip().lower() in _TRUTHY
    if isinstance(value, list) and value:
        return is_truthy(value[-1])
    return False


def parse_request(
    http_method: str,
    query_items: Iterable[tuple[str, str]],
    body: bytes,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> tuple[RequestParams, bool]:
    """Turn an HTTP request into parameters and the stream decision.

    ``stream`` is taken out of both the query and the body (the body wins) before any
    ``args`` default could apply, and is never passed on.

    >>> params, stream = parse_request("POST", [("size", "3")], b'{"stream": "true", "q": "x"}')
    >>> (params.query, params.body, stream)
    ({'size': '3'}, {'q': 'x'}, True)
    """
    if http_method.upper() not in ALLOWED_METHODS:
        raise ContractError(
            "method_not_allowed", f"method {http_method.upper()} is not allowed: use GET or POST"
        )
    if len(body) > max_body_bytes:
        raise ContractError(
            "payload_too_large",
            f"the request body is {len(body)} bytes, over the limit of {max_body_bytes} bytes",
        )
    query: dict[str, str | list[str]] = {}
    for key, value in query_items:
        previous = query.get(key)
        if previous is None:
            query[key] = value
        elif isinstance(previous, list):
            previous.append(value)
        else:
            query[key] = [previous, value]
    payload: dict[str, Any] = {}
    if body.strip():
        try:
            decoded = json.loads(body)
        except UnicodeDecodeError:
            raise ContractError("bad_request", "the request body is not UTF-8 JSON") from None
        except ValueError as error:
            raise ContractError(
                "bad_request", f"the request body is not valid JSON: {error}"
            ) from None
        except RecursionError:
            raise ContractError("bad_request", "the request body is nested too deeply") from None
        if not isinstance(decoded, dict):
            raise ContractError(
                "bad_request",
                f"the request body must be a JSON object, not {_json_kind(decoded)}",
            )
        brackets = body.count(b"{") + body.count(b"[")  # a cheap bound on the depth
        if brackets > MAX_BODY_DEPTH and _nests_deeper(decoded, MAX_BODY_DEPTH):
            raise ContractError(
                "bad_request", f"the request body is nested more than {MAX_BODY_DEPTH} levels deep"
            )
        payload = decoded
    stream = False
    if "stream" in query:
        stream = is_truthy(query.pop("stream"))
    if "stream" in payload:
        stream = is_truthy(payload.pop("stream"))
    return RequestParams(query=query, body=payload), stream


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether JSON data has containers nested more than ``limit`` levels (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"


# --------------------------------------------------------------------------------------
# Envelopes and answers
# --------------------------------------------------------------------------------------


def ok_envelope(result: Any) -> dict[str, Any]:
    return {"result": result, "status": "ok"}


def error_envelope(code: str, message: str) -> dict[str, Any]:
    return {"status": "error", "error": {"code": code, "message": message}}


@dataclass
class Answer:
    """What the gateway sends back for a non-streaming call."""

    status: int
    body: dict[str, Any]
    component: str | None = None
    replica: str | None = None

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.component:
            headers[COMPONENT_HEADER] = self.component
        if self.replica:
            headers[REPLICA_HEADER] = self.replica
        return headers

    def body_bytes(self) -> bytes:
        return json.dumps(self.body, ensure_ascii=False, allow_nan=False).encode()


def error_answer(
    code: str, message: str, *, component: str | None = None, replica: str | None = None
) -> Answer:
    return Answer(ERROR_STATUS[code], error_envelope(code, message), component, replica)


def stream_required_message(url: str, kind: str = "async_generator") -> str:
    """What a generator method called without ``stream`` says (as the platform does)."""
    return (
        f"cannot pickle '{kind}' object: {url} is a streaming endpoint (its method "
        "is a generator) and the request did not ask for a stream. Send stream=true: "
        f'\'{url}?stream=true\', or "stream": "true" in the JSON body.'
    )


def stream_required_answer(endpoint: EndpointSpec, kind: str = "async_generator") -> Answer:
    return error_answer(
        "stream_required",
        stream_required_message(endpoint.url, kind),
        component=endpoint.primary,
    )


@dataclass
class CallResult:
    """A replica's answer to one non-streaming call (plain data: it crosses processes)."""

    ok: bool
    result: Any = None
    empty: bool = False
    code: str | None = None
    message: str | None = None
    drift: bool = False
    replica: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CallResult:
        return cls(**data)

    @classmethod
    def failure(cls, code: str, message: str, replica: str | None = None) -> CallResult:
        return cls(ok=False, code=code, message=message, replica=replica)


@dataclass
class Attempt:
    """One try of one component; the host records which replica it picked."""

    component: str
    replica: str | None = None


ComponentCall = Callable[[str, Attempt], Awaitable[CallResult]]
"""How a host reaches a component: ``call(component_name, attempt) -> CallResult``.

The host picks a healthy replica (setting ``attempt.replica``), sends the parameters and
returns the replica's ``CallResult``; with no healthy replica it returns an ``unavailable``
failure. It must not raise for anything a user did.
"""

_FALLBACK_CODES = frozenset({"method_error", "timeout"})


async def _attempt(
    call: ComponentCall, endpoint: EndpointSpec, component: str, timeout_s: float
) -> CallResult:
    attempt = Attempt(component)
    try:
        async with asyncio.timeout(timeout_s):  # no extra task per call, unlike wait_for
            result = await call(component, attempt)
    except TimeoutError:
        result = CallResult.failure(
            "timeout",
            f"{endpoint.url} ({component}) did not answer within timeout_s = {timeout_s:g} s",
            attempt.replica,
        )
    if result.replica is None:
        result.replica = attempt.replica
    return result


async def answer(endpoint: EndpointSpec, call: ComponentCall, timeout_s: float) -> Answer:
    """Answer a non-streaming call: the primary, bounded by ``timeout_s``, then the fallback.

    The fallback answers (with the same parameters: the host's ``call`` carries them) when
    the primary raised, timed out or returned nothing; caller mistakes (``bad_request``) and
    ``unavailable`` are returned as they are.
    """
    primary = await _attempt(call, endpoint, endpoint.primary, timeout_s)
    if primary.ok and not primary.empty:
        return Answer(200, ok_envelope(primary.result), endpoint.primary, primary.replica)
    fallback_name = endpoint.fallback
    wants_fallback = primary.empty if primary.ok else primary.code in _FALLBACK_CODES
    if fallback_name and wants_fallback:
        fallback = await _attempt(call, endpoint, fallback_name, timeout_s)
        if fallback.ok:
            return Answer(200, ok_envelope(fallback.result), fallback_name, fallback.replica)
        if primary.ok:  # the primary's empty result stands when the fallback fails too
            return Answer(200, ok_envelope(primary.result), endpoint.primary, primary.replica)
        assert primary.code is not None and primary.message is not None
        message = f"{primary.message} (the fallback failed too: {fallback.message})"
        return error_answer(
            primary.code, message, component=endpoint.primary, replica=primary.replica
        )
    if primary.ok:
        return Answer(200, ok_envelope(primary.result), endpoint.primary, primary.replica)
    assert primary.code is not None
    return error_answer(
        primary.code,
        primary.message or primary.code,
        component=endpoint.primary,
        replica=primary.replica,
    )


# --------------------------------------------------------------------------------------
# Replica side: binding arguments
# --------------------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _convert_scalar(value: str, annotation: Any) -> Any:
    if annotation is bool:
        lowered = value.strip().lower()
        if lowered in _TRUTHY:
            return True
        if lowered in _FALSY:
            return False
        raise ValueError(value)
    if annotation is int:
        return int(value.strip())
    if annotation is float:
        number = float(value.strip())
        return number
    if annotation in (dict, list) or typing.get_origin(annotation) is dict:
        decoded = json.loads(value)
        expected = typing.get_origin(annotation) or annotation
        if not isinstance(decoded, expected):
            raise ValueError(value)
        return decoded
    return value


def convert_query_value(value: str | list[str], annotation: Any) -> Any:
    """Convert a query-string value to a parameter's annotation.

    Repeated keys and comma-separated values fill ``list[...]``; ``Optional`` accepts an
    empty value or ``null`` as None; ``str`` and unannotated parameters are left alone.

    >>> convert_query_value("3", int), convert_query_value("a,b", list[str])
    (3, ['a', 'b'])
    >>> convert_query_value(["1", "2"], list[int]), convert_query_value("", int | None)
    ([1, 2], None)
    """
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is str:
        return value
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
        allows_none = len(arguments) < len(typing.get_args(annotation))
        if allows_none and isinstance(value, str) and value.strip().lower() in ("", "null", "none"):
            return None
        errors: list[Exception] = []
        for argument in arguments:
            try:
                return convert_query_value(value, argument)
            except (ValueError, TypeError) as error:
                errors.append(error)
        raise ValueError(value)
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        item_args = typing.get_args(annotation)
        item_type = item_args[0] if item_args else str
        if isinstance(value, list):
            items = value
        elif value.strip().startswith("["):
            decoded = json.loads(value)
            if not isinstance(decoded, list):
                raise ValueError(value)
            items = [v if isinstance(v, str) else json.dumps(v) for v in decoded]
        else:
            items = value.split(",") if value else []
        converted = [convert_query_value(item, item_type) for item in items]
        container = origin or annotation
        return container(converted) if container in (tuple, set, frozenset) else converted
    if isinstance(value, list):
        value = value[-1]  # a repeated key for a scalar: the last one wins, as in most servers
    if origin is Literal:
        for option in typing.get_args(annotation):
            if str(option) == value:
                return option
        raise ValueError(value)
    return _convert_scalar(value, annotation)


@dataclass(frozen=True)
class MethodSignature:
    """What binding needs to know about a method, computed once per load."""

    parameters: tuple[inspect.Parameter, ...]
    hints: dict[str, Any]
    accepts_any: bool

    @classmethod
    def of(cls, function: Callable[..., Any]) -> MethodSignature:
        signature = inspect.signature(function)
        try:
            hints = typing.get_type_hints(function)
        except Exception:  # an unresolvable annotation: fall back to the raw ones
            hints = {
                name: p.annotation
                for name, p in signature.parameters.items()
                if not isinstance(p.annotation, str)
            }
        parameters = tuple(signature.parameters.values())
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        return cls(parameters, hints, accepts_any)


def bind_arguments(
    signature: MethodSignature,
    params: RequestParams,
    defaults: Mapping[str, Any],
    *,
    state: Any = None,
    state_param: str = "model",
) -> dict[str, Any]:
    """Build the keyword arguments for one call (SPEC §2 "Parameters").

    Query merged with body (body wins), then ``args`` fill what the request did not send,
    then only the signature's names are kept (all of them with ``**kwargs``). ``model`` and
    ``init_state`` are never taken from the request; the state goes to ``state_param`` when
    the method declares it. Raises ``ContractError('bad_request')`` naming the parameter.
    """
    supplied: dict[str, Any] = {}
    from_query: set[str] = set()
    for key, value in params.query.items():
        supplied[key] = value
        from_query.add(key)
    for key, value in params.body.items():
        supplied[key] = value
        from_query.discard(key)
    for key, value in defaults.items():
        if key not in supplied and key != "stream":
            supplied[key] = value
    for reserved in STATE_PARAMS:
        supplied.pop(reserved, None)

    kwargs: dict[str, Any] = {}
    named: set[str] = set()
    for parameter in signature.parameters:
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        name = parameter.name
        named.add(name)
        if name in STATE_PARAMS:
            if name == state_param:
                kwargs[name] = state
            elif parameter.default is inspect.Parameter.empty:
                kwargs[name] = None
            continue
        if name not in supplied:
            if parameter.default is inspect.Parameter.empty:
                raise ContractError("bad_request", f"missing required parameter '{name}'")
            continue
        value = supplied[name]
        if name in from_query:
            annotation = signature.hints.get(name, parameter.annotation)
            try:
                value = convert_query_value(value, annotation)
            except (ValueError, TypeError):
                shown = value if isinstance(value, str) else ",".join(value)
                raise ContractError(
                    "bad_request",
                    f"parameter '{name}' must be {_type_name(annotation)}, got {shown!r}",
                ) from None
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ContractError("bad_request", f"parameter '{name}' is positional-only")
        kwargs[name] = value
    if signature.accepts_any:
        for key, value in supplied.items():
            if key not in named:
                kwargs[key] = value
    return kwargs


# --------------------------------------------------------------------------------------
# Replica side: results
# --------------------------------------------------------------------------------------


def split_drift(value: Any) -> tuple[Any, bool]:
    """Split a drift-aware ``(items, meta)`` answer; other values pass unchanged.

    >>> split_drift((["a"], {"drift_detected": True})), split_drift((1, 2))
    ((['a'], True), ((1, 2), False))
    """
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[1], dict)
        and "drift_detected" in value[1]
    ):
        return value[0], bool(value[1]["drift_detected"])
    return value, False


def is_empty(value: Any) -> bool:
    """Whether a result counts as "nothing" (None, or an empty list/dict/tuple/set/string)."""
    if value is None:
        return True
    if isinstance(value, (list, dict, tuple, str, set, frozenset, bytes)):
        return len(value) == 0
    return False


def to_json_value(value: Any, *, _path: str = "result", _depth: int = 0) -> Any:
    """Convert a method's result to plain JSON data, or raise ``ResultNotJSON``.

    numpy scalars and arrays, dataclasses, pydantic models, tuples and sets are converted.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Hit:
    ...     id: str
    ...     score: float
    >>> to_json_value((Hit("a", 1.0), {2}))
    [{'id': 'a', 'score': 1.0}, [2]]
    """
    if _depth > 200:
        raise ResultNotJSON(f"{_path} is nested more than 200 levels deep")
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ResultNotJSON(f"{_path} is {value}, which JSON cannot represent")
        return value
    if isinstance(value, dict):
        converted: dict[str, Any] = {}
        for key, item in value.items():
            text_key = _json_key(key, _path)
            converted[text_key] = to_json_value(
                item, _path=f"{_path}[{text_key!r}]", _depth=_depth + 1
            )
        return converted
    if isinstance(value, (list, tuple)):
        return [
            to_json_value(item, _path=f"{_path}[{index}]", _depth=_depth + 1)
            for index, item in enumerate(value)
        ]
    if isinstance(value, (set, frozenset)):
        items = [to_json_value(item, _path=f"{_path}[…]", _depth=_depth + 1) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    module = type(value).__module__
    if module == "numpy" or module.startswith("numpy."):
        if hasattr(value, "tolist"):
            return to_json_value(value.tolist(), _path=_path, _depth=_depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json_value(
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)},
            _path=_path,
            _depth=_depth + 1,
        )
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        return to_json_value(model_dump(mode="json"), _path=_path, _depth=_depth + 1)
    raise ResultNotJSON(f"{_path} is of type {_type_label(value)}, which is not JSON")


def _json_key(key: Any, path: str) -> str:
    """A dict key as JSON writes it (``json.dumps`` does the same for str, int, float, bool)."""
    if isinstance(key, str):
        return key
    if isinstance(key, (bool, int, float)) or key is None:
        return json.dumps(key)
    scalar = getattr(key, "item", None)  # numpy scalars
    if callable(scalar) and type(key).__module__.startswith("numpy"):
        return _json_key(scalar(), path)
    raise ResultNotJSON(f"{path} has a key of type {_type_label(key)}, not a string")


def _type_label(value: Any) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def encode_chunk(chunk: Any) -> bytes:
    """A yielded chunk as bytes: ``str`` as UTF-8, bytes as they are, anything else as JSON."""
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        return bytes(chunk)
    return json.dumps(to_json_value(chunk, _path="chunk"), ensure_ascii=False).encode()


def describe_exception(error: BaseException) -> str:
    """``TypeName: text`` — what a method_error says about the user's exception."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def notebook_position(spec: ComponentSpec, line: int) -> str:
    """Where line ``line`` of the extracted module is in the notebook: ``cell 3, line 2``."""
    position = f"line {line}"
    for first_line, cell, first_cell_line in spec.line_map:
        if first_line <= line:
            position = f"cell {cell}, line {first_cell_line + line - first_line}"
    return position


def user_traceback(error: BaseException, spec: ComponentSpec) -> str:
    """The traceback from the first frame in the user's code on, for the server log.

    Frames in the extracted notebook code name the notebook cell and line.
    """
    frames = traceback.extract_tb(error.__traceback__)
    start = next((i for i, f in enumerate(frames) if f.filename == spec.source_name), 0)
    lines = ["Traceback (most recent call last):\n"]
    for frame in frames[start:]:
        if frame.filename == spec.source_name and frame.lineno is not None:
            where = f"{spec.source_name}, {notebook_position(spec, frame.lineno)}"
        else:
            where = f"{frame.filename}, line {frame.lineno}"
        lines.append(f"  File {where}, in {frame.name}\n")
        if frame.line:
            lines.append(f"    {frame.line.strip()}\n")
    lines.append(describe_exception(error))
    return "".join(lines)


# --------------------------------------------------------------------------------------
# Replica side: the runner both hosts wrap
# --------------------------------------------------------------------------------------


def method_kind(function: Callable[..., Any]) -> MethodKind:
    if inspect.isasyncgenfunction(function):
        return "async_generator"
    if inspect.isgeneratorfunction(function):
        return "generator"
    if inspect.iscoroutinefunction(function):
        return "coroutine"
    return "function"


class ComponentRunner:
    """One replica's view of a component: its module, its state and its calls.

    Example (inside a host)::

        runner = ComponentRunner(spec, project_root, replica_id="assistant/main#1")
        await runner.start()                          # exec the code, run init once
        result = await runner.call(params)            # CallResult, never raises for user errors
        chunks = await runner.open_stream(params)     # ContractError here, before any byte
        try:
            async for chunk in chunks: ...            # bytes, as soon as each is yielded
        finally:
            await chunks.aclose()                     # closes the user's generator

    Sync methods and sync generators run in the runner's own thread pool, so slow calls
    (say, past ``timeout_s``) do not starve the replica's other requests.
    """

    max_threads = 64

    def __init__(self, spec: ComponentSpec, root: Path, *, replica_id: str = "") -> None:
        self.spec = spec
        self.root = Path(root)
        self.replica_id = replica_id or spec.key
        self.state: Any = None
        self.method: Callable[..., Any] | None = None
        self.signature: MethodSignature | None = None
        self.method_kind: MethodKind = "function"
        self.init_function: Callable[..., Any] | None = None
        self.last_reinit_error: str | None = None
        self.reinit_count = 0
        self._ready = asyncio.Event()
        self._reinit_task: asyncio.Task[None] | None = None  # held: the loop keeps weak refs
        self._executor = ThreadPoolExecutor(self.max_threads, thread_name_prefix="peach-call")
        self.abandoned_threads = 0

    # -- lifecycle -----------------------------------------------------------------------

    def load(self) -> None:
        """Execute the component's extracted code in a fresh module and find its functions."""
        for folder in (self.root, (self.root / self.spec.notebook).parent):
            text = str(folder)
            if text not in sys.path:
                sys.path.insert(0, text)
        # tracebacks and inspect.getsource find the notebook code by its name
        lines = self.spec.source.splitlines(keepends=True)
        linecache.cache[self.spec.source_name] = (
            len(self.spec.source),
            None,
            lines,
            self.spec.source_name,
        )
        module_name = f"peach_component_{self.spec.endpoint}_{self.spec.name}".replace("-", "_")
        module = types.ModuleType(module_name)
        module.__file__ = str(self.root / self.spec.notebook)
        sys.modules[module_name] = module  # dataclasses and pickling look the module up
        try:
            code = compile(self.spec.source, self.spec.source_name, "exec")
            exec(code, module.__dict__)  # noqa: S102 - running the user's notebook is the job
        except (Exception, SystemExit) as error:  # anything the notebook raises, exit() too
            raise InitError(
                f"{self.spec.source_name} failed to run: {describe_exception(error)}",
                user_traceback(error, self.spec),
            ) from None
        method = getattr(module, self.spec.method, None)
        if not callable(method):
            raise InitError(
                f"{self.spec.source_name} does not define a function '{self.spec.method}'"
            )
        self.method = method
        self.signature = MethodSignature.of(method)
        self.method_kind = method_kind(method)
        if self.spec.init:
            init = getattr(module, self.spec.init, None)
            if not callable(init):
                raise InitError(
                    f"{self.spec.source_name} does not define a function '{self.spec.init}'"
                )
            self.init_function = init

    async def _in_thread(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        work = self._executor.submit(partial(function, *args, **kwargs))
        try:
            return await asyncio.wrap_future(work, loop=loop)
        except asyncio.CancelledError:
            if not work.cancelled():  # already running: a thread cannot be stopped, so
                # count it as abandoned until the function returns on its own, if ever
                self.abandoned_threads += 1
                work.add_done_callback(lambda _: loop.call_soon_threadsafe(self._thread_returned))
            raise

    def _thread_returned(self) -> None:
        self.abandoned_threads -= 1

    @property
    def threads_exhausted(self) -> bool:
        """True when every thread is held by a call nobody waits for any more.

        The replica can then no longer run a sync call: hosts should replace it.
        """
        return self.abandoned_threads >= self.max_threads

    async def _run_init(self) -> Any:
        assert self.init_function is not None
        if inspect.iscoroutinefunction(self.init_function):
            return await self.init_function()
        return await self._in_thread(self.init_function)

    async def start(self) -> None:
        """Load the code and run ``init`` once; raise ``InitError`` if either fails."""
        self.load()
        if self.init_function is not None:
            try:
                self.state = await self._run_init()
            except (Exception, SystemExit) as error:
                raise InitError(
                    f"{self.spec.init}() raised {describe_exception(error)}",
                    user_traceback(error, self.spec),
                ) from None
        self._ready.set()

    def close(self) -> None:
        """Release the runner's threads (calls still running finish in the background)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def streams(self) -> bool:
        """Whether the method is a generator, so callers must ask for a stream."""
        return self.method_kind in ("async_generator", "generator")

    @property
    def reinitializing(self) -> bool:
        """True while a drift re-init runs; new calls wait for it."""
        return not self._ready.is_set()

    async def _reinit(self) -> None:
        try:
            state = await self._run_init()
        except Exception as error:  # keep the old state, report the error (SPEC decision)
            self.last_reinit_error = (
                "re-init after drift failed, keeping the previous state: "
                f"{self.spec.init}() raised {describe_exception(error)}"
            )
            logger.error(
                "%s: %s\n%s",
                self.replica_id,
                self.last_reinit_error,
                user_traceback(error, self.spec),
            )
        else:
            self.state = state
            self.last_reinit_error = None
        finally:
            self.reinit_count += 1
            self._ready.set()

    def _schedule_reinit(self) -> None:
        if self.init_function is None or self.reinitializing:
            return
        self._ready.clear()
        self._reinit_task = asyncio.get_running_loop().create_task(self._reinit())

    async def wait_reinit(self) -> None:
        """Wait until a drift re-init (if any) is over."""
        await self._ready.wait()

    # -- calls ---------------------------------------------------------------------------

    def _bind(self, params: RequestParams) -> dict[str, Any]:
        assert self.signature is not None, "start() first"
        return bind_arguments(
            self.signature,
            params,
            self.spec.args,
            state=self.state,
            state_param=self.spec.state_param,
        )

    async def call(self, params: RequestParams) -> CallResult:
        """Run one non-streaming call; every failure becomes a ``CallResult``.

        A drift-aware answer is returned first; the re-init it triggers then runs while new
        calls to this replica wait for the fresh state.
        """
        assert self.method is not None, "start() first"
        await self._ready.wait()
        if self.streams:
            return CallResult.failure(
                "stream_required",
                stream_required_message(self.spec.url, self.method_kind),
                self.replica_id,
            )
        try:
            kwargs = self._bind(params)
        except ContractError as error:
            return CallResult.failure(error.code, error.message, self.replica_id)
        try:
            if self.method_kind == "coroutine":
                raw = await self.method(**kwargs)
            else:
                raw = await self._in_thread(self.method, **kwargs)
        except Exception as error:
            logger.error(
                "%s: %s() raised\n%s",
                self.replica_id,
                self.spec.method,
                user_traceback(error, self.spec),
            )
            return CallResult.failure(
                "method_error",
                f"{self.spec.method}() raised {describe_exception(error)}",
                self.replica_id,
            )
        value, drift = split_drift(raw)
        try:
            result = to_json_value(value)
        except ResultNotJSON as error:
            return CallResult.failure(
                "method_error",
                f"{self.spec.method}() returned a result that is not JSON: {error}",
                self.replica_id,
            )
        if drift:
            self._schedule_reinit()
        return CallResult(
            ok=True, result=result, empty=is_empty(value), drift=drift, replica=self.replica_id
        )

    async def open_stream(self, params: RequestParams) -> AsyncGenerator[bytes, None]:
        """Bind the call and return its chunks as bytes, each as soon as it is yielded.

        Raises ``ContractError`` (``bad_request``) before any byte is sent. An exception
        inside the user's generator is logged and ends the stream. Closing the returned
        iterator (a client that went away) closes the user's generator, so its ``finally``
        runs.
        """
        assert self.method is not None, "start() first"
        await self._ready.wait()
        if not self.streams:
            raise ContractError("bad_request", f"{self.spec.method}() does not stream")
        kwargs = self._bind(params)
        if self.method_kind == "async_generator":
            return self._relay_async(self.method(**kwargs))
        return self._relay_sync(self.method(**kwargs))

    async def _relay_async(self, agen: Any) -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in agen:
                yield encode_chunk(chunk)
        except Exception as error:
            self._log_stream_error(error)
        finally:
            await agen.aclose()

    async def _relay_sync(self, generator: Any) -> AsyncGenerator[bytes, None]:
        lock = threading.Lock()  # next() and close() must never overlap

        def step() -> Any:
            with lock:
                try:
                    return next(generator)
                except StopIteration:
                    return _DONE

        def close() -> None:
            with lock:
                generator.close()

        try:
            while True:
                chunk = await self._in_thread(step)
                if chunk is _DONE:
                    break
                yield encode_chunk(chunk)
        except Exception as error:
            self._log_stream_error(error)
        finally:
            await self._in_thread(close)

    def _log_stream_error(self, error: BaseException) -> None:
        logger.error(
            "%s: the stream of %s() ended with an error\n%s",
            self.replica_id,
            self.spec.method,
            user_traceback(error, self.spec),
        )


_DONE = object()
