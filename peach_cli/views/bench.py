"""How `peach bench` looks: a live progress line on stderr, then the figures on stdout."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.wording import count, human_size

if TYPE_CHECKING:
    from rich.console import Console

    from peach_cli.bench.loadgen import LoadPlan
    from peach_cli.bench.summary import Tally
    from peach_cli.boundary import Output


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def _n(number: int) -> str:
    return f"{number:,}"


class Progress:
    """One line on stderr, rewritten twice a second: elapsed, sent, answered, p50/p99."""

    def __init__(self, output: Output, tally: Tally, plan: LoadPlan) -> None:
        self.output = output
        self.tally = tally
        self.plan = plan
        self.began = time.monotonic()
        self.shown = False

    def tick(self) -> None:
        r = self.tally
        elapsed = time.monotonic() - self.began
        p50, p99 = r.latency.percentile(50.0), r.latency.percentile(99.0)
        line = (
            f"  {elapsed:5.1f} s · {_n(r.sent)} sent · {_n(r.answered)} answered"
            f" · {_n(r.failed)} failed"
        )
        if p50 is not None and p99 is not None:
            line += f" · p50 {_ms(p50 * 1000)} · p99 {_ms(p99 * 1000)}"
        if elapsed < self.plan.warmup_s:
            line += " (warming up)"
        self.output.write_status("\r\x1b[K" + line)
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.output.write_status("\r\x1b[K")


def render_summary(output: Output, figures: dict[str, Any]) -> None:
    """The run's heading, a row per figure, each replica's capacity, and the warnings."""
    console = output.stdout
    _print_heading(console, figures)
    rows = _summary_rows(figures)
    width = max(len(name) for name, _ in rows)
    for name, text in rows:
        console.print(f"  {name:<{width}}  {text}", markup=False, highlight=False, soft_wrap=True)
    warnings = [_print_capacity(console, use, width) for use in figures.get("capacity") or []]
    for warning in warnings:
        if warning is not None:
            console.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)


def _print_heading(console: Console, figures: dict[str, Any]) -> None:
    if figures["mode"] == "open":
        how = f"open loop at {figures['rate']:g} requests/s"
    else:
        how = f"closed loop, {count(figures['concurrency'], 'connection')}"
    warm = f" after {figures['warmup_s']:g} s of warm-up" if figures.get("warmup_s") else ""
    console.print(
        f"[bold]peach bench[/] {figures['target']} · {how} · {figures['duration_s']:.1f} s{warm}",
        markup=True,
        highlight=False,
        soft_wrap=True,
    )
    if figures.get("interrupted"):
        console.print("[yellow]interrupted (Ctrl-C): the figures cover what was sent[/]")


def _summary_rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary's (name, text) rows: requests, latency, status, failures, components,
    replicas and streams, each when the run has it."""
    requests = figures["requests"]
    rows: list[tuple[str, str]] = [
        (
            "requests",
            f"{_n(requests['sent'])} sent · {_n(requests['answered'])} answered"
            f" · {_n(requests['failed'])} failed · {figures['rate_achieved']:,.1f} sent/s"
            f" · {figures['throughput']:,.1f} answered/s",
        )
    ]
    latency = figures["latency_ms"]
    if latency["p50"] is not None:
        rows.append(
            (
                "latency",
                " · ".join(
                    f"{name} {_ms(latency[name])}"
                    for name in ("p50", "p90", "p95", "p99", "p99.9", "max")
                ),
            )
        )
    if figures["status"]:
        codes = figures["error_codes"]
        status = " · ".join(f"{code} ×{_n(n)}" for code, n in figures["status"].items())
        if codes:
            status += " (" + ", ".join(f"{code} ×{_n(n)}" for code, n in codes.items()) + ")"
        rows.append(("status", status))
    for reason, n in figures["failures"].items():
        rows.append(("failed", f"{_n(n)} × {reason}"))
    components = figures["components"]
    if components:
        total = sum(components.values())
        rows.append(
            (
                "answered by",
                " · ".join(f"{name} {100 * n / total:.1f} %" for name, n in components.items()),
            )
        )
    if figures["replicas"]:
        rows.append(
            ("replicas", " · ".join(f"{rid} {_n(n)}" for rid, n in figures["replicas"].items()))
        )
    stream = figures.get("stream")
    if stream:
        first = stream["first_chunk_ms"]
        chunks = stream["chunks_per_s"]
        rows.append(
            (
                "streams",
                f"first chunk p50 {_ms(first['p50'])} · p99 {_ms(first['p99'])}"
                f" · {'-' if chunks is None else f'{chunks:,.1f}'} chunks/s"
                f" · gap p99 {_ms(stream['gap_ms_p99'])} · {_n(stream['cut'])} cut",
            )
        )
    return rows


def _print_capacity(console: Console, use: dict[str, Any], width: int) -> str | None:
    """One replica's capacity row; the warning when it peaked past its memory request."""
    request = use["memory_request_bytes"]
    memory = f"peak {human_size(use['peak_rss_bytes'])} RSS"
    pss = use.get("peak_pss_bytes")
    if pss and pss != use["peak_rss_bytes"]:
        memory += f", {human_size(pss)} PSS"
    memory += f" of {human_size(request)} requested" if request else " (no memory request)"
    cpu = (
        f"CPU {use['cpu_percent_mean']:.0f} % (peak {use['cpu_percent_peak']:.0f} %)"
        if use["cpu_percent_mean"] is not None
        else "CPU -"
    )
    if use["cpus"]:
        cpu += f" of {use['cpus']:g} cpu{'s' if use['cpus'] != 1 else ''}"
    console.print(
        f"  {'capacity':<{width}}  {use['replica']}: {memory} · {cpu}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if not use["over_memory"]:
        return None
    return (
        f"replica {use['replica']} peaked at"
        f" {human_size(use['peak_rss_bytes'])}, past its memory request of"
        f" {human_size(request)}: the platform sizes (and may stop) the replica by that"
        " request; raise `memory` or use less"
    )


def render_compare(
    output: Output,
    rows: list[dict[str, Any]],
    path: Path | None,
    differences: Sequence[dict[str, Any]] = (),
) -> None:
    """The figures against an earlier run's; runs that differ in settings are said to, and
    their figures shown higher or lower, never better or worse."""
    from rich.markup import escape

    console = output.stdout
    console.print(f"[bold]against {escape(str(path))}[/]", highlight=False)
    if differences:
        changes = ", ".join(
            f"{d['setting']} {_setting(d['before'])} → {_setting(d['now'])}" for d in differences
        )
        console.print(
            f"  [yellow]the runs differ in settings ({escape(changes)}): "
            "not like for like: each figure is only higher or lower[/]",
            highlight=False,
            soft_wrap=True,
        )
    if not rows:
        console.print("  no figure in common", highlight=False)
        return
    width = max(len(row["figure"]) for row in rows)
    colour = {"better": "green", "worse": "red", "same": "dim", "higher": "cyan", "lower": "cyan"}
    for row in rows:
        ratio = "" if row["ratio"] is None else f" ×{row['ratio']:g}"
        console.print(
            f"  {row['figure']:<{width}}  {row['before']:g} → {row['now']:g}{ratio}"
            f"  [{colour[row['verdict']]}]{row['verdict']}[/]",
            highlight=False,
        )


def _setting(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


__all__ = ["Progress", "render_compare", "render_summary"]
