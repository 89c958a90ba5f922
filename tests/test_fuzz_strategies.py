"""What `peach fuzz` draws from a parameter's JSON Schema (``peach_cli.fuzz.strategies``):
every edge value SPEC §11 lists is reachable, a query string only gets what it can say, a
JSON body never gets a non-finite float, and a finding's name and ready case (``findings``).
"""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, find, settings
from hypothesis.errors import NoSuchExample

from peach_cli.fuzz.findings import Finding, judge
from peach_cli.fuzz.strategies import LONG_LIST, LONG_TEXT, Request, request_strategy
from peach_cli.fuzz.targets import Parameter, Target, targets_of
from peach_cli.fuzz.watch import Heard
from peach_cli.testing.outcome import Observed

QUICK = settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck))
NEVER = settings(QUICK, max_examples=300)


def _target(**schemas: dict) -> Target:
    return Target("t", "/t", tuple(Parameter(n, s, required=True) for n, s in schemas.items()))


def _reaches(target: Target, condition, chances: settings = QUICK) -> Request:
    return find(request_strategy(target), condition, settings=chances)


@pytest.mark.parametrize(
    "schema, wanted",
    [
        ({"type": "integer"}, lambda v: v == 0),
        ({"type": "integer"}, lambda v: v < 0),
        ({"type": "integer"}, lambda v: v >= 2**63),
        ({"type": "string"}, lambda v: v == ""),
        ({"type": "string"}, lambda v: any(ord(c) > 0x7F for c in v)),
        ({"type": "string"}, lambda v: len(v) >= LONG_TEXT),
        ({"type": "array", "items": {"type": "integer"}}, lambda v: v == []),
        ({"type": "array", "items": {"type": "integer"}}, lambda v: len(v) >= LONG_LIST),
        ({"type": "number"}, lambda v: v == "NaN"),  # in a query string, as float() reads it
        ({"type": ["string", "null"]}, lambda v: v is None),
        ({"type": "string", "enum": ["fast", "slow"]}, lambda v: v == "slow"),
    ],
)
def test_every_edge_value_is_reachable(schema: dict, wanted) -> None:
    found = _reaches(_target(x=schema), lambda r: wanted(r.params["x"]))
    assert wanted(found.params["x"])


def test_a_json_body_never_carries_a_non_finite_float() -> None:
    with pytest.raises(NoSuchExample):
        _reaches(
            _target(x={"type": "number"}),
            lambda r: r.method == "POST" and not math.isfinite(r.params["x"]),
            NEVER,
        )


@pytest.mark.slow
def test_a_query_string_only_gets_what_it_can_say() -> None:
    nested = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    request = _reaches(_target(x=nested), lambda r: True)
    assert request.method == "POST"  # a list of lists cannot be said in a query string
    with pytest.raises(NoSuchExample):
        _reaches(_target(x=nested), lambda r: r.method == "GET", NEVER)


def test_requests_shrink_towards_get_and_the_least_values() -> None:
    request = _reaches(_target(a={"type": "integer"}, b={"type": "integer"}), lambda r: True)
    assert request == Request("GET", {"a": 0, "b": 0})


def test_targets_are_read_from_the_documents_parameters() -> None:
    document = {
        "paths": {
            "/chat": {
                "get": {
                    "x-peach-endpoint": "chat",
                    "parameters": [
                        {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}},
                        {"name": "stream", "in": "query", "required": True, "schema": {"const": True}},
                    ],
                },
                "post": {
                    "x-peach-endpoint": "chat",
                    "requestBody": {"content": {"application/json": {"schema": {
                        "type": "object",
                        "properties": {"q": {"type": "string"}, "stream": {"const": True}},
                        "required": ["q", "stream"],
                    }}}},
                },
            },
            "/_peach/openapi.json": {"get": {}},
        }
    }  # fmt: skip
    [chat] = targets_of(document)
    assert (chat.endpoint, chat.url, chat.streams) == ("chat", "/chat", True)
    assert chat.parameters == (Parameter("q", {"type": "string"}, required=True),)


def _finding(**changes) -> Finding:
    base = dict(
        endpoint="divide", url="/divide", component="main", kind="method_error",
        method="GET", params={"b": 0}, status=500,
        error="divide() raised ZeroDivisionError: integer division or modulo by zero",
    )  # fmt: skip
    return Finding(**{**base, **changes})


