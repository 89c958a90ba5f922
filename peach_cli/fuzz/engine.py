"""Hypothesis, driven for `peach fuzz`: one property per endpoint — "no request finds
anything" — run for ``examples`` generated requests from ``seed``, each failure shrunk.

    findings = explore(target, probe, examples=50, seed=1)

``probe`` sends one request and returns its ``Finding`` (or None). Each shrunk request is
sent once more before it is reported (``confirmed``): what does not fail again is dropped. A finding raises an
exception whose class is made for its signature (the endpoint, kind, component and
exception type): Hypothesis tells distinct failures apart by their exception's class, so
two bugs of one endpoint are both found and each is shrunk on its own.

Hypothesis keeps no example database, and its home — where it caches its Unicode tables,
which take seconds to build — is peach's folder in the user's cache
(``~/.cache/peach/hypothesis``), never the project. Its reports, warnings and health checks
are silenced: the findings are all the user sees.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from peach_cli.fuzz.findings import Finding
from peach_cli.fuzz.strategies import Request, request_strategy
from peach_cli.fuzz.targets import Target


class Found(Exception):
    """A probe found something (a subclass per signature; see the module docstring)."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.name)
        self.finding = finding


@contextmanager
def quiet_hypothesis() -> Iterator[None]:
    """Hypothesis with its home in peach's cache folder, its reporter and warnings silenced."""
    import hypothesis.configuration as configuration
    from hypothesis.reporting import with_reporter

    from peach_cli.envs.paths import user_cache_home

    configuration.set_hypothesis_home_dir(user_cache_home() / "peach" / "hypothesis")
    try:
        with warnings.catch_warnings(), with_reporter(lambda _value: None):
            warnings.simplefilter("ignore")
            yield
    finally:
        configuration.set_hypothesis_home_dir(None)  # back to its default


def _found_in(error: BaseException, depth: int = 0) -> list[Finding]:
    """The findings an exception Hypothesis raised carries: itself, the members of a group
    (several failures, or a flaky one), or its cause."""
    if isinstance(error, Found):
        return [error.finding]
    if depth > 8:
        return []
    if isinstance(error, BaseExceptionGroup):
        return [f for inner in error.exceptions for f in _found_in(inner, depth + 1)]
    cause = error.__cause__ or error.__context__
    return _found_in(cause, depth + 1) if cause is not None else []


def explore(
    target: Target,
    probe: Callable[[Request], Finding | None],
    *,
    examples: int,
    seed: int,
    resend: Callable[[Finding], Request] | None = None,
) -> list[Finding]:
    """The findings of ``examples`` requests to ``target``, each shrunk to a minimal one and
    confirmed by the request ``resend`` gives for it (default: its own)."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as seeded

    kinds: dict[tuple[str, ...], type[Found]] = {}

    def check(request: Request) -> None:
        finding = probe(request)
        if finding is None:
            return
        raise kinds.setdefault(finding.signature, type("Found", (Found,), {}))(finding)

    run = seeded(seed)(
        settings(
            max_examples=examples,
            database=None,
            deadline=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            report_multiple_bugs=True,
            verbosity=Verbosity.quiet,
            print_blob=False,
        )(given(request_strategy(target))(check))
    )
    try:
        run()
    except Exception as error:  # Hypothesis re-raises what the shrunk examples raised
        found = _found_in(error)  # each from the replay of its shrunk request
        if not found:
            raise
        unique = {f.signature: f for f in reversed(found)}
        return confirmed(sorted(unique.values(), key=found.index), probe, resend or own_request)
    return []


def own_request(finding: Finding) -> Request:
    """The request that showed ``finding``."""
    return Request(finding.method, finding.params)


def confirmed(
    findings: list[Finding],
    probe: Callable[[Request], Finding | None],
    resend: Callable[[Finding], Request] = own_request,
) -> list[Finding]:
    """The findings whose request (``resend``'s for it: its own, or for a timeout one with
    a margin), sent once more, fails the same way again (as what that send showed): one
    that does not come back — a timeout on the boundary, a request that met a replica
    restarting — is no bug its ready case could show."""
    kept = []
    for finding in findings:
        again = probe(resend(finding))
        if again is not None and again.signature == finding.signature:
            kept.append(again)
    return kept
