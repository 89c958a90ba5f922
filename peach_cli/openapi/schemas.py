"""Annotations read from a method's ``ast`` as JSON Schemas (OpenAPI 3.1), without running them.

``Annotations`` knows the names of one module (the code a component runs): the ``Enum``
classes of ``str``/``int`` values it defines, and ``typing``'s names however imported.
``annotation_schema`` turns one annotation into a JSON Schema and the parts it cannot
express (each becomes ``{}`` where it stands; ``peach validate`` warns about them, PC312)::

    names = Annotations(ast.parse("class Color(str, Enum):\\n    RED = 'red'\\n").body)
    names.schema(ast.parse("list[Color] | None", mode="eval").body)
    # Schema({'anyOf': [{'type': 'array', 'items': {'type': 'string', 'enum': ['red']}},
    #                   {'type': 'null'}]}, unexpressed=())

``int``, ``float``, ``bool``, ``str``, ``None``, ``list``/``tuple``/``set`` (and their
``typing`` names), ``dict``, ``Optional``, ``Union`` and ``X | Y``, ``Literal``, ``Annotated``,
``Any``, the dates, ``UUID`` and ``Decimal`` the request contract converts, and the notebook's
enums — nested as deep as written. A string annotation (``"int"``, or any annotation under
``from __future__ import annotations``) is read as the expression it holds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

_SCALARS: dict[str, dict[str, Any]] = {
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "str": {"type": "string"},
    "None": {"type": "null"},
    "NoneType": {"type": "null"},
    "Decimal": {"type": "number"},
    "UUID": {"type": "string", "format": "uuid"},
    "date": {"type": "string", "format": "date"},
    "datetime": {"type": "string", "format": "date-time"},
    "time": {"type": "string", "format": "time"},
}
_ANY = frozenset({"Any", "object"})
_SEQUENCES = frozenset(
    {
        "list",
        "List",
        "Sequence",
        "MutableSequence",
        "Iterable",
        "Collection",
        "tuple",
        "Tuple",
        "set",
        "Set",
        "frozenset",
        "FrozenSet",
        "AbstractSet",
    }
)
_TUPLES = frozenset({"tuple", "Tuple"})
_MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping"})
_ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum"})
_LITERAL_KINDS = {bool: "boolean", int: "integer", float: "number", str: "string"}
_MAX_DEPTH = 40
"""Nesting past this is not read (``list[list[…]]`` forty deep): ``{}`` there."""


@dataclass(frozen=True)
class Schema:
    """A JSON Schema, and the parts of the annotation it could not express (as written)."""

    schema: dict[str, Any]
    unexpressed: tuple[ast.expr, ...] = ()


@dataclass
class _Reading:
    unexpressed: list[ast.expr] = field(default_factory=list)

    def cannot(self, node: ast.expr) -> dict[str, Any]:
        self.unexpressed.append(node)
        return {}


class Annotations:
    """The names one module's annotations may use: its enums (read from its statements)."""

    def __init__(self, statements: Iterable[ast.stmt]) -> None:
        self.members: dict[str, dict[str, Any] | None] = {}
        """Enum class → its members' values by name (None: one is not a str/int literal)."""
        self.classes: set[str] = set()
        for node in statements:
            if isinstance(node, ast.ClassDef):
                self.classes.add(node.name)
                if any(_last_name(base) in _ENUM_BASES for base in node.bases):
                    self.members[node.name] = _enum_members(node)
                else:
                    self.members.pop(node.name, None)  # redefined as another class

    def schema(self, annotation: ast.expr) -> Schema:
        """The JSON Schema of one annotation, as a request's JSON body carries the value."""
        reading = _Reading()
        found = self._read(annotation, reading, 0)
        return Schema(found, tuple(reading.unexpressed))

    def _read(self, node: ast.expr, reading: _Reading, depth: int) -> dict[str, Any]:
        if depth > _MAX_DEPTH:
            return reading.cannot(node)
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {"type": "null"}
            if isinstance(node.value, str):  # a forward reference: "int", "list[Color]"
                try:
                    inner = ast.parse(node.value.strip(), mode="eval").body
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    return reading.cannot(node)
                _place(inner, node)
                return self._read(inner, reading, depth + 1)
            if node.value is Ellipsis:
                return {}
            return reading.cannot(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return any_of([self._read(n, reading, depth + 1) for n in _union_members(node)])
        if isinstance(node, ast.Subscript):
            return self._subscript(node, reading, depth)
        name = _last_name(node)
        if name is None:
            return reading.cannot(node)
        if name in _ANY:
            return {}
        if name in _SCALARS and name not in self.classes:
            return dict(_SCALARS[name])
        if name in self.members:
            members = self.members[name]
            return _literal_schema(list(members.values())) if members else reading.cannot(node)
        if name in _SEQUENCES and name not in self.classes:
            return {"type": "array"}
        if name in _MAPPINGS and name not in self.classes:
            return {"type": "object"}
        return reading.cannot(node)

    def _subscript(self, node: ast.Subscript, reading: _Reading, depth: int) -> dict[str, Any]:
        name = _last_name(node.value)
        arguments = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if name in self.classes:
            return reading.cannot(node)
        if name == "Optional" and len(arguments) == 1:
            return any_of([self._read(arguments[0], reading, depth + 1), {"type": "null"}])
        if name == "Union":
            return any_of([self._read(a, reading, depth + 1) for a in arguments])
        if name == "Annotated" and arguments:
            return self._read(arguments[0], reading, depth + 1)
        if name == "Literal":
            values = [self._literal(a) for a in arguments]
            if any(v is _NOT_LITERAL for v in values):
                return reading.cannot(node)
            return _literal_schema(values)
        if name in _TUPLES:
            if len(arguments) == 2 and _is_ellipsis(arguments[1]):
                return {"type": "array", "items": self._read(arguments[0], reading, depth + 1)}
            items = [self._read(a, reading, depth + 1) for a in arguments]
            count = len(items)
            return {
                "type": "array",
                "prefixItems": items,
                "minItems": count,
                "maxItems": count,
            }
        if name in _SEQUENCES and len(arguments) == 1:
            return {"type": "array", "items": self._read(arguments[0], reading, depth + 1)}
        if name in _MAPPINGS and len(arguments) == 2:
            key = self._read(arguments[0], reading, depth + 1)
            if key not in ({"type": "string"}, {}):
                reading.cannot(arguments[0])  # JSON keys are strings
            value_schema = self._read(arguments[1], reading, depth + 1)
            schema: dict[str, Any] = {"type": "object"}
            if value_schema:
                schema["additionalProperties"] = value_schema
            return schema
        return reading.cannot(node)

    def member_value(self, enum: str, member: str) -> Any:
        """The value of ``enum.member`` when it is one of this module's enums' str or int
        members, else a value that is not JSON.

        >>> names = Annotations(ast.parse("class L(IntEnum):\\n    LOW = 1\\n").body)
        >>> names.member_value("L", "LOW")
        1
        """
        return (self.members.get(enum) or {}).get(member, _NOT_LITERAL)

    def _literal(self, node: ast.expr) -> Any:
        """A ``Literal`` argument's value; ``Color.RED`` is that enum member's value."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return self.member_value(node.value.id, node.attr)
        return _literal(node)


class _NotLiteral:
    def __repr__(self) -> str:
        return "<not a literal>"


_NOT_LITERAL: Any = _NotLiteral()


def _literal(node: ast.expr) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return _NOT_LITERAL


def _literal_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {_LITERAL_KINDS.get(type(v), "null") for v in values}
    schema: dict[str, Any] = {}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    schema["enum"] = list(dict.fromkeys(values))
    return schema


def _enum_members(node: ast.ClassDef) -> dict[str, Any] | None:
    """An enum class's members and their values, when each is a str or int literal."""
    values: dict[str, Any] = {}
    for statement in node.body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
            value = statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets = [statement.target]
            value = statement.value
        else:
            continue
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if not names or all(n.startswith("_") for n in names):
            continue
        member = _literal(value)
        if isinstance(member, bool) or not isinstance(member, (str, int)):
            return None
        for name in names:
            values[name] = member
    return values or None


def _union_members(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return [*_union_members(node.left), *_union_members(node.right)]
    return [node]


def any_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    """One schema for "any of these": ``{"type": ["integer", "null"]}`` when each is a bare
    type, else ``anyOf``; ``{}`` when any of them accepts anything."""
    unique: list[dict[str, Any]] = []
    for schema in schemas:
        if not schema:
            return {}
        if schema not in unique:
            unique.append(schema)
    if len(unique) <= 1:
        return unique[0] if unique else {}
    return _merged(unique) or {"anyOf": unique}


_TYPED_KEYWORDS = frozenset(
    {"items", "prefixItems", "minItems", "maxItems", "additionalProperties", "format"}
)
"""Keywords that apply to one JSON type only: ``{"type": ["array", "null"], "items": …}``."""


def _merged(schemas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One schema of a type list for schemas of one distinct type each whose other keywords
    apply to that type alone (``list[int] | None``); None when they cannot merge."""
    merged: dict[str, Any] = {"type": []}
    for schema in schemas:
        kind = schema.get("type")
        rest = set(schema) - {"type"}
        if not isinstance(kind, str) or kind in merged["type"] or not rest <= _TYPED_KEYWORDS:
            return None
        if rest & set(merged):
            return None
        merged["type"].append(kind)
        merged.update({k: schema[k] for k in rest})
    return merged


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "string": (str,),
    "null": (type(None),),
    "array": (list,),
    "object": (dict,),
}


def fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether a JSON value is valid under a schema this module writes (``type``, ``enum``,
    ``items``, ``prefixItems``, ``additionalProperties``, ``anyOf``).

    >>> fits([1, None], {"type": "array", "items": {"type": ["integer", "null"]}})
    True
    >>> fits(True, {"type": "integer"}), fits("x", {"enum": ["a"]})
    (False, False)
    """
    if "anyOf" in schema:
        return any(fits(value, option) for option in schema["anyOf"])
    if "enum" in schema and not any(
        value == option and type(value) is type(option) for option in schema["enum"]
    ):
        return False
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is_kind(value, kind) for kind in kinds):
            return False
    if isinstance(value, list):
        prefix = schema.get("prefixItems")
        if prefix is not None:
            return len(value) == len(prefix) and all(map(fits, value, prefix))
        return all(fits(item, schema.get("items", {})) for item in value)
    if isinstance(value, dict):
        return all(fits(item, schema.get("additionalProperties", {})) for item in value.values())
    return True


def _is_kind(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    if isinstance(value, float) and kind == "integer":
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(kind, object))


def _last_name(node: ast.expr) -> str | None:
    """``Optional`` for ``Optional``, ``typing.Optional`` and ``t.Optional``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_ellipsis(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _place(inner: ast.expr, outer: ast.expr) -> None:
    """Give a string annotation's parsed nodes the string's own position (for warnings)."""
    for child in ast.walk(inner):
        if hasattr(child, "lineno"):
            child.lineno = outer.lineno  # type: ignore[attr-defined]
            child.col_offset = outer.col_offset  # type: ignore[attr-defined]
            child.end_lineno = outer.end_lineno  # type: ignore[attr-defined]
            child.end_col_offset = outer.end_col_offset  # type: ignore[attr-defined]


def annotation_text(node: ast.expr) -> str:
    """An annotation as written (``list[Matrix]``), for messages."""
    try:
        text = ast.unparse(node)
    except (ValueError, RecursionError):
        return "?"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    return text if len(text) <= 80 else text[:77] + "..."
