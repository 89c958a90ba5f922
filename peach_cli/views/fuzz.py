"""`peach fuzz` on a terminal: a line per endpoint as it is done (stderr), each finding with
its request, its error and its ready case (stdout), a summary line (stderr)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.fuzz.findings import Finding
    from peach_cli.fuzz.run import Explored


def print_start(output: Output, targets: int, examples: int, seed: int, url: str | None) -> None:
    from peach_cli.boundary import markup
    from peach_cli.wording import count

    where = f" of {markup(url)}" if url else ""
    _status(
        output,
        f"[dim]fuzzing {count(targets, 'endpoint')}{where}: {examples} examples each, seed {seed}[/]",
    )


class FuzzShown:
    """What `peach fuzz` shows as it runs and at its end, as ``--format`` asks: ``text``, a
    line per endpoint as it is done (with a progress line on a terminal), then each finding
    and a summary; ``json``, one document at the end."""

    def __init__(
        self,
        output: Output,
        output_format: str,
        *,
        examples: int,
        seed: int,
        url: str | None,
        began: float,
    ) -> None:
        self.output = output
        self.text = output_format == "text"
        self.examples, self.seed, self.url = examples, seed, url
        self.began = began
        """When the command began (``time.perf_counter``): the summary says how long it took."""
        self.progress = Progress(output) if self.text and Progress.wanted(output) else None

    def start(self, targets: int) -> None:
        """The run starts on ``targets`` endpoints."""
        if self.text:
            print_start(self.output, targets, self.examples, self.seed, self.url)

    def answered(self, explored: Explored) -> None:
        """One more answer while ``explored`` runs."""
        if self.progress is not None:
            self.progress.tick(explored)

    def explored(self, explored: Explored) -> None:
        """An endpoint is done."""
        if self.text:
            self.clear()
            print_explored(self.output, explored)

    def clear(self) -> None:
        """Erase the progress line (an interrupted run leaves no half line)."""
        if self.progress is not None:
            self.progress.clear()

    def finish(self, explored: list[Explored]) -> None:
        """The findings and the summary (``json``: the whole run)."""
        import time

        seconds = time.perf_counter() - self.began
        findings = [f for e in explored for f in e.findings]
        if self.text:
            print_findings(self.output, findings, explored, seed=self.seed, seconds=seconds)
            return
        from peach_cli.views.console import print_json

        findings_json = [f.to_json() for f in findings]
        data = {"seed": self.seed, "examples": self.examples, "findings": findings_json}
        print_json(self.output, data, channel="fuzz")


class Progress:
    """On a terminal, one line on stderr rewritten as requests are answered: the endpoint
    being fuzzed, its requests so far and the time it has taken (``… /story  23 requests
    · 4.1 s``); each endpoint's line (``print_explored``) replaces it when it is done."""

    INTERVAL_S = 0.1

    def __init__(self, output: Output) -> None:
        self.output = output
        self.visible = False
        self.began: dict[str, float] = {}
        self.last = 0.0

    @staticmethod
    def wanted(output: Output) -> bool:
        """Only an interactive terminal gets a progress line (a pipe, a file or a ``dumb``
        terminal gets the endpoint lines alone)."""
        return output.stderr.is_interactive

    def tick(self, explored: Explored) -> None:
        """One more answer for ``explored`` (the line is rewritten at most every 0.1 s)."""
        import time

        from peach_cli.boundary import shown
        from peach_cli.wording import count

        now = time.monotonic()
        began = self.began.setdefault(explored.target.url, now)
        if self.visible and now - self.last < self.INTERVAL_S:
            return
        self.last = now
        url = shown(explored.target.url)
        line = f"  … {url}  {count(explored.requests, 'request')} · {now - began:.1f} s"
        self.output.write_status("\r\x1b[K" + line)
        self.visible = True

    def clear(self) -> None:
        """Erase the line (before anything else is written to stderr)."""
        if self.visible:
            self.output.write_status("\r\x1b[K")
            self.visible = False


def print_explored(output: Output, explored: Explored) -> None:
    """``✓ /recommend  52 requests`` or ``✗ /divide  140 requests  2 findings``."""
    from peach_cli.boundary import markup
    from peach_cli.wording import count

    found = len(explored.findings)
    mark = "[bold red]✗[/]" if found else "[bold green]✓[/]"
    tail = f"  [red]{count(found, 'finding')}[/]" if found else ""
    sent = count(explored.requests, "request")
    if explored.all_unavailable and not found:
        why = markup(explored.unavailable_message or "no healthy replica")
        mark, tail = "[bold yellow]![/]", f"  [yellow]each answered 503 unavailable: {why}[/]"
    _status(output, f"  {mark} {markup(explored.target.url)}  [dim]{sent}[/]{tail}")


def _status(output: Output, text: str) -> None:
    output.stderr.print(text, soft_wrap=True)


def request_line(finding: Finding) -> str:
    """``GET /divide {"a": 0, "b": 0}``, what was sent (``stream=true`` for a stream)."""
    params = json.dumps(finding.params, ensure_ascii=False)
    if len(params) > 300:
        params = params[:300] + "…"
    stream = " stream=true" if finding.stream else ""
    return f"{finding.method} {finding.url} {params}{stream}"


def print_finding(output: Output, finding: Finding) -> None:
    from peach_cli.boundary import markup, markup_lines

    out = output.stdout
    out.print()
    out.print(f"[bold red]✗ {markup(finding.name)}[/]", soft_wrap=True)
    status = f" → {finding.status}" if finding.status else ""
    out.print(f"  request: {markup(request_line(finding))}{status}", soft_wrap=True)
    out.print(f"  error: {markup(finding.error)}", soft_wrap=True)
    out.print("  [dim]ready case, for a *.peach-test.yaml file:[/]")
    case = "\n".join("    " + line for line in finding.case_yaml().rstrip("\n").splitlines())
    out.print(markup_lines(case), soft_wrap=True, highlight=False)


def print_findings(
    output: Output, findings: list[Finding], explored: list[Explored], *, seed: int, seconds: float
) -> None:
    from peach_cli.views.console import print_summary
    from peach_cli.wording import count

    for finding in findings:
        print_finding(output, finding)
    requests = sum(e.requests for e in explored)
    where = f"{count(len(explored), 'endpoint')}, {count(requests, 'request')}"
    took = f"({seconds:.1f} s, seed {seed})"
    if findings:
        output.stdout.print()
        print_summary(output, f"{count(len(findings), 'finding')} in {where} {took}", ok=False)
        return
    skipped = sum(e.all_unavailable for e in explored)
    if skipped:
        not_fuzzed = f"{count(skipped, 'endpoint')} not fuzzed: no healthy replica"
        print_summary(output, f"nothing found in {where}, {not_fuzzed} {took}", ok=False)
    else:
        print_summary(output, f"nothing found in {where} {took}", ok=True)
