"""A method's result on its way out: drift, emptiness, JSON, chunks, tracebacks."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import traceback
from typing import Any

from peach_cli.runtime.contract.errors import ResultNotJSON
from peach_cli.runtime.plan import NotebookCode

_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""peach's replica runtime (``peach_cli/runtime/``): its frames are not the user's."""


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


CONTINUATION = "  | "
"""What starts each continuation line of an exception's text in a traceback for a log (the
mark of ``peach_cli.boundary.CONTINUATION``): no line of a message can pass for a request
line such as ``GET /admin 200 main …``."""


def describe_exception(error: BaseException) -> str:
    """``TypeName: text`` — what a method_error says about the user's exception."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def code_filename(code: NotebookCode) -> str:
    """The filename notebook code is compiled under: ``<notebooks/X.ipynb>``. pdb and
    ``linecache`` take a name in angle brackets as it is, so they show the extracted code
    registered for it, never the ``.ipynb`` file's JSON."""
    return f"<{code.source_name}>"


def cell_line(spec: NotebookCode, line: int) -> tuple[int | None, int]:
    """The cell and the line in it of line ``line`` of the extracted module (cell None:
    before every cell, or code not joined from cells).

    >>> from types import SimpleNamespace
    >>> cell_line(SimpleNamespace(line_map=((1, 1, 1), (7, 2, 1))), 10)
    (2, 4)
    """
    found: tuple[int | None, int] = (None, line)
    for first_line, cell, first_cell_line in spec.line_map:
        if first_line <= line:
            found = (cell, first_cell_line + line - first_line)
    return found


def module_line(spec: NotebookCode, cell: int, line: int) -> int | None:
    """The line of the extracted module that is line ``line`` of cell ``cell`` (None: the
    cell is not in the module)."""
    for first_line, number, first_cell_line in spec.line_map:
        if number == cell:
            return first_line + line - first_cell_line
    return None


def notebook_position(spec: NotebookCode, line: int) -> str:
    """Where line ``line`` of the extracted module is in the notebook: ``cell 3, line 2``."""
    cell, number = cell_line(spec, line)
    return f"line {line}" if cell is None else f"cell {cell}, line {number}"


def user_traceback(error: BaseException, spec: NotebookCode) -> str:
    """The traceback from the first frame in the user's code on, for the server log (the
    exception's text ends it, each line after its first marked with ``CONTINUATION``).

    Frames in the extracted notebook code name the notebook cell and line; peach's own
    runtime frames (``trigger_task_with_event`` raising its ``ValueError``) are left out.
    """
    filename = code_filename(spec)
    frames = traceback.extract_tb(error.__traceback__)
    start = next((i for i, f in enumerate(frames) if f.filename == filename), 0)
    lines = ["Traceback (most recent call last):\n"]
    for frame in frames[start:]:
        if frame.filename.startswith(_RUNTIME_DIR):  # trigger_task_with_event raising, ...
            continue
        if frame.filename == filename and frame.lineno is not None:
            where = f"{spec.source_name}, {notebook_position(spec, frame.lineno)}"
        else:
            where = f"{frame.filename}, line {frame.lineno}"
        lines.append(f"  File {where}, in {frame.name}\n")
        if frame.line:
            lines.append(f"    {frame.line.strip()}\n")
    lines.append(describe_exception(error).replace("\n", "\n" + CONTINUATION))
    return "".join(lines)
