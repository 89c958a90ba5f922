"""The checks of an endpoint's ``ab:`` A/B test (PC117, PC309), and the ``ABSpec`` they give.

Two kinds of problem, both reported at the YAML node they are about:

* what the conf model refuses inside ``ab:`` (``peach_cli.project.ab_errors``: PC117
  instead of the generic PC103);
* what needs the endpoint's components (``check_ab``): a split naming a component the
  endpoint does not have, or the fallback, and percentages that do not sum to 100 (PC117,
  all of them in one run), and a non-fallback component that is
  neither ``main`` nor in the split, which can never answer (warning PC309) — with or
  without an A/B test.
"""

from __future__ import annotations

from peach_cli.project.ab_errors import PERCENT_HINT, Locate
from peach_cli.project.conf import Endpoint
from peach_cli.project.diagnostics import Diagnostic, did_you_mean
from peach_cli.runtime.plan import FALLBACK, PRIMARY, ABSpec


def check_ab(
    name: str, endpoint: Endpoint, locate: Locate, *, refused: bool = False
) -> tuple[list[Diagnostic], ABSpec | None]:
    """Check an endpoint's split against its components; the ``ABSpec`` when it has one
    and it is valid. ``refused``: the conf has an ``ab:`` the model refused (PC117 is
    reported already), so nothing is said about which components answer."""
    if refused:
        return [], None
    problems: list[Diagnostic] = []
    components = list(endpoint.components)
    arms = [c for c in components if c != FALLBACK]
    ab = endpoint.ab
    split = dict(ab.split) if ab is not None else {}
    for arm in split:
        where = locate(("endpoints", name, "ab", "split", arm), key=True)
        if arm == FALLBACK:
            problems.append(
                Diagnostic(
                    "PC117",
                    f"the fallback cannot be an arm of endpoint '{name}': it answers for "
                    "every arm when that arm fails",
                    where,
                    f"split the requests between {', '.join(arms) or PRIMARY} only",
                )
            )
        elif arm not in endpoint.components:
            problems.append(
                Diagnostic(
                    "PC117",
                    f"the split of endpoint '{name}' names '{arm}', which is not one of its "
                    f"components ({', '.join(components)})",
                    where,
                    did_you_mean(arm, arms) or f"add a component named {arm}",
                )
            )
    total = sum(split.values())
    if ab is not None and total != 100:
        problems.append(
            Diagnostic(
                "PC117",
                f"invalid endpoints.{name}.ab.split: the percentages sum to {total}, not 100",
                locate(("endpoints", name, "ab", "split")),
                PERCENT_HINT,
            )
        )
    if problems:  # a wrong split: those errors say what to fix
        return problems, None
    if len(arms) > 1 or ab is not None:
        for component in arms:
            if component == PRIMARY or component in split:
                continue
            reason = (
                f"it is not in the split of ab: ({', '.join(split)})"
                if ab is not None
                else "the endpoint has no ab: test, so only main answers"
            )
            hint = (
                f"add {component} to ab.split (the percentages still summing to 100), or remove it"
                if ab is not None
                else f"give it a share: ab: {{by: user, split: {{main: 90, {component}: 10}}}}"
            )
            problems.append(
                Diagnostic(
                    "PC309",
                    f"component '{component}' of endpoint '{name}' can never answer: {reason}",
                    locate(("endpoints", name, "components", component), key=True),
                    hint,
                )
            )
    if ab is None:
        return problems, None
    return problems, ABSpec(ab.by, tuple(split.items()))
