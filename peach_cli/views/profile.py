"""How `peach profile` looks: the hottest lines by self and by total time, in 80 columns.

peach profile · GET /hot · 1,032 samples over 10.0 s, wall-clock, 1 replica
load: 812 answered, 81.2/s, p50 9.81 ms, p99 14.2 ms

by self time (the line itself)
   61.2%  notebooks/Hot.ipynb, cell 3, line 4 · busy
   ...
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.boundary import shown as plain

if TYPE_CHECKING:
    from peach_cli.boundary import Output, Secrets
    from peach_cli.profile.model import Line, Profile

WIDTH = 80
ROWS = 10
_SHARE = 11
"""``   100.0%  ``: the share column and its margins."""


def row(line: Line, width: int = WIDTH, secrets: Secrets | None = None) -> str:
    """``   61.2%  notebooks/X.ipynb, cell 3, line 4 · busy``, shortened to ``width``
    (the position loses its start first, the function name is kept; ``secrets`` masked
    before it is shortened)."""
    shown = secrets.shown if secrets is not None else plain
    share = f"{line.share * 100:6.1f}%  "
    if (line.position, line.function) == ("peach", "peach"):
        text = "peach (its own code: the runtime, the event loop)"
    else:
        position, function = shown(line.position), shown(line.function)
        room = width - _SHARE - len(function) - 3
        if len(position) > room:
            position = "…" + position[-max(room - 1, 8) :]
        text = f"{position} · {function}"
    text = f"  {share}{text}"
    return text if len(text) <= width else text[: width - 1] + "…"


def render_profile(
    output: Output,
    profile: Profile,
    what: str,
    figures: dict[str, Any] | None,
    written: Path | None,
) -> None:
    """The text report on stdout."""
    shown = output.secrets.shown  # masked before a row is shortened
    replicas = len(profile.replicas)
    head = (
        f"peach profile · {shown(what)} · {profile.samples:,} samples over "
        f"{profile.duration_s:.1f} s, {'CPU time' if profile.mode == 'cpu' else 'wall-clock'}, "
        f"{replicas} replica{'s' if replicas != 1 else ''}"
    )
    lines = _wrap(head)
    if figures is not None:
        latency = figures["latency_ms"]
        lines.append(
            f"load: {figures['requests']['answered']:,} answered, "
            f"{figures['throughput']:,}/s, p50 {_ms(latency.get('p50'))}, "
            f"p99 {_ms(latency.get('p99'))}"
        )
    if not profile.stacks and not profile.calls:
        lines += [
            "",
            "no sample: nothing ran in the replicas' code while peach profile watched",
            "(a longer --duration, or a higher --rate, gives it something to see)",
        ]
    elif not profile.stacks:
        lines += ["", *_wrap(
            "no sample in the method: each call is shorter than the sampler sees (it "
            "looks every 10 ms, when the replica lets go of the GIL, between calls)"
        )]  # fmt: skip
    else:
        for by, title in (
            ("self", "by self time (the line itself)"),
            ("total", "by total time (the line and what it calls)"),
        ):
            lines += ["", title]
            hottest = profile.hottest(by, ROWS)  # type: ignore[arg-type]
            lines += [row(line, secrets=output.secrets) for line in hottest]
    if profile.calls:
        lines += ["", "calls (the method, timed)"]
        calls = profile.calls.items()
        lines += [_calls_row(frame, n, seconds, output.secrets) for frame, (n, seconds) in calls]
    if written is not None:
        kind = "flame graph" if written.suffix.lower() == ".svg" else "speedscope file"
        path = shown(str(written))
        room = WIDTH - len(kind) - 2
        lines += ["", f"{kind}: {path if len(path) <= room else '…' + path[-(room - 1) :]}"]
    output.write_report("\n".join(lines) + "\n", channel="profile")


def _calls_row(frame: tuple[str, str], n: float, seconds: float, secrets: Secrets) -> str:
    """``  14,502 × 3.1 µs  notebooks/X.ipynb, cell 3, line 1 · greet``."""
    each = seconds / n if n else 0.0
    took = f"{each * 1e6:.3g} µs" if each < 1e-3 else _ms(each * 1000)
    figures = f"  {int(n):>9,} × {took:>8}  "
    position, function = secrets.shown(frame[0]), secrets.shown(frame[1])
    room = WIDTH - len(figures) - len(function) - 3
    if len(position) > room:
        position = "…" + position[-max(room - 1, 8) :]
    text = f"{figures}{position} · {function}"
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


def _wrap(text: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, WIDTH, subsequent_indent="  ") or [""]


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.3g} ms"


__all__ = ["render_profile", "row"]
