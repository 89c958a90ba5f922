"""What the conf model refuses inside an endpoint's ``ab:`` (an unknown ``by``, a percentage
that is not a whole number from 0 to 100), as PC117 at its YAML node instead of the generic
PC103. The checks that need the endpoint's components (and the sum of the split) are
``peach_cli.checks.ab``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from peach_cli.project.diagnostics import Diagnostic, Position, did_you_mean

Locate = Callable[..., Position]
"""``locate(path, key=False)``: the position of a conf node (``Project.position``)."""

BY_VALUES = ("user", "client", "session")
PERCENT_HINT = "percentages are whole numbers from 0 to 100, and they sum to 100"


def is_ab_location(loc: tuple[Any, ...]) -> bool:
    """Whether a pydantic error location is inside an endpoint's ``ab:``."""
    return len(loc) >= 3 and loc[0] == "endpoints" and loc[2] == "ab"


def schema_problem(item: Any, locate: Locate) -> Diagnostic | None:
    """PC117 for a pydantic error inside ``ab:`` (None: not one; unknown and missing keys
    stay PC101 and PC102)."""
    loc = tuple(item["loc"])
    kind = item["type"]
    if not is_ab_location(loc) or kind in ("extra_forbidden", "missing"):
        return None
    endpoint = loc[1]
    where = ".".join(str(p) for p in loc)
    value = item.get("input")
    tail = loc[3:]
    hint: str | None = None
    if not tail:
        message = f"endpoints.{endpoint}.ab must be a mapping of by and split"
        hint = "ab: {by: user, split: {main: 90, other: 10}}"
    elif tail == ("by",):
        message = f"invalid {where}: {value!r} is not one of {', '.join(BY_VALUES)}"
        hint = did_you_mean(str(value), BY_VALUES) or (
            "by: user reads user_id, client reads client_id, session reads session_id"
        )
    elif tail == ("split",) and kind == "value_error":
        text = str(item.get("msg", "")).removeprefix("Value error, ")
        message = f"invalid {where}: {text}"
        hint = PERCENT_HINT
    elif tail == ("split",):
        message = f"invalid {where}: it must map components to percentages"
        hint = "split: {main: 90, other: 10}"
    else:
        message = f"invalid {where}: {value!r} is not a whole percentage from 0 to 100"
        hint = PERCENT_HINT
    return Diagnostic("PC117", message, locate(loc), hint)
