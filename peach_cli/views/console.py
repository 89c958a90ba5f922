"""Terminal output every command shares: errors, diagnostics, tables, on a run's ``Output``.

Rich is used in ``peach_cli.views`` only (this module and one view per command that needs
more: ``dev``, ``task``, ``ask``, ``deploy``); everything else returns data or raises, and
the views decide how it looks. ``NO_COLOR`` is honoured by Rich itself.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from peach_cli.wording import count, human_size

if TYPE_CHECKING:
    from rich.console import Console

    from peach_cli.boundary import Output
    from peach_cli.doctor import Report
    from peach_cli.errors import PeachError
    from peach_cli.project.diagnostics import Diagnostic
    from peach_cli.project.scaffold import CreatedProject


def print_error(output: Output, error: PeachError) -> None:
    """Render a PeachError as one line (and a hint) on stderr; a ``ProjectInvalid`` as its
    diagnostics and a summary line, as ``peach validate`` shows them."""
    from peach_cli.boundary import markup_lines
    from peach_cli.errors import ProjectInvalid

    if isinstance(error, ProjectInvalid):
        print_diagnostics(output, error.diagnostics, summary=error.message, ok=False)
        return
    output.stderr.print(f"[bold red]error:[/] {markup_lines(error.message)}", soft_wrap=True)
    if error.hint:
        output.stderr.print(f"[dim]hint:[/] {markup_lines(error.hint)}", soft_wrap=True)


def print_defect(output: Output, error: BaseException, version: str) -> None:
    """An exception peach did not expect, as one masked, escaped line on stderr (its type,
    its message, where it was raised in peach) and where to report it. No traceback and no
    locals: either can hold a token, a secret or a path from data."""
    import traceback
    from pathlib import Path

    from peach_cli.boundary import markup

    where = ""
    frames = traceback.extract_tb(error.__traceback__)  # names and lines only: no locals
    if frames:
        frame = frames[-1]
        where = f" (at {Path(frame.filename).name}:{frame.lineno} in {frame.name})"
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - an exception whose text cannot be made
        text = "(its text could not be read)"
    if len(text) > 500:
        text = f"{text[:500]}… ({len(text) - 500} more characters)"
    what = f"{type(error).__name__}: {text}" if text else type(error).__name__
    output.stderr.print(
        f"[bold red]error:[/] peach {markup(version)} stopped on an unexpected "
        f"{markup(what)}{markup(where)}",
        soft_wrap=True,
    )
    output.stderr.print(
        "[dim]hint:[/] this is a defect of peach, not of your project: please report it with "
        "this line and the command you ran (see Reporting a defect in docs/troubleshooting.md)",
        soft_wrap=True,
    )


# --- peach validate ---------------------------------------------------------------------------

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def print_diagnostics(
    output: Output, diagnostics: list[Diagnostic], *, summary: str, ok: bool
) -> None:
    """Each diagnostic as ``file:line:col: severity CODE message``, an excerpt with a caret and
    its hint; then the summary line. One problem stays one line (no wrapping) for grep."""
    write_diagnostics(output.stdout, diagnostics, summary=summary, ok=ok)


def write_diagnostics(
    out: Console, diagnostics: list[Diagnostic], *, summary: str, ok: bool
) -> None:
    """``print_diagnostics`` on the console ``out`` (`peach dev`'s, for a rejected reload)."""
    from peach_cli.boundary import markup

    for diagnostic in diagnostics:
        style = _SEVERITY_STYLE[diagnostic.severity]
        out.print(
            f"[bold]{markup(str(diagnostic.position))}[/]: [{style}]{diagnostic.severity} "
            f"{diagnostic.code}[/] {markup(diagnostic.message)}",
            soft_wrap=True,
        )
        for line in excerpt_lines(diagnostic):
            out.print(
                markup(line), soft_wrap=True, style="dim" if line.lstrip()[:1] != "^" else style
            )
        if diagnostic.hint:
            out.print(f"  [dim]hint:[/] {markup(diagnostic.hint)}", soft_wrap=True)
    mark = "[bold green]✓[/]" if ok else "[bold red]✗[/]"
    out.print(f"{mark} {markup(summary)}", soft_wrap=True)


def print_warning_lines(output: Output, warnings: list[Diagnostic]) -> None:
    """One line per warning on stderr (when stdout holds something else: a config)."""
    from peach_cli.boundary import markup

    for warning in warnings:
        output.stderr.print(
            f"[yellow]warning[/] {markup(str(warning.position))}: {markup(warning.message)}",
            soft_wrap=True,
            highlight=False,
        )


def excerpt_lines(diagnostic: Diagnostic) -> list[str]:
    """The source line of a diagnostic and a caret under the token it is about."""
    import re

    position = diagnostic.position
    text = position.excerpt
    if text is None or not text.strip() or len(text) > 400:
        return []
    text = text.expandtabs(4).rstrip()
    number = f"{position.line:>5} | "
    lines = [f"{number}{text}"]
    if position.column is not None and 1 <= position.column <= len(text) + 1:
        start = position.column - 1
        # in a conf a token may be a path (notebooks/E.ipynb); in code, a name (pd, not pd.x)
        pattern = r"[%!]*\w+|\S" if position.cell is not None else r"[%!]*[\w./@-]+|\S"
        token = re.match(pattern, text[start:])
        width = len(token.group(0)) if token else 1
        lines.append(" " * (len(number) - 2) + "| " + " " * start + "^" * width)
    return lines


def print_json(output: Output, data: object, *, channel: str = "terminal") -> None:
    """Machine output: plain JSON on stdout, no styling (secret values shown as ``***``)."""
    output.write_report(output.secrets.json_text(data) + "\n", channel=channel)


def print_document(output: Output, document: dict, output_format: str) -> None:
    """``peach openapi``'s document, as JSON or YAML, on stdout."""
    if output_format == "yaml":
        import yaml

        document = output.secrets.shown_value(document)  # masked before YAML folds a line
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
        output.write_report(text, channel="openapi")
    else:
        print_json(output, document, channel="openapi")


# --- peach env --------------------------------------------------------------------------------


def break_path(path: str, width: int) -> list[str]:
    """``path`` in lines of at most ``width`` characters, broken after a ``/`` (a folder name
    longer than the width alone is cut).

    >>> break_path("/tmp/a-long-folder/envs/env-1be4", 18)
    ['/tmp/', 'a-long-folder/', 'envs/env-1be4']
    >>> break_path("/short", 20)
    ['/short']
    """
    width = max(width, 1)
    lines: list[str] = []
    current = ""
    for part in re.split(r"(?<=/)", path):
        while len(part) > width:  # one name longer than the width
            if current:
                lines.append(current)
                current = ""
            lines.append(part[:width])
            part = part[width:]
        if len(current) + len(part) > width and current:
            lines.append(current)
            current = ""
        current += part
    if current or not lines:
        lines.append(current)
    return lines


def print_env_list(output: Output, rows: list[dict], *, cache: str) -> None:
    """``peach env list``: a table on a terminal, one plain line per env otherwise. A path
    is never folded inside a name: it breaks after a ``/``, in its column when there is room
    for one, else on lines of its own under the table."""
    from peach_cli.boundary import markup

    out = output.stdout
    if out.is_terminal:
        from rich.table import Table
        from rich.text import Text

        cells = [
            [
                Text(row["name"]),
                Text(", ".join(row["requirements"]) or "(none)"),
                Text(", ".join(row["used_by"]) or "-"),
                Text.from_markup(
                    ("[green]yes[/], in use" if row["in_use"] else "[green]yes[/]")
                    if row["built"]
                    else "[yellow]no[/]"
                ),
                Text(human_size(row["size_bytes"])),
            ]
            for row in rows
        ]
        titles = ("py_env", "requirements", "used by", "built", "size")
        widths = [
            max([len(title), *(len(c[i].plain) for c in cells)]) for i, title in enumerate(titles)
        ]
        room = out.width - sum(widths) - 2 * len(titles)
        paths = [row["path"] or "-" for row in rows]
        in_column = room >= min(30, max(map(len, paths), default=1))
        table = Table(box=None, header_style="bold", pad_edge=False)
        for title in titles:
            table.add_column(title, overflow="fold")
        if in_column:
            table.add_column("path", no_wrap=True)
        for row_cells, path in zip(cells, paths, strict=True):
            extra = [Text("\n".join(break_path(path, room)))] if in_column else []
            table.add_row(*row_cells, *extra)
        out.print(table)
        if not in_column:
            for row, path in zip(rows, paths, strict=True):
                lines = break_path(path, out.width - len(row["name"]) - 7)
                indent = " " * (len(row["name"]) + 7)
                out.print(
                    Text(f"{row['name']} path: " + f"\n{indent}".join(lines), style="dim"),
                    soft_wrap=True,
                )
        lines = break_path(cache, out.width - 7)
        out.print(Text("cache: " + "\n       ".join(lines), style="dim"), soft_wrap=True)
        return
    for row in rows:
        out.print(
            markup(
                f"{row['name']}\trequirements: {', '.join(row['requirements']) or '(none)'}"
                f"\tused by: {', '.join(row['used_by']) or '-'}"
                f"\tbuilt: {'yes' if row['built'] else 'no'}"
                f"{', in use' if row['in_use'] else ''}"
                f"\tsize: {human_size(row['size_bytes'])}\tpath: {row['path'] or '-'}"
            ),
            soft_wrap=True,
        )
    out.print(f"[dim]cache: {markup(cache)}[/]", soft_wrap=True)


class _EnvProgress:
    """Build progress: a live status line on a terminal, plain lines on stderr otherwise."""

    def __init__(self, output: Output) -> None:
        from rich.status import Status

        self.output = output
        self.status: Status | None = None
        self.last = ""

    def __enter__(self) -> _EnvProgress:
        if self.output.stderr.is_terminal:
            self.status = self.output.stderr.status("")
            self.status.start()
        return self

    def __call__(self, progress: object) -> None:
        from peach_cli.boundary import markup

        line = str(progress)
        if self.status is not None:
            self.status.update(markup(line))
        elif line != self.last:
            self.output.stderr.print(markup(line), soft_wrap=True, highlight=False)
        self.last = line

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()


def env_progress(output: Output) -> _EnvProgress:
    """A context manager whose value is a progress callback for ``ensure_env``."""
    return _EnvProgress(output)


def print_env_built(output: Output, name: str, path: str, packages: int) -> None:
    from peach_cli.boundary import markup

    output.stderr.print(
        f"[green]✓[/] py_env {markup(name)}: {count(packages, 'package')} in {markup(path)}",
        soft_wrap=True,
    )


def print_env_removed(
    output: Output, path: str, requirements: tuple[str, ...], size: int, *, kept: str | None = None
) -> None:
    """``removed PATH (REQUIREMENTS, SIZE)``, or with ``kept`` ``kept PATH (…): KEPT``."""
    from peach_cli.boundary import markup

    what = f"({markup(', '.join(requirements) or 'no requirements')}, {human_size(size)})"
    if kept is None:
        output.stdout.print(f"removed {markup(path)} {what}", soft_wrap=True)
    else:
        output.stdout.print(f"kept {markup(path)} {what}: {markup(kept)}", soft_wrap=True)


def print_summary(output: Output, text: str, *, ok: bool) -> None:
    from peach_cli.boundary import markup

    mark = "[bold green]✓[/]" if ok else "[bold red]✗[/]"
    output.stderr.print(f"{mark} {markup(text)}", soft_wrap=True)


# --- peach init -------------------------------------------------------------------------------


def print_created(output: Output, created: CreatedProject, steps: list[str]) -> None:
    """What `peach init` wrote, then the commands to run next."""
    from peach_cli.boundary import markup

    out = output.stdout
    where = markup(str(created.root))
    out.print(f"[bold green]✓[/] created {where} (codops {markup(created.codops)})", soft_wrap=True)
    for name in created.files:
        note = " [dim](overwritten)[/]" if name in created.overwritten else ""
        out.print(f"  {markup(name)}{note}", soft_wrap=True)
    out.print("next:", soft_wrap=True)
    for step in steps:
        out.print(f"  {markup(step)}", soft_wrap=True)


# --- peach doctor -----------------------------------------------------------------------------

_CHECK_MARK = {
    "ok": "[bold green]✓[/]",
    "warn": "[bold yellow]![/]",
    "fail": "[bold red]✗[/]",
    "skip": "[dim]-[/]",
}


def print_checks(output: Output, report: Report) -> None:
    """One line per check (mark, name, summary) and its advice; then a count."""
    from peach_cli.boundary import markup

    out = output.stdout
    width = max(len(check.name) for check in report.checks)
    for check in report.checks:
        out.print(
            f"{_CHECK_MARK[check.status]} {check.name:<{width}}  {markup(check.summary)}",
            soft_wrap=True,
        )
        if check.advice and check.status != "ok":
            out.print(f"  {' ' * width}  [dim]→[/] {markup(check.advice)}", soft_wrap=True)
    counts = {s: sum(c.status == s for c in report.checks) for s in ("fail", "warn", "skip")}
    notes = []
    if counts["warn"]:
        notes.append(count(counts["warn"], "warning"))
    if counts["skip"]:
        notes.append(f"{counts['skip']} skipped")
    tail = f" ({', '.join(notes)})" if notes else ""
    if counts["fail"]:
        out.print(
            f"[bold red]✗[/] {counts['fail']} of {len(report.checks)} checks failed{tail}",
            soft_wrap=True,
        )
    else:
        out.print(f"[bold green]✓[/] no check failed{tail}", soft_wrap=True)
