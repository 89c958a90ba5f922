"""How `peach COMMAND --help` names the values options and arguments take.

Typer 0.2x writes them as Python types, ``<bool>`` beside every flag, ``<list[str]>``,
``<float>``, and a required argument as ``{target}`` in the usage line. peach shows what
a user types instead, as click and most CLIs do: nothing beside a flag, ``TEXT``,
``INTEGER``, ``FLOAT``, ``PATH`` or the choices beside an option, and arguments in capitals
(``peach ask [OPTIONS] TARGET [ITEMS]...``). ``install()`` is called once, before the app
is built; it changes only how help is rendered.
"""

from __future__ import annotations

from typing import Any

_LABELS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN"}


def classic_label(label: str) -> str:
    """``<list[str]>`` → ``TEXT``, ``<int>`` → ``INTEGER``, ``<path>`` → ``PATH``, choices kept.

    >>> [classic_label(x) for x in ("<str>", "<list[str]>", "<path>", "<text|json>", "<int range>")]
    ['TEXT', 'TEXT', 'PATH', 'text|json', 'INTEGER']
    """
    inner = label[1:-1] if label.startswith("<") and label.endswith(">") else label
    if inner.startswith("list[") and inner.endswith("]"):
        inner = inner[5:-1]
    inner = inner.removesuffix(" range")
    if "|" in inner:
        return inner
    return _LABELS.get(inner, inner.upper())


def install() -> None:
    """Render metavars the classic way (a no-op if typer's internals are not the expected ones)."""
    try:
        from typer import core
    except ImportError:  # pragma: no cover
        return
    parameter = getattr(core, "_TyperParameter", None)
    option = getattr(core, "TyperOption", None)
    argument = getattr(core, "TyperArgument", None)
    if parameter is None or option is None or argument is None:  # pragma: no cover
        return
    if getattr(parameter, "_peach_metavars", False):
        return
    display_type = parameter.display_type
    option_display = option.display_type_rich

    def classic_display_type(self: Any, ctx: Any) -> str:
        return classic_label(display_type(self, ctx))

    def option_display_type_rich(self: Any, ctx: Any) -> str | None:
        if self.metavar is None and (self.is_flag or self.count):
            return None  # a flag takes no value
        return option_display(self, ctx)

    def usage_display_name(self: Any) -> str:
        name = self.metavar if self.metavar is not None else self.name.upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    parameter.display_type = classic_display_type
    option.display_type_rich = option_display_type_rich
    if hasattr(argument, "_usage_display_name"):
        argument._usage_display_name = usage_display_name
    parameter._peach_metavars = True
