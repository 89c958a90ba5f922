"""The documentation's generated references: an MkDocs hook, and the functions behind it.

A page asks for a reference with a marker alone on a line, replaced at build time:

    <!-- peach:cli -->         every command's `--help`, from the Typer app itself
    <!-- peach:conf -->        the conf reference, from `peach schema` (the conf model)
    <!-- peach:codes -->       the table of `peach validate` codes, from ``diagnostics.CODES``
    <!-- peach:errors -->      the envelope's error codes and HTTP statuses, from the contract

Nothing here is kept by hand, so the reference cannot differ from the tool.
``tests/test_docs.py`` checks that the help shown is what `peach COMMAND --help` prints.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from contextlib import redirect_stdout
from typing import Any

HELP_COLUMNS = 100
"""The terminal width the help is rendered at (the tests run `--help` at the same width)."""

MARKER = re.compile(r"^<!-- peach:(\w+) -->$", re.MULTILINE)


def commands() -> Iterator[tuple[list[str], Any]]:
    """Every command of the CLI with its path (``["peach", "env", "list"]``), groups first."""
    import typer

    from peach_cli.cli import app

    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        if hasattr(command, "list_commands"):
            context = command.context_class(command, info_name=path[-1])
            for name in command.list_commands(context):
                yield from walk(command.get_command(context, name), [*path, name])

    yield from walk(typer.main.get_command(app), ["peach"])


def _context(path: list[str], command: Any) -> Any:
    """The context `peach ... --help` would have: the app's settings (``-h``), and parents
    so that the usage line names the whole path."""
    import typer

    from peach_cli.cli import app

    parent = None
    current: Any = typer.main.get_command(app)
    for depth, name in enumerate(path[:-1]):
        parent = current.make_context(name, [], parent=parent, resilient_parsing=True)
        current = current.get_command(parent, path[depth + 1])
    return command.make_context(path[-1], [], parent=parent, resilient_parsing=True)


def help_text(path: list[str], command: Any) -> str:
    """What `peach ... --help` prints on a terminal HELP_COLUMNS wide, without colour."""
    saved = {key: os.environ.get(key) for key in ("COLUMNS", "NO_COLOR", "TERM")}
    os.environ.update(COLUMNS=str(HELP_COLUMNS), NO_COLOR="1", TERM="dumb")
    try:
        context = _context(path, command)
        printed = io.StringIO()
        with redirect_stdout(printed):
            returned = command.get_help(context)
        text = returned or printed.getvalue()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return tidy(text)


def tidy(text: str) -> str:
    """Trailing spaces and blank edges removed: how help compares, in docs and in tests."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def cli_reference() -> str:
    parts = []
    for path, command in commands():
        name = " ".join(path)
        summary = (command.help or "").strip().split("\n")[0]
        parts.append(f"## `{name}`\n\n{summary}\n\n```text\n$ {name} --help\n")
        parts.append(help_text(path, command) + "\n```\n")
    return "\n".join(parts)


def _type_of(spec: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in spec:
        return " or ".join(_type_of(option, defs) for option in spec["anyOf"])
    if "enum" in spec:
        return " | ".join(f"`{value}`" for value in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(spec.get('items', {}), defs)}"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"mapping of name → {_type_of(spec['additionalProperties'], defs)}"
    bounds = [
        f"{word} {spec[key]}"
        for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
        if key in spec
    ]
    return str(kind) + (f" ({', '.join(bounds)})" if bounds else "")


def _cell(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|").replace("\n", " ")


def _properties_table(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, spec in schema.get("properties", {}).items():
        default = "required" if key in required else f"`{json.dumps(spec.get('default'))}`"
        if key not in required and "default" not in spec:
            default = "-"
        description = spec.get("description", "")
        if not description and "$ref" in spec:
            description = defs[spec["$ref"].rsplit("/", 1)[-1]].get("description", "")
        rows.append(
            f"| `{key}` | {_cell(_type_of(spec, defs))} | {_cell(default)} | {_cell(description)} |"
        )
    return "\n".join(rows)


def conf_reference() -> str:
    """The conf model as tables: the top level, then each object it is made of."""
    from peach_cli.project.conf import json_schema

    schema = json_schema()
    defs = schema.get("$defs", {})
    parts = [
        "## The top level\n",
        schema.get("description", ""),
        "",
        _properties_table(schema, defs),
    ]
    for name, definition in defs.items():
        parts += [
            f"\n## {name}\n",
            definition.get("description", ""),
            "",
            _properties_table(definition, defs),
        ]
    parts += [
        "\n## The JSON Schema\n",
        "What `peach schema` prints, for editors (see "
        "[Editor support](../start.md#editor-support-peach-schema)):\n",
        '??? note "peach schema"\n',
        "    ```json",
        *("    " + line for line in json.dumps(schema, indent=2).split("\n")),
        "    ```",
    ]
    return "\n".join(parts)


def codes_table() -> str:
    """code | severity | title | meaning, from the code that defines them."""
    from peach_cli.project.diagnostics import CODES, MEANINGS

    rows = ["| code | severity | title | meaning |", "|---|---|---|---|"]
    for code, (severity, title) in CODES.items():
        rows.append(f"| `{code}` | {severity} | {title} | {_cell(MEANINGS.get(code, title))} |")
    return "\n".join(rows)


def errors_table() -> str:
    from peach_cli.runtime.contract.errors import ERROR_STATUS

    rows = ["| code | HTTP |", "|---|---|"]
    rows += [f"| `{code}` | {status} |" for code, status in ERROR_STATUS.items()]
    return "\n".join(rows)


GENERATORS = {
    "cli": cli_reference,
    "conf": conf_reference,
    "codes": codes_table,
    "errors": errors_table,
}


def render(markdown: str) -> str:
    """The page with each marker replaced by what it asks for (an unknown one is an error)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown reference marker <!-- peach:{name} -->")
        return GENERATORS[name]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: fill in the generated references of a page."""
    return render(markdown)
