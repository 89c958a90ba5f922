"""A `peach test` run's outcomes (``peach_cli.testing.outcome.Outcome``) in their machine-readable
forms: JSON and JUnit XML (``rendered`` picks the one ``--format`` asks for).

JUnit XML is what CI systems read, valid against Jenkins' xUnit schema (``junit-10.xsd``,
``tests/data``): one ``<testsuite>`` per case file (``file`` the file), one ``<testcase>``
per case (``classname`` the file as pytest names it, ``time`` in seconds), a ``<failure>``
with the case's place (``file:line: name``), the message and the diffs for each failing
case, an ``<error>`` for a case that got no answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach_cli.boundary import Secrets
    from peach_cli.testing.outcome import Outcome


def summary_counts(outcomes: list[Outcome]) -> tuple[int, int]:
    passed = sum(o.passed for o in outcomes)
    return passed, len(outcomes) - passed


def to_json(outcomes: list[Outcome], seconds: float) -> dict[str, Any]:
    passed, failed = summary_counts(outcomes)
    return {
        "passed": passed,
        "failed": failed,
        "seconds": round(seconds, 3),
        "cases": [o.to_dict() for o in outcomes],
    }


def rendered(outcomes: list[Outcome], seconds: float, output_format: str, secrets: Secrets) -> str:
    """The run as ``output_format`` asks: the JSON document (``json``) or the JUnit XML
    (``junit``), as the text written, the run's ``secrets`` masked in it."""
    if output_format == "json":
        return secrets.json_text(to_json(outcomes, seconds)) + "\n"
    return to_junit(outcomes, seconds, secrets)


def junit_classname(file: str) -> str:
    """A case's ``classname``: its file as pytest's JUnit report names a collected file's
    items (``tests/greet.peach-test.yaml`` → ``tests.greet.peach-test.yaml``), so that
    `peach test` and the pytest plugin report the same case alike."""
    return file.replace("/", ".")


def to_junit(outcomes: list[Outcome], seconds: float, secrets: Secrets) -> str:
    """JUnit XML as Jenkins' xUnit schema (``junit-10.xsd``) takes it: one testsuite per case
    file (its ``file``), one testcase per case; a case that got no answer is an ``<error>``
    (counted in ``errors``), one whose answer differs a ``<failure>`` whose message starts
    with the case's place (``file:line: name``)."""
    import xml.etree.ElementTree as ET

    shown, shown_lines = secrets.shown, secrets.shown_lines  # masked before XML escapes them

    suites = ET.Element("testsuites", name="peach test", time=f"{seconds:.3f}")
    by_file: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_file.setdefault(outcome.file, []).append(outcome)
    totals = {"failures": 0, "errors": 0}
    for file, cases in by_file.items():
        errors = sum(o.unanswered for o in cases)
        failures = sum(not o.passed for o in cases) - errors
        totals["failures"] += failures
        totals["errors"] += errors
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=shown(file),
            tests=str(len(cases)),
            failures=str(failures),
            errors=str(errors),
            skipped="0",
            time=f"{sum(o.ms for o in cases) / 1000:.3f}",
            file=shown(file),
        )
        for outcome in cases:
            case = ET.SubElement(
                suite,
                "testcase",
                name=shown(outcome.name),
                classname=shown(junit_classname(file)),
                time=f"{outcome.ms / 1000:.3f}",
            )
            if outcome.passed:
                continue
            kind, what = ("error", "no_answer") if outcome.unanswered else ("failure", "mismatch")
            element = ET.SubElement(
                case,
                kind,
                message=shown(f"{outcome.place}: {outcome.name}: {outcome.message()}"),
                type=what,
            )
            element.text = shown_lines(f"{outcome.place}: {outcome.name}\n{outcome.details()}")
    suites.set("tests", str(len(outcomes)))
    suites.set("failures", str(totals["failures"]))
    suites.set("errors", str(totals["errors"]))
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )
