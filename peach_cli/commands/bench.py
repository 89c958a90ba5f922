"""`peach bench`: load an endpoint and report latency, throughput and capacity (SPEC §9).

The requests are `peach ask`'s (the same items, ``--stream``), or those of a ``peach dev
--record`` file (``--from``); ``peach_cli.bench.loadgen`` sends them, open loop with
``--rate`` or closed loop with ``--concurrency``; ``peach_cli.views.bench`` renders the
figures, or ``--format json`` prints them under the keys ``peach_cli.bench.summary``
documents. Against a `peach dev` on this machine every replica's peak memory and CPU are
sampled during the run and set against its component's ``memory`` and ``cpus``.

Exit codes: 0 the run finished (whatever the endpoint answered) · 2 bad command line ·
3 no request got an answer (nothing listens there?) · 130 Ctrl-C (what was measured is
printed first).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.client.items import AskRequest, build_request, with_tool
from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.bench.loadgen import LoadPlan
    from peach_cli.bench.summary import Tally
    from peach_cli.boundary import Output
    from peach_cli.commands.host_options import BenchOptions

EXIT_INTERRUPTED = 130
EXIT_NO_ANSWER = 3
DEFAULT_CONCURRENCY = 8
DEFAULT_DURATION_S = 10.0
MAX_RECORDED_REQUESTS = 100_000


def run_bench(out: Output, options: BenchOptions) -> int:
    """Run `peach bench`; return the exit code (usage mistakes raise ``UsageError``)."""
    from peach_cli.bench.loadgen import LoadPlan, address_of, encode

    rate, concurrency, duration_s, requests, warmup_s = (
        options.rate, options.concurrency, options.duration_s, options.requests, options.warmup_s
    )  # fmt: skip
    output, compare_file, timeout_s = options.output_format, options.compare_file, options.timeout_s

    _check_options(output, rate, concurrency, requests, duration_s, warmup_s)
    if duration_s is None and requests is None:
        duration_s = DEFAULT_DURATION_S
    earlier = _read_compare(compare_file) if compare_file is not None else None
    asked, label = _requests(
        options.target, options.items or (), options.url, options.stream, options.record_file,
        options.headers or (), timeout_s,
    )  # fmt: skip
    addresses = {address_of(request.url) for request in asked}
    if len(addresses) > 1:
        raise UsageError("every request of one run must go to one host and port")
    (address,) = addresses
    plan = LoadPlan(
        [encode(request) for request in asked],
        address,
        rate=rate,
        concurrency=concurrency or DEFAULT_CONCURRENCY,
        duration_s=duration_s,
        requests=requests,
        warmup_s=warmup_s,
        timeout_s=timeout_s,
    )
    tally, capacity, interrupted = _measure(out, plan, show_progress=output == "text")
    figures = tally.summary(
        target=label,
        mode="open" if rate is not None else "closed",
        rate=rate,
        concurrency=None if rate is not None else plan.concurrency,
        warmup_s=warmup_s,
        interrupted=interrupted,
    )
    figures["capacity"] = capacity
    _show(out, figures, earlier, compare_file, output)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_NO_ANSWER if tally.answered == 0 else 0


def _check_options(
    output: str,
    rate: float | None,
    concurrency: int | None,
    requests: int | None,
    duration_s: float | None,
    warmup_s: float,
) -> None:
    check_load_options(output, rate, concurrency, duration_s)
    if requests is not None and requests < 1:
        raise UsageError(f"--requests must be at least 1, not {requests}")
    if not (math.isfinite(warmup_s) and warmup_s >= 0):
        raise UsageError(f"--warmup must be a number of seconds, 0 or more, not {warmup_s:g}")


def check_load_options(
    output: str, rate: float | None, concurrency: int | None, duration_s: float | None
) -> None:
    """The options `peach bench` and `peach profile` share: ``--format``, the loop's kind
    (``--rate`` or ``--concurrency``, not both) and ``--duration``."""
    if output not in ("text", "json"):
        raise UsageError(f"--format must be text or json, not {output!r}")
    if rate is not None and concurrency is not None:
        raise UsageError(
            "--rate and --concurrency are two ways to load: give one",
            hint="--rate R sends R requests a second whatever the answers (open loop);"
            " --concurrency C keeps C requests in flight (closed loop)",
        )
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise UsageError(f"--rate must be a number more than 0, not {rate:g}")
    if concurrency is not None and concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, not {concurrency}")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise UsageError(f"--duration must be a number of seconds more than 0, not {duration_s:g}")


def _requests(
    target: str | None,
    items: Sequence[str],
    url: str | None,
    stream: bool,
    record_file: Path | None,
    headers: Sequence[str],
    timeout_s: float,
) -> tuple[list[AskRequest], str]:
    """The requests to send (the target's, or a record file's) and the run's label."""
    if record_file is not None:
        if target is not None:
            raise UsageError("give TARGET or --from, not both")
        asked = read_record_file(record_file, url, timeout_s)
        return asked, f"{len(asked)} recorded requests from {record_file}"
    if target is None:
        raise UsageError("give TARGET (an endpoint like /greet) or --from RECORD_FILE")
    request = with_tool(
        build_request(target, items, base=url, stream=stream, headers=headers, timeout_s=timeout_s),
        "bench",
    )
    return [request], f"{request.method} {request.url}"


