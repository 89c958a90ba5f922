"""No help text loses words to Rich markup: `peach X --help` prints every word its help says.

The CLI renders help with Rich markup (``rich_markup_mode="rich"``), so ``[bold]…[/]`` is
a style — and so would be any other ``[word]`` Rich's markup parser takes for a tag, which
then vanishes from the help: ``pip install 'peach-cli[fuzz]'`` printed
``pip install 'peach-cli'``, and a name rule ``[a-z0-9_-]`` printed nothing. For every
command (groups included), each word of its help, its epilog and its parameters' help —
the styles Rich knows left out, an escaped ``\\[`` read as ``[`` — must be in what
``--help`` prints (as the CLI reference in docs/reference/cli.md renders it, wide enough
that no word is folded).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")
"""Rich's markup tag (``rich.markup.RE_TAGS``): backslashes, then ``[tag]``."""


def _reference() -> Any:
    spec = importlib.util.spec_from_file_location(
        "docs_reference_markup", ROOT / "scripts" / "docs_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HELP_COLUMNS = 400  # no word folded across lines
    return module


REFERENCE = _reference()
COMMANDS = {" ".join(path): (path, command) for path, command in REFERENCE.commands()}


def _is_style(tag: str) -> bool:
    """Whether ``tag`` is markup the help means: a style Rich knows, or a closing tag."""
    from rich.errors import StyleSyntaxError
    from rich.style import Style

    if tag == "/" or tag.startswith("link"):
        return True
    try:
        Style.parse(tag.removeprefix("/"))
    except StyleSyntaxError:
        return False
    return True


def meant(text: str) -> str:
    """``text`` as it should read: Rich's styles left out, every other ``[…]`` kept.

    >>> meant("[bold]peach fuzz[/] needs pip install 'peach-cli[fuzz]'")
    "peach fuzz needs pip install 'peach-cli[fuzz]'"
    >>> meant(r"a name is \\[a-z]")
    'a name is [a-z]'
    """

    def keep_or_drop(match: re.Match[str]) -> str:
        slashes, tag = match.group(1), match.group(2)
        if len(slashes) % 2:  # escaped: the bracket is text
            return slashes[:-1] + f"[{tag}]"
        return slashes + ("" if _is_style(tag) else f"[{tag}]")

    return _TAG.sub(keep_or_drop, text)


def sources(command: Any) -> list[str]:
    texts = [command.help or "", command.epilog or ""]
    texts += [getattr(parameter, "help", None) or "" for parameter in command.params]
    return [text for text in texts if text]


def test_every_command_is_checked() -> None:
    assert {"peach init", "peach fuzz", "peach env build", "peach task run"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_help_text_is_lost_to_rich_markup(name: str) -> None:
    path, command = COMMANDS[name]
    printed = REFERENCE.help_text(path, command)
    lost = [
        word for text in sources(command) for word in meant(text).split() if word not in printed
    ]
    assert not lost, f"`{name} --help` lost {lost} (Rich took them for markup)"
