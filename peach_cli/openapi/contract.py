"""What a request to each endpoint may carry and what it answers, read from the code statically.

``endpoint_contract(endpoint)`` reads the source each component of an ``EndpointSpec`` runs
(``ast``; no user code runs): the method's parameters with their JSON Schemas, defaults
(the component's ``args`` first) and whether they are required, whether it streams, the
docstring, and the schema of its result. ``peach_cli.openapi.document`` writes the OpenAPI
document from it; a docs page or a fuzzer can read it directly::

    contract = endpoint_contract(plan.endpoints["greet"])
    [(p.name, p.schema, p.required) for p in contract.parameters]
    # [('name', {'type': 'string'}, True), ('lang', {'type': 'string', 'enum': [...]}, False)]

The parameters follow the request contract (``peach_cli.runtime.contract.binding``):
``model`` and ``init_state`` are never a request's, ``*args``/``**kwargs`` and positional-only
parameters cannot be named by one, and ``stream`` is taken out before binding.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Literal

from peach_cli.openapi.schemas import Annotations, FunctionNode, Schema, any_of, fits
from peach_cli.project.notebook import is_generator
from peach_cli.runtime.contract.binding import STATE_PARAMS
from peach_cli.runtime.plan import EndpointSpec

QueryStyle = Literal["form", "json"]
"""How a query string carries a parameter: as text (a list as repeated keys) or as JSON text."""


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()
"""A parameter's ``default`` when it has none that can be written as JSON."""


@dataclass(frozen=True)
class Parameter:
    """One request parameter of an endpoint."""

    name: str
    schema: dict[str, Any]
    """Its JSON Schema (``{}``: any value), as a JSON body carries it."""
    required: bool
    default: Any = NO_DEFAULT
    """The component's ``args`` value, else the signature's literal default, else NO_DEFAULT."""
    query: QueryStyle = "form"
    description: str | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


@dataclass(frozen=True)
class Unexpressed:
    """An annotation (or a part of one) that no JSON Schema expresses: ``{}`` stands for it."""

    component: str
    parameter: str
    node: ast.expr


@dataclass(frozen=True)
class EndpointContract:
    """What a request to one endpoint carries and what it answers."""

    name: str
    url: str
    parameters: tuple[Parameter, ...]
    streams: bool
    """The method is a generator: a request must send ``stream=true`` and gets a stream."""
    media_types: tuple[str, ...]
    """The media types of its streams (one per arm that streams, usually one)."""
    summary: str | None
    description: str | None
    result: dict[str, Any]
    """The JSON Schema of ``result`` in the envelope (``{}`` when not known)."""
    open_parameters: bool = False
    """A component takes ``**kwargs``: any other name reaches it too."""
    unexpressed: tuple[Unexpressed, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class MethodReading:
    """One method, read from the ``ast`` of the code its component runs."""

    function: FunctionNode | None
    annotations: Annotations


class SourceCache:
    """Each distinct source parsed once (a decorator notebook's endpoints share theirs)."""

    def __init__(self) -> None:
        self._trees: dict[str, tuple[dict[str, FunctionNode], Annotations]] = {}

    def method(self, source: str, name: str) -> MethodReading:
        found = self._trees.get(source)
        if found is None:
            try:
                body = ast.parse(source).body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                body = []
            functions: dict[str, FunctionNode] = {}
            for node in body:  # the last top-level definition wins, as when run in order
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    functions[node.name] = node
                elif isinstance(node, (ast.Assign, ast.Import, ast.ImportFrom, ast.ClassDef)):
                    for bound in _bound_names(node):
                        functions.pop(bound, None)
            found = self._trees[source] = (functions, Annotations(body))
        functions, annotations = found
        return MethodReading(functions.get(name), annotations)


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.ClassDef):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    return []


@dataclass(frozen=True)
class _Param:
    name: str
    schema: Schema
    required: bool
    default: Any


