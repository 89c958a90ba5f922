"""`peach test` and `peach replay` on a terminal: one line per case, diffs, a summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.testing.outcome import Outcome


def print_file(output: Output, name: str) -> None:
    from peach_cli.boundary import markup

    output.stdout.print(f"[bold]{markup(name)}[/]", soft_wrap=True)


def print_outcome(output: Output, outcome: Outcome) -> None:
    """``✓ name  12 ms``; a failure names its place (``✗ tests/x.peach-test.yaml:12: name``)
    and adds each unmet key and its diff."""
    from peach_cli.boundary import markup

    out = output.stdout
    if outcome.passed:
        title = f"[bold green]✓[/] {markup(outcome.name)}"
    else:
        title = f"[bold red]✗[/] {markup(outcome.place)}: {markup(outcome.name)}"
    out.print(f"  {title}  [dim]{outcome.ms:.0f} ms[/]", soft_wrap=True)
    for mismatch in outcome.mismatches:
        out.print(
            f"      [red]{markup(mismatch.key)}[/]: {markup(mismatch.message)}", soft_wrap=True
        )
        print_diff(output, mismatch.diff, indent=8)


def print_diff(output: Output, lines: tuple[str, ...] | list[str], *, indent: int = 2) -> None:
    from peach_cli.boundary import markup

    out = output.stdout
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
        out.print(f"{pad}[{style}]{markup(line)}[/]", soft_wrap=True)


def print_test_report(
    output: Output, outcomes: list[Outcome], seconds: float, output_format: str
) -> None:
    """The end of a `peach test` run: the summary line (``text``: each outcome was printed
    as it came), or the whole run as JSON or JUnit XML (``peach_cli.testing.report``)."""
    if output_format == "text":
        passed = sum(outcome.passed for outcome in outcomes)
        print_test_summary(output, passed, len(outcomes) - passed, seconds)
        return
    from peach_cli.testing.report import rendered

    text = rendered(outcomes, seconds, output_format, output.secrets)
    output.write_report(text, channel=f"test-{output_format}")


def print_test_summary(output: Output, passed: int, failed: int, seconds: float) -> None:
    from peach_cli.views.console import print_summary
    from peach_cli.wording import count

    parts = ([f"{failed} failed"] if failed else []) + [f"{passed} passed"]
    text = f"{', '.join(parts)} in {seconds:.2f} s" if passed + failed else "no case ran"
    if not failed:
        text = f"{count(passed, 'case')} passed in {seconds:.2f} s"
    output.stdout.print()
    print_summary(output, text, ok=not failed)


def print_replay(
    output: Output, outcomes: list, found: dict[str, int], seconds: float, *, shown: int
) -> None:
    """The first differences (and failures) in full, then ``10 same, 1 differ, 0 failed``."""
    from peach_cli.boundary import markup
    from peach_cli.views.console import print_summary

    out = output.stdout
    listed = 0
    for outcome in outcomes:
        if outcome.verdict == "same":
            continue
        if listed == shown:
            rest = sum(o.verdict != "same" for o in outcomes) - shown
            out.print(f"[dim]… and {rest} more (--format json lists every one)[/]")
            break
        listed += 1
        mark = "[bold red]✗[/]"
        out.print(
            f"{mark} {outcome.verdict}: {markup(outcome.entry.label)} [dim](line {outcome.entry.line})[/]",
            soft_wrap=True,
        )
        if outcome.error:
            out.print(f"    {markup(outcome.error)}", soft_wrap=True)
        print_diff(output, outcome.diff, indent=4)
    total = len(outcomes)
    text = (
        f"{total} request{'s' if total != 1 else ''} in {seconds:.2f} s: {found['same']} same, "
        f"{found['differ']} differ, {found['failed']} failed"
    )
    print_summary(output, text, ok=not (found["differ"] or found["failed"]))