def _measure(out: Output, plan: LoadPlan, *, show_progress: bool) -> tuple[Tally, Any, bool]:
    """Run the load, sampling the replicas' capacity when they are this machine's `peach dev`:
    the tally, the capacity figures and whether Ctrl-C cut the run short."""
    from peach_cli.bench.capacity import CapacitySampler
    from peach_cli.bench.loadgen import run_load
    from peach_cli.bench.summary import Tally
    from peach_cli.views.bench import Progress

    sampler = CapacitySampler.for_dev(plan.address.origin)
    tally = Tally()
    progress = Progress(out, tally, plan) if show_progress and sys.stderr.isatty() else None
    if sampler is not None:
        sampler.start()
    try:
        interrupted = run_load(plan, tally, on_tick=progress.tick if progress else None)
    finally:
        capacity = sampler.stop() if sampler is not None else None
        if progress is not None:
            progress.clear()
    return tally, capacity, interrupted


def _show(
    out: Output,
    figures: dict[str, Any],
    earlier: dict[str, Any] | None,
    compare_file: Path | None,
    output: str,
) -> None:
    """The figures, and their comparison with ``--compare``'s, as text or JSON."""
    from peach_cli.bench.summary import compare, differing_settings

    rows = compare(figures, earlier) if earlier is not None else None
    differences = differing_settings(figures, earlier) if earlier is not None else []
    if output == "json":
        if rows is not None:
            figures["compare"] = rows
            figures["compare_settings"] = differences
        from peach_cli.views.console import print_json

        print_json(out, figures, channel="bench")
        return
    from peach_cli.views.bench import render_compare, render_summary

    render_summary(out, figures)
    if rows is not None:
        render_compare(out, rows, compare_file, differences)


def _read_compare(path: Path) -> dict[str, Any]:
    try:
        figures = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--compare {path}: cannot read it ({error.strerror})") from None
    except ValueError as error:
        raise UsageError(
            f"--compare {path}: not JSON ({error})",
            hint="give the output of an earlier `peach bench --format json`",
        ) from None
    if not isinstance(figures, dict) or "latency_ms" not in figures:
        raise UsageError(
            f"--compare {path} is not a `peach bench --format json` output",
            hint="save one with: peach bench ... --format json > before.json",
        )
    return figures


def read_record_file(path: Path, base: str | None, timeout_s: float) -> list[AskRequest]:
    """The requests of a ``peach dev --record`` file, each sent to its path on ``base``
    (default: `peach ask`'s); a line that names a host refuses the whole file (SPEC §8)."""
    from peach_cli.testing.replay import read_recording, request_of

    try:
        entries = read_recording(path)
    except UsageError as error:
        raise UsageError(f"--from {error.message}", hint=error.hint) from None
    requests = [
        request_of(entry, base, timeout_s, tool="bench")
        for entry in entries
        if "body_omitted" not in entry.data  # a body too large to record cannot be sent again
    ]
    if not requests:
        raise UsageError(f"--from {path}: no recorded request to send")
    return requests[:MAX_RECORDED_REQUESTS]


__all__ = ["run_bench"]