def method_parameters(
    function: FunctionNode, annotations: Annotations, args: dict[str, Any]
) -> list[_Param]:
    """A method's request parameters, in signature order (``args`` as defaults)."""
    a = function.args
    positional = [*a.posonlyargs, *a.args]
    defaults: dict[str, ast.expr] = {
        p.arg: d
        for p, d in zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True)
    }
    defaults.update(
        {p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None}
    )
    found: list[_Param] = []
    for parameter in [*a.args, *a.kwonlyargs]:
        name = parameter.arg
        if name in STATE_PARAMS:
            continue
        schema = annotations.schema(parameter.annotation) if parameter.annotation else Schema({})
        if name in defaults and _is_none(defaults[name]):  # `x: int = None` takes None too
            schema = Schema(any_of([schema.schema, {"type": "null"}]), schema.unexpressed)
        if name in args:
            default, required = args[name], False
        elif name in defaults:
            default, required = _literal_default(defaults[name], annotations), False
        else:
            default, required = NO_DEFAULT, True
        if default is not NO_DEFAULT and not fits(default, schema.schema):
            default = NO_DEFAULT  # an args value of another type: passed on, not documented
        found.append(_Param(name, schema, required, default))
    return found


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _literal_default(node: ast.expr, annotations: Annotations) -> Any:
    """A default written as a literal, or as a member of one of the module's enums
    (``Level.LOW``: its value, as a request carries it)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        member = annotations.member_value(node.value.id, node.attr)
        return member if _is_json(member) else NO_DEFAULT
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NO_DEFAULT
    return _as_json(value) if _is_json(value) else NO_DEFAULT


def _as_json(value: Any) -> Any:
    """A literal as JSON has it: a tuple is a list."""
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def result_schema(function: FunctionNode | None, annotations: Annotations) -> dict[str, Any]:
    """The JSON Schema of what a method returns, from its return annotation (``{}`` without
    one, and for a tuple: a drift-aware ``(items, meta)`` answers only its items)."""
    returns = function.returns if function is not None else None
    if returns is None:
        return {}
    target = returns.value if isinstance(returns, ast.Subscript) else returns
    if isinstance(target, (ast.Name, ast.Attribute)) and (
        (target.id if isinstance(target, ast.Name) else target.attr) in ("tuple", "Tuple")
    ):
        return {}
    return annotations.schema(returns).schema


def _query_style(schema: dict[str, Any]) -> QueryStyle:
    """Plain text for scalars and lists of scalars; JSON text for anything nested."""
    if _scalar(schema):
        return "form"
    options = schema.get("anyOf") or [schema]
    for option in options:
        if option.get("type") == "array" and _scalar(option.get("items", {})):
            continue
        if not _scalar(option):
            return "json"
    return "form"


def _scalar(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    if kinds is None:
        return "enum" in schema or "anyOf" not in schema and not schema
    kinds = [kinds] if isinstance(kinds, str) else kinds
    return all(k in ("string", "integer", "number", "boolean", "null") for k in kinds)


def _docstring(function: FunctionNode | None) -> tuple[str | None, str | None]:
    """(summary, description): the docstring's first paragraph, and the rest."""
    if function is None:
        return None, None
    text = ast.get_docstring(function, clean=True)
    if not text:
        return None, None
    first, _, rest = text.strip().partition("\n\n")
    summary = " ".join(first.split())
    return summary or None, rest.strip() or None


def endpoint_contract(endpoint: EndpointSpec, cache: SourceCache | None = None) -> EndpointContract:
    """The request parameters and answers of one endpoint, read statically."""
    cache = cache or SourceCache()
    arms = [endpoint.primary] + [
        name for name in endpoint.components if name not in (endpoint.primary, endpoint.fallback)
    ]
    readings = {
        name: cache.method(spec.source, spec.method) for name, spec in endpoint.components.items()
    }
    parameters: dict[str, Parameter] = {}
    unexpressed: list[Unexpressed] = []
    open_parameters = False
    streams = False
    media_types: list[str] = []
    for arm in arms:
        reading = readings[arm]
        function = reading.function
        if function is None:
            open_parameters = True  # not a def of the notebook: its signature is not known
            continue
        open_parameters = open_parameters or function.args.kwarg is not None
        if is_generator(function):
            streams = True
            media_types.append(endpoint.components[arm].media_type)
        for found in method_parameters(
            function, reading.annotations, endpoint.components[arm].args
        ):
            unexpressed += [Unexpressed(arm, found.name, node) for node in found.schema.unexpressed]
            known = parameters.get(found.name)
            if known is None:
                parameters[found.name] = Parameter(
                    found.name,
                    found.schema.schema,
                    found.required,
                    found.default,
                    _query_style(found.schema.schema),
                )
            elif found.required and not known.required:
                parameters[found.name] = Parameter(
                    known.name, known.schema, True, NO_DEFAULT, known.query
                )
    if endpoint.ab is not None and endpoint.ab.param not in parameters:
        parameters[endpoint.ab.param] = Parameter(
            endpoint.ab.param,
            {"type": "string"},
            False,
            description=f"picks the arm of the A/B test (by {endpoint.ab.by})",
        )
    results = [
        result_schema(readings[name].function, readings[name].annotations)
        for name in [*arms, *([endpoint.fallback] if endpoint.fallback else [])]
    ]
    summary, description = _docstring(readings[endpoint.primary].function)
    return EndpointContract(
        name=endpoint.name,
        url=endpoint.url,
        parameters=tuple(parameters.values()),
        streams=streams,
        media_types=tuple(dict.fromkeys(media_types)),
        summary=summary,
        description=description,
        result=any_of(results),
        open_parameters=open_parameters,
        unexpressed=tuple(unexpressed),
    )
