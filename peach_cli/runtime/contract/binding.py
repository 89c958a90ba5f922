"""Binding a request's parameters to the method's signature (SPEC §2 "Parameters").

Query merged with body (body wins), ``args`` defaults, the state injected as ``model`` or
``init_state``, query-string values converted to the parameters' annotations.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import inspect
import json
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from peach_cli.runtime.contract.errors import ContractError
from peach_cli.runtime.contract.request import _FALSY, _TRUTHY, RequestParams

STATE_PARAMS = frozenset({"model", "init_state"})
"""Parameter names a request can never set: the gateway injects them."""


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _convert_rich(value: str, annotation: Any) -> Any:
    """A string as one of the types JSON has no literal for (dates, decimals, …)."""
    text = value.strip()
    if annotation is datetime.datetime:
        return datetime.datetime.fromisoformat(text)
    if annotation is datetime.date:
        return datetime.date.fromisoformat(text)
    if annotation is datetime.time:
        return datetime.time.fromisoformat(text)
    if annotation is decimal.Decimal:
        try:
            number = decimal.Decimal(text)
        except decimal.InvalidOperation:
            raise ValueError(value) from None
        if not number.is_finite():
            raise ValueError(value)
        return number
    if annotation is uuid.UUID:
        return uuid.UUID(text)
    assert isinstance(annotation, type) and issubclass(annotation, enum.Enum)
    for member in annotation:
        if str(member.value) == value:
            return member
    for member in annotation:
        if member.name == value:
            return member
    raise ValueError(value)


def _is_rich(annotation: Any) -> bool:
    """Whether values of this annotation arrive as strings even in a JSON body."""
    return annotation in _RICH_TYPES or (
        isinstance(annotation, type) and issubclass(annotation, enum.Enum)
    )


_RICH_TYPES = (datetime.datetime, datetime.date, datetime.time, decimal.Decimal, uuid.UUID)


def _convert_scalar(value: str, annotation: Any) -> Any:
    if _is_rich(annotation):
        return _convert_rich(value, annotation)
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
            if isinstance(option, bool):
                if value.strip().lower() in (_TRUTHY if option else _FALSY) - {""}:
                    return option
            elif str(option) == value or (isinstance(option, enum.Enum) and option.name == value):
                return option
        raise ValueError(value)
    return _convert_scalar(value, annotation)


def convert_body_value(value: Any, annotation: Any) -> Any:
    """A JSON body value for a parameter whose type JSON cannot carry (a date, a
    ``Decimal``, a ``UUID``, an ``Enum``, a ``Literal``): it is converted as the same
    text in a query string would be. Every other value keeps its JSON type.

    >>> import datetime
    >>> convert_body_value("2024-05-01", datetime.date), convert_body_value(3, int)
    (datetime.date(2024, 5, 1), 3)
    """
    target = annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        if value is None:
            return None
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        rich = [a for a in options if _is_rich(a) or typing.get_origin(a) is Literal]
        if len(rich) != len(options) or len(options) != 1:
            return value
        target = options[0]
    if typing.get_origin(target) is Literal:
        if value in typing.get_args(target) and not isinstance(value, (dict, list)):
            return value
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return convert_query_value(str(value), target)
        raise ValueError(value)
    if not _is_rich(target):
        return value
    if isinstance(value, str) or (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (target is decimal.Decimal or issubclass(target, enum.Enum))
    ):
        return _convert_rich(str(value), target)
    raise ValueError(value)


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
        annotation = signature.hints.get(name, parameter.annotation)
        try:
            if name in from_query:
                value = convert_query_value(value, annotation)
            else:
                value = convert_body_value(value, annotation)
        except (ValueError, TypeError):
            if isinstance(value, str):
                shown = value
            elif name in from_query:
                shown = ",".join(value)
            else:
                shown = json.dumps(value)
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


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def bind_task_call(
    signature: MethodSignature, payload: Any, defaults: Mapping[str, Any], *, state: Any = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of one task run (SPEC §5): ``(positional, keyword)``.

    The payload goes to the first positional parameter that ``defaults`` (the task's
    ``args``) and the state leave free (by name unless it is positional-only), else to
    ``*args``, else nowhere; the rest binds as a request without parameters does
    (``bind_arguments``): ``args`` by name, the state as ``model``. Raises
    ``ContractError('bad_request')`` naming a required parameter nothing fills.

    >>> def retrain(payload, model, lr=0.1): ...
    >>> bind_task_call(MethodSignature.of(retrain), {"a": 1}, {"lr": 0.5}, state="m")
    ((), {'payload': {'a': 1}, 'model': 'm', 'lr': 0.5})
    >>> def report(): ...
    >>> bind_task_call(MethodSignature.of(report), {"a": 1}, {})
    ((), {})
    """
    parameters = signature.parameters
    target = next(
        (
            p
            for p in parameters
            if p.kind in _POSITIONAL and p.name not in defaults and p.name not in STATE_PARAMS
        ),
        None,
    )
    if target is None:
        takes_args = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
        positional: tuple[Any, ...] = (payload,) if takes_args else ()
        return positional, bind_arguments(signature, _NO_PARAMS, defaults, state=state)
    rest = MethodSignature(
        tuple(p for p in parameters if p is not target), signature.hints, signature.accepts_any
    )
    kwargs = bind_arguments(rest, _NO_PARAMS, defaults, state=state)
    if target.kind is inspect.Parameter.POSITIONAL_ONLY:
        return (payload,), kwargs
    return (), {target.name: payload, **kwargs}


_NO_PARAMS = RequestParams()
