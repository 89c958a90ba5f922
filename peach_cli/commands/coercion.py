"""Turn command-line words into the values peach's commands take, without pydantic.

Typer 0.29 converts every parameter of the command being run through a pydantic
``TypeAdapter`` it builds on the spot: importing pydantic and building the adapters cost
about 0.12 s of CPU on every command, often more than the command's own start (`peach
status` took 0.53 CPU-s, 0.42 without them). peach's parameters are all ``str``, ``int``,
``float``, ``bool``, ``Path`` or lists of them (typer's own ``--install-completion``
too), which plain Python converts exactly as click
always did: ``install()`` makes typer convert those that way and leaves any other
annotation, or any parameter with a ``parser``, ranges or file options, to typer's adapters.
A value that is no number is refused as click refused it (``'abc' is not a valid
integer.``), naming the value. Measured by ``benchmarks/cli_startup.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

_NUMBERS: dict[Any, str] = {int: "integer", float: "number"}
_BOOLEANS = {
    **dict.fromkeys(("1", "true", "t", "yes", "y", "on"), True),
    **dict.fromkeys(("", "0", "false", "f", "no", "n", "off"), False),
}


def _boolean(value: Any) -> bool:
    """A flag's value, or a boolean option's word as pydantic read it (``yes``, ``off``)."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word not in _BOOLEANS:
        raise ValueError(f"{value!r} is not a valid boolean.")
    return _BOOLEANS[word]


def _plain(annotation: Any) -> Callable[[Any], Any] | None:
    """How to convert one word to ``annotation``, or None when it is not a plain type."""
    if annotation is str:
        return str
    if annotation is bool:
        return _boolean
    if annotation is Path:
        return lambda value: value if isinstance(value, Path) else Path(os.fsdecode(value))
    if annotation in _NUMBERS:
        kind = _NUMBERS[annotation]

        def number(value: Any) -> Any:
            if isinstance(value, annotation) and not isinstance(value, bool):
                return value
            try:
                return annotation(value)
            except (TypeError, ValueError):
                raise ValueError(f"{value!r} is not a valid {kind}.") from None

        return number
    return None


def plain_conversion(annotation: Any, parameter_info: Any) -> Callable[[Any], Any] | None:
    """The conversion of a parameter typed ``annotation`` (a list: of each item), or None
    when typer's own must run: another type, a ``parser``, a range. A ``Path`` is only
    made a ``Path`` here; typer's path checks (``exists=`` and the like) still run after.

    >>> from typer.models import OptionInfo
    >>> plain_conversion(int, OptionInfo())("8000")
    8000
    >>> plain_conversion(list[Path], OptionInfo())(("a", "b"))
    [PosixPath('a'), PosixPath('b')]
    >>> plain_conversion(float, OptionInfo(min=0)) is None
    True
    >>> plain_conversion(int, OptionInfo())("8k")
    Traceback (most recent call last):
    ...
    ValueError: '8k' is not a valid integer.
    """
    if parameter_info.parser is not None or getattr(parameter_info, "click_type", None):
        return None
    if parameter_info.min is not None or parameter_info.max is not None:
        return None
    if getattr(parameter_info, "path_type", None) is not None:
        return None
    if get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        item = _plain(item_type)
        if item is None:
            return None
        return lambda values: [
            item(value) for value in (values if isinstance(values, (list, tuple)) else [values])
        ]
    return _plain(annotation)


def install() -> None:
    """Convert plain parameters without pydantic (a no-op when typer's internals differ)."""
    try:
        from typer import core
        from typer._click.exceptions import BadParameter
        from typer._coercion import RuntimeParam
        from typer._param_types import coerce_cli_path
    except ImportError:  # pragma: no cover - another typer: its own conversion runs
        return
    build_runtime_param = getattr(core, "build_runtime_param", None)
    if build_runtime_param is None or getattr(build_runtime_param, "_peach_plain", False):
        return

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):  # type: ignore[misc]
        convert: Callable[[Any], Any]

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                value = self.convert(value)
            except ValueError as error:
                raise BadParameter(str(error), ctx=ctx, param=param) from None
            if self.annotation is Path:
                return check_path(value, self.parameter_info, param, ctx)
            if self.annotation == list[Path]:
                return [check_path(item, self.parameter_info, param, ctx) for item in value]
            return value

    def check_path(path: Path, parameter_info: Any, param: Any, ctx: Any) -> Any:
        return coerce_cli_path(path, parameter_info, path_type=Path, param=param, ctx=ctx)

    def build_plain_first(descriptor: Any) -> Any:
        convert = None
        if descriptor.file_annotation is None:
            convert = plain_conversion(descriptor.annotation, descriptor.parameter_info)
        if convert is None:
            return build_runtime_param(descriptor)
        return PlainRuntimeParam(
            annotation=descriptor.annotation,
            parameter_info=descriptor.parameter_info,
            convert=convert,
        )

    build_plain_first._peach_plain = True  # type: ignore[attr-defined]
    core.build_runtime_param = build_plain_first
