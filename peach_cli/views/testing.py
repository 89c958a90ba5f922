"""`peach test` and `peach replay` on a terminal: one line per case, diffs, a summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from peach_cli.views.console import stdout

if TYPE_CHECKING:
    from peach_cli.testing.report import Outcome


def print_file(name: str) -> None:
    from rich.markup import escape

    stdout().print(f"[bold]{escape(name)}[/]", soft_wrap=True)


def print_outcome(outcome: Outcome) -> None:
    """``✓ name  12 ms``; a failure adds each unmet key and its diff."""
    from rich.markup import escape

    out = stdout()
    mark = "[bold green]✓[/]" if outcome.passed else "[bold red]✗[/]"
    out.print(f"  {mark} {escape(outcome.name)}  [dim]{outcome.ms:.0f} ms[/]", soft_wrap=True)
    for mismatch in outcome.mismatches:
        out.print(
            f"      [red]{escape(mismatch.key)}[/]: {escape(mismatch.message)}", soft_wrap=True
        )
        print_diff(mismatch.diff, indent=8)


def print_diff(lines: tuple[str, ...] | list[str], *, indent: int = 2) -> None:
    from rich.markup import escape

    out = stdout()
    pad = " " * indent
    for line in lines:
        style = (
            "bold"
            if line.startswith(("---", "+++"))
            else "red"
            if line.startswith("-")
            else "green"
            if line.startswith("+")
            else "cyan"
            if line.startswith("@@")
            else "dim"
        )
        out.print(f"{pad}[{style}]{escape(line)}[/]", soft_wrap=True)


def print_test_summary(passed: int, failed: int, seconds: float) -> None:
    from peach_cli.views.console import print_summary
    from peach_cli.wording import count

    parts = ([f"{failed} failed"] if failed else []) + [f"{passed} passed"]
    text = f"{', '.join(parts)} in {seconds:.2f} s" if passed + failed else "no case ran"
    if not failed:
        text = f"{count(passed, 'case')} passed in {seconds:.2f} s"
    stdout().print()
    print_summary(text, ok=not failed)