def test_a_finding_is_named_by_its_exception_and_its_case_expects_the_fix() -> None:
    finding = _finding()
    assert finding.name == "divide: method_error in main (ZeroDivisionError)"
    [case] = yaml.safe_load(finding.case_yaml())
    assert case == {
        "name": finding.name,
        "url": "/divide",
        "params": {"b": 0},
        "expect": {"status": 200, "component": "main"},
    }
    timeout = _finding(kind="timeout", error="/divide (main) did not answer", timeout_s=0.5)
    assert timeout.name == "divide: timeout in main"
    assert yaml.safe_load(timeout.case_yaml())[0]["expect"]["max_ms"] == 500


def test_judging_answers() -> None:
    target = _target(b={"type": "integer"})
    request = Request("GET", {"b": 0})

    def judged(heard: Heard | None = None, **observed) -> str | None:
        found = judge(target, request, Observed(**observed), heard)
        return None if found is None else found.kind

    assert judged(status=200, result=1) is None
    assert judged(status=400, error_code="bad_request") is None
    assert judged(status=503, error_code="unavailable") is None  # documented
    assert judged(status=500, error_code="method_error") == "method_error"
    assert judged(status=504, error_code="timeout") == "timeout"
    assert judged(status=502, text="Bad Gateway") == "server_error"
    assert judged(status=500, error_code="oops") == "server_error"
    covered = Heard(True, 200, covered="method_error: f() raised KeyError: 'x'")
    assert judged(covered, status=200, result=1) == "method_error"
    late = Heard(True, 200, covered="timeout: /t (main) did not answer within timeout_s")
    assert judged(late, status=200, result=1) == "timeout"
    died = Heard(True, 500, died=[("t/main", "t/main#1", "the replica process exited")])
    assert judged(died, status=500, error_code="method_error") == "replica_died"


def test_a_finding_that_does_not_come_back_when_sent_again_is_not_reported() -> None:
    """A timing-dependent failure (a timeout on the boundary, a replica restarting) may not
    repeat: its shrunk request is sent once more, and what does not fail again is dropped —
    never a traceback (Hypothesis raises its flaky error on the way)."""
    from peach_cli.fuzz.engine import explore, quiet_hypothesis

    target = _target(b={"type": "integer"})
    calls = []

    def probe(request: Request) -> Finding | None:
        calls.append(request)
        return _finding(kind="timeout", error="too slow") if len(calls) == 1 else None

    with quiet_hypothesis():
        found = explore(target, probe, examples=20, seed=1)
    assert found == []


def test_a_bug_of_a_long_list_is_shrunk_to_the_least_length() -> None:
    """A long list is one value repeated, and its length shrinks too: a bug that needs ten
    items is shown with ten (a replica that dies of them as well as any other bug)."""
    from peach_cli.fuzz.engine import explore, quiet_hypothesis

    target = _target(jobs={"type": "array", "items": {"type": "integer"}})

    def probe(request: Request) -> Finding | None:
        jobs = request.params["jobs"]
        if len(jobs) < 10:
            return None
        return _finding(kind="replica_died", params=request.params, method=request.method)

    with quiet_hypothesis():
        [found] = explore(target, probe, examples=50, seed=3)
    assert found.params == {"jobs": [0] * 10}


def test_two_bugs_of_one_endpoint_are_both_found_and_shrunk() -> None:
    from peach_cli.fuzz.engine import explore, quiet_hypothesis

    target = _target(b={"type": "integer"})

    def probe(request: Request) -> Finding | None:
        b = request.params["b"]
        if b == 0:
            return _finding(params={"b": b}, method=request.method)
        if b > 1000:
            return _finding(
                kind="timeout", error="slow", params={"b": b}, method=request.method, status=504
            )
        return None

    with quiet_hypothesis():
        found = explore(target, probe, examples=100, seed=1)
    by_kind = {f.kind: f for f in found}
    assert sorted(by_kind) == ["method_error", "timeout"]
    assert by_kind["method_error"].params == {"b": 0}
    assert by_kind["timeout"].params["b"] > 1000  # (found among the edge values: 2**31)
    assert all(f.method == "GET" for f in found)
