"""What `peach bench` measured: the ``Tally`` the generator reports to, and the figures.

``Tally.summary()`` gives the figures as one JSON-ready dict; its keys are documented
(docs/load.md) and stable, so ``--format json`` output can be kept and compared later
(``--compare``)::

    {"target", "mode", "rate", "concurrency", "duration_s", "interrupted",
     "requests": {"sent", "answered", "failed"},      # sent = answered + failed
     "rate_achieved", "throughput",                    # requests sent / answered per second
     "latency_ms": {"p50", "p90", "p95", "p99", "p99.9", "max", "mean"},
     "status": {"200": n, ...}, "error_codes": {"timeout": n, ...},
     "failures": {"connection refused by ...": n},
     "components": {"main": n, ...}, "fallback_share",  # share of answers from `fallback`
     "replicas": {"main-1": n, ...},
     "stream": {"streams", "first_chunk_ms": {"p50", "p99"}, "chunks_per_s",
                "gap_ms_p99", "cut"} or null,
     "capacity": [...] or null}                         # peach_cli.bench.capacity
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from peach_cli.bench.histogram import Histogram

PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99.9", 99.9))
"""p95 is the percentile most SLOs name."""
FALLBACK = "fallback"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


class Tally:
    """Counts and histograms of the measured requests (those started after the warm-up)."""

    def __init__(self) -> None:
        self.sent = 0
        self.answered = 0
        self.failed = 0
        self.latency = Histogram()
        self.status: Counter[int] = Counter()
        self.error_codes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.components: Counter[str] = Counter()
        self.replicas: Counter[str] = Counter()
        self.first_chunks = Histogram()
        self.gaps = Histogram()
        self.streams = 0
        self.chunks = 0
        self.stream_s = 0.0
        self.cut = 0
        self.began = 0.0
        self.ended = 0.0
        self.first_sent: float | None = None
        self.last_sent = 0.0
        self.sending_ended: float | None = None
        """When the last request was sent (before what was in flight finished)."""

    # -- what the generator reports -----------------------------------------------------------

    def begin(self, when: float) -> None:
        self.began = when

    def end(self, when: float) -> None:
        self.ended = when

    def record_answer(
        self,
        seconds: float,
        status: int,
        component: str | None,
        replica: str | None,
        error_code: str | None,
        recorded: bool,
        *,
        chunks: int | None = None,
        stream_s: float = 0.0,
        cut: bool = False,
    ) -> None:
        if not recorded:
            return
        self.answered += 1
        self.latency.record(seconds)
        self.status[status] += 1
        if error_code:
            self.error_codes[error_code] += 1
        if component:
            self.components[component] += 1
        if replica:
            self.replicas[replica] += 1
        if chunks is not None:
            self.streams += 1
            self.chunks += chunks
            self.stream_s += stream_s
            if cut:
                self.cut += 1

    def record_failure(self, reason: str, recorded: bool) -> None:
        if recorded:
            self.failed += 1
            self.failures[reason] += 1

    def first_chunk(self, seconds: float, recorded: bool) -> None:
        if recorded:
            self.first_chunks.record(seconds)

    def gap(self, seconds: float, recorded: bool) -> None:
        if recorded:
            self.gaps.record(seconds)

    # -- figures --------------------------------------------------------------------------

    @property
    def elapsed_s(self) -> float:
        return max(self.ended - self.began, 1e-9)

    def note_sent(self, when: float) -> None:
        """A measured request went out at ``when``."""
        self.sent += 1
        if self.first_sent is None:
            self.first_sent = when
        self.last_sent = when

    def _rate(self) -> float:
        """Requests sent per second: the spacing of the first and last sent (N requests
        span N - 1 intervals), else over the whole run."""
        if self.sent > 1 and self.first_sent is not None and self.last_sent > self.first_sent:
            return (self.sent - 1) / (self.last_sent - self.first_sent)
        end = self.sending_ended if self.sending_ended is not None else self.ended
        return self.sent / max(end - self.began, 1e-9)

    def summary(self, **context: Any) -> dict[str, Any]:
        """Every figure, under the documented keys; ``context`` adds target, mode, ..."""
        elapsed = self.elapsed_s
        latency = {name: _ms(self.latency.percentile(q)) for name, q in PERCENTILES}
        latency["max"] = _ms(self.latency.max)
        latency["mean"] = _ms(self.latency.mean)
        answered_by = sum(self.components.values())
        stream = None
        if self.streams:
            stream = {
                "streams": self.streams,
                "first_chunk_ms": {
                    "p50": _ms(self.first_chunks.percentile(50.0)),
                    "p99": _ms(self.first_chunks.percentile(99.0)),
                },
                "chunks_per_s": round(self.chunks / self.stream_s, 1) if self.stream_s else None,
                "gap_ms_p99": _ms(self.gaps.percentile(99.0)),
                "cut": self.cut,
            }
        return {
            **context,
            "duration_s": round(elapsed, 3),
            "requests": {"sent": self.sent, "answered": self.answered, "failed": self.failed},
            "rate_achieved": round(self._rate(), 2),
            "throughput": round(self.answered / elapsed, 2),
            "latency_ms": latency,
            "status": {str(code): n for code, n in sorted(self.status.items())},
            "error_codes": dict(self.error_codes.most_common()),
            "failures": dict(self.failures.most_common()),
            "components": dict(self.components.most_common()),
            "fallback_share": (
                round(self.components[FALLBACK] / answered_by, 4) if answered_by else None
            ),
            "replicas": dict(sorted(self.replicas.items())),
            "stream": stream,
        }


# -- --compare --------------------------------------------------------------------------------

COMPARED: tuple[tuple[str, str, bool], ...] = (
    # (label, dotted key, higher is better)
    ("requests/s", "throughput", True),
    ("rate", "rate_achieved", True),
    ("p50 ms", "latency_ms.p50", False),
    ("p90 ms", "latency_ms.p90", False),
    ("p95 ms", "latency_ms.p95", False),
    ("p99 ms", "latency_ms.p99", False),
    ("p99.9 ms", "latency_ms.p99.9", False),
    ("max ms", "latency_ms.max", False),
    ("failed", "requests.failed", False),
    ("fallback share", "fallback_share", False),
    ("first chunk p50 ms", "stream.first_chunk_ms.p50", False),
    ("first chunk p99 ms", "stream.first_chunk_ms.p99", False),
    ("chunks/s", "stream.chunks_per_s", True),
    ("gap p99 ms", "stream.gap_ms_p99", False),
    ("cut", "stream.cut", False),
)


def _get(figures: Any, dotted: str) -> Any:
    """``figures["stream"]["first_chunk_ms"]["p50"]`` for ``stream.first_chunk_ms.p50``; a
    key may hold a dot itself (``latency_ms.p99.9``)."""
    while isinstance(figures, dict):
        if dotted in figures:
            return figures[dotted]
        head, dot, dotted = dotted.partition(".")
        if not dot or head not in figures:
            return None
        figures = figures[head]
    return None


SETTINGS = ("target", "mode", "rate", "concurrency", "warmup_s")
"""What a run was asked to do: two runs that differ in one are not like for like."""


def differing_settings(current: dict[str, Any], earlier: dict[str, Any]) -> list[dict[str, Any]]:
    """The settings two runs differ in: ``{"setting", "now", "before"}`` each."""
    return [
        {"setting": key, "now": current.get(key), "before": earlier.get(key)}
        for key in SETTINGS
        if current.get(key) != earlier.get(key)
    ]


def compare(current: dict[str, Any], earlier: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure both runs have, now against before: the ratio and whether it is better —
    or, when the runs differ in settings (``differing_settings``), only whether it is higher
    or lower: doubling ``--rate`` doubles the rate achieved, which is no improvement."""
    judged = not differing_settings(current, earlier)
    rows = []
    for label, key, higher_is_better in COMPARED:
        now, before = _get(current, key), _get(earlier, key)
        if not isinstance(now, int | float) or not isinstance(before, int | float):
            continue
        ratio = None if before == 0 else round(now / before, 3)
        if now == before:
            verdict = "same"
        elif not judged:
            verdict = "higher" if now > before else "lower"
        elif (now > before) == higher_is_better:
            verdict = "better"
        else:
            verdict = "worse"
        rows.append(
            {
                "figure": label,
                "key": key,
                "now": now,
                "before": before,
                "ratio": ratio,
                "verdict": verdict,
            }
        )
    return rows


__all__ = ["COMPARED", "PERCENTILES", "SETTINGS", "Tally", "compare", "differing_settings"]
