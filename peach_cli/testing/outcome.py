"""What came of a case: what was observed, and the expect keys it did not meet.

``Observed`` is what came back for one request (``peach_cli.testing.run.observe`` reads
it); ``compare`` holds it against a case's ``expect`` and gives the ``Mismatch``es, each
with the diff to show; an ``Outcome`` keeps both for one case of a case file::

    mismatches = compare(case.expect, observed)       # [] when the case passes

JSON is compared as JSON (``json_equal``: ``1 == 1.0`` but ``True != 1``), and
``result_contains`` by ``contains``. Nothing here prints.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach_cli.testing.cases import Expect, LoadedCase

MISSING: Any = object()


@dataclass
class Observed:
    """What came back for one request."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    result: Any = MISSING
    """The envelope's result (or the whole JSON body when it is no envelope)."""
    error_code: str | None = None
    error_message: str | None = None
    stream: bool = False
    """The answer was a stream (chunks), not one document."""
    text: str | None = None
    raw_text: str | None = None
    """A stream's bytes as they came, as UTF-8 (``text`` is what its frames say)."""
    chunks: int = 0
    cut: bool = False
    """The stream ended before its end: the server cut it (its generator raised)."""
    stalled: str | None = None
    """Why the stream was left: no data came for the client's timeout (not a cut)."""
    abandoned: bool = False
    """The reader left the stream at its deadline (``stream_limit_s``): neither cut nor
    finished."""
    elapsed_ms: float = 0.0
    """Until the answer (or the first chunk of a stream)."""
    total_ms: float = 0.0
    failure: str | None = None
    """Why no answer came (cannot connect, timed out, ...)."""
    refused: bool = False
    """No answer came because the connection was refused: nothing listens there."""

    @property
    def component(self) -> str | None:
        return self.headers.get("x-peach-component")

    @property
    def replica(self) -> str | None:
        return self.headers.get("x-peach-replica")


@dataclass(frozen=True)
class Mismatch:
    """One expect key the answer did not meet, with the diff to show."""

    key: str
    message: str
    diff: tuple[str, ...] = ()


@dataclass
class Outcome:
    """One case run: what was observed and the expect keys it did not meet."""

    file: str
    loaded: LoadedCase
    observed: Observed
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.loaded.case.name

    @property
    def place(self) -> str:
        """``tests/greet.peach-test.yaml:12``: the file and line where the case starts."""
        return f"{self.file}:{self.loaded.position.line}"

    @property
    def passed(self) -> bool:
        return not self.mismatches

    @property
    def ms(self) -> float:
        return self.observed.total_ms

    @property
    def unanswered(self) -> bool:
        """No answer came (a refused connection, the client's timeout): an error of the
        run, not a mismatch of the endpoint."""
        return self.observed.failure is not None

    def message(self) -> str:
        return "; ".join(m.message for m in self.mismatches)

    def details(self) -> str:
        """Every mismatch with its diff, as plain text."""
        lines: list[str] = []
        for mismatch in self.mismatches:
            lines.append(f"{mismatch.key}: {mismatch.message}")
            lines += [f"  {line}" for line in mismatch.diff]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "name": self.name,
            "line": self.loaded.position.line,
            "passed": self.passed,
            "ms": round(self.ms, 1),
            "status": self.observed.status,
            "component": self.observed.component,
            "failures": [
                {"key": m.key, "message": m.message, "diff": list(m.diff)} for m in self.mismatches
            ],
        }


def json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON: ``1 == 1.0`` but ``True != 1``, and lists in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def contains(observed: Any, expected: Any) -> bool:
    """Every key given equal (recursively); for lists, the items given, in order."""
    if isinstance(expected, dict):
        return isinstance(observed, dict) and all(
            key in observed and contains(observed[key], value) for key, value in expected.items()
        )
    if isinstance(expected, list):
        if not isinstance(observed, list):
            return False
        items = iter(observed)
        return all(any(contains(item, wanted) for item in items) for wanted in expected)
    return json_equal(observed, expected)


def json_text(value: Any) -> str:
    if value is MISSING:
        return "(no result)"
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def json_diff(
    expected: Any, observed: Any, *, names: tuple[str, str] = ("expected", "observed")
) -> tuple[str, ...]:
    """A unified diff of two JSON values, each as indented, key-sorted JSON."""
    lines = difflib.unified_diff(
        json_text(expected).splitlines(),
        json_text(observed).splitlines(),
        fromfile=names[0],
        tofile=names[1],
        lineterm="",
        n=3,
    )
    return tuple(lines)


def _scalar_diff(expected: Any, observed: Any) -> tuple[str, ...]:
    return ("--- expected", "+++ observed", f"-{_short(expected)}", f"+{_short(observed)}")


def _short(value: Any) -> str:
    if value is MISSING or value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False, default=str)


def compare(expect: Expect, observed: Observed) -> list[Mismatch]:
    """The expect keys ``observed`` does not meet (none: the case passes)."""
    if observed.failure is not None:
        return [Mismatch("answer", f"no answer: {observed.failure}")]
    problems: list[Mismatch] = []

    def fail(key: str, message: str, expected: Any, got: Any, as_json: bool = False) -> None:
        diff = json_diff(expected, got) if as_json else _scalar_diff(expected, got)
        problems.append(Mismatch(key, message, diff))

    status = expect.status
    if status is None and expect.error_code is None:
        status = 200  # the default, unless an error code is expected
    if status is not None and observed.status != status:
        detail = (
            f" ({observed.error_code}: {observed.error_message})" if observed.error_code else ""
        )
        fail(
            "status",
            f"status {observed.status}, expected {status}{detail}",
            status,
            observed.status,
        )
    given = expect.model_fields_set  # the keys the case file sets
    if "component" in given and observed.component != expect.component:
        fail("component", "another component answered", expect.component, observed.component)
    if "result" in given and (
        observed.result is MISSING or not json_equal(observed.result, expect.result)
    ):
        fail("result", "the result differs", expect.result, observed.result, as_json=True)
    if "result_contains" in given and (
        observed.result is MISSING or not contains(observed.result, expect.result_contains)
    ):
        fail(
            "result_contains",
            "the result does not contain what is expected",
            expect.result_contains,
            observed.result,
            as_json=True,
        )
    if "error_code" in given and observed.error_code != expect.error_code:
        fail("error_code", "another error code", expect.error_code, observed.error_code)
    if "text_contains" in given:
        assert expect.text_contains is not None
        if observed.text is None or expect.text_contains not in observed.text:
            fail(
                "text_contains",
                f"the text does not contain {expect.text_contains!r}",
                expect.text_contains,
                observed.text,
            )
    if "chunks_min" in given:
        assert expect.chunks_min is not None
        if observed.chunks < expect.chunks_min:
            fail(
                "chunks_min",
                f"{observed.chunks} chunks, expected at least {expect.chunks_min}",
                expect.chunks_min,
                observed.chunks,
            )
    if observed.stalled is not None:  # unfinished, whatever the case expects of it
        problems.append(Mismatch("stream", observed.stalled))
    if "cut" in given and observed.cut != expect.cut:
        fail(
            "cut",
            "the stream was cut" if observed.cut else "the stream was not cut",
            expect.cut,
            observed.cut,
        )
    if "max_ms" in given:
        assert expect.max_ms is not None
        if observed.elapsed_ms > expect.max_ms:
            fail(
                "max_ms",
                f"answered in {observed.elapsed_ms:.0f} ms, more than {expect.max_ms:g} ms",
                expect.max_ms,
                round(observed.elapsed_ms, 1),
            )
    return problems
