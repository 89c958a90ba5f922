"""The live table of ``peach dev``: endpoints, their components and replicas, readable at 80
columns.

Each endpoint is a heading (its name, url and A/B test) over the rows of its components'
replicas: component, replica, state, requests, p50, memory; a replica's last error is a line
of its own under the endpoint, cut to the width. Names and states are never cut: what gives
way is the replica id (shown as ``#2``, the endpoint and component being on the row), an A/B
arm's routed count (on a second line when the terminal is narrow) and the last error. Every
endpoint's table has the same column widths, so the columns line up down the screen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from peach_cli import boundary
from peach_cli.wording import human_size

if TYPE_CHECKING:
    from simulator.events import ReplicaState


class ReplicaRow(Protocol):
    """What the table shows of a replica (``views.dev.ReplicaRow``)."""

    id: str
    state: ReplicaState
    requests: int
    memory: int | None
    limit: int | None
    over_limit: bool
    last_error: str | None

    @property
    def p50(self) -> float | None: ...


WIDE = 100
"""From this width on, an A/B arm's share and routed count stay on the component's line."""
COLUMNS = ("component", "replica", "state", "reqs", "p50", "memory")


@dataclass(frozen=True)
class EndpointRows:
    """One endpoint as the table shows it."""

    name: str
    url: str
    by: str | None
    """The A/B test's ``by`` (None: no A/B test)."""
    components: Sequence[tuple[str, Text, Sequence[ReplicaRow]]]
    """(component name, its label, its replicas) in plan order."""


def short_id(replica_id: str) -> str:
    """``reco/main#2`` → ``#2`` (the row names the endpoint and component already).

    >>> short_id("recommend/main#12"), short_id("-")
    ('#12', '-')
    """
    return replica_id[replica_id.rfind("#") :] if "#" in replica_id else replica_id


def render_endpoints(
    endpoints: Sequence[EndpointRows],
    width: int,
    *,
    state_style: Callable[[ReplicaRow], str],
    latency: Callable[[float], str],
    height: int | None = None,
) -> RenderableType:
    """The endpoints' tables for a terminal ``width`` columns wide; with ``height``, only
    the endpoints that fit in that many lines, then a line saying how many more there are
    (the terminal would cut them anyway: what is drawn costs the same whatever the count)."""
    rows: list[tuple[int, list[Text]]] = []
    errors: dict[int, list[Text]] = {}
    for index, endpoint in enumerate(endpoints):
        for name, label, replicas in endpoint.components:
            first = True
            for row in replicas:
                cells = [
                    _component_cell(label, width) if first else Text(""),
                    Text(short_id(row.id), style="dim"),
                    Text(row.state.value, style=state_style(row)),
                    Text(str(row.requests), justify="right"),
                    Text(latency(row.p50) if row.p50 is not None else "-", justify="right"),
                    _memory(row),
                ]
                rows.append((index, cells))
                if row.last_error:
                    where = f"  {name} {short_id(row.id)}: "
                    error = Text.assemble((where, "dim"), (boundary.shown(row.last_error), "red"))
                    error.no_wrap, error.overflow = True, "ellipsis"
                    errors.setdefault(index, []).append(error)
                first = False
    widths = [len(c) for c in COLUMNS]
    for _, cells in rows:
        for column, cell in enumerate(cells):
            widths[column] = max(widths[column], max(map(len, cell.plain.split("\n"))))
    parts: list[RenderableType] = []
    lines = 0
    for index, endpoint in enumerate(endpoints):
        shown = [cells for at, cells in rows if at == index]
        lines += 2 + sum(cells[0].plain.count("\n") + 1 for cells in shown)
        lines += len(errors.get(index, []))
        if height is not None and lines > height - 1 and index:
            more = len(endpoints) - index
            parts.append(
                Text(
                    f"… {more} more endpoint{'s' if more > 1 else ''} not shown (a taller terminal shows more)",
                    style="dim",
                )
            )
            break
        heading = Text.assemble((endpoint.name, "bold"), " ", endpoint.url)
        if endpoint.by:
            heading.append(f" · A/B by {endpoint.by}", "cyan")
        table = Table(box=None, pad_edge=False, header_style="bold dim", expand=False)
        for column, title in enumerate(COLUMNS):
            table.add_column(
                title,
                no_wrap=True,
                min_width=widths[column],
                justify="right" if title in ("reqs", "p50") else "left",
            )
        for cells in shown:
            table.add_row(*cells)
        parts += [heading, table, *errors.get(index, [])]
    return Group(*parts)


def _component_cell(label: Text, width: int) -> Text:
    """The component's label; in a narrow terminal its A/B share and count below it."""
    if width >= WIDE or " " not in label.plain:
        return label
    head, _, rest = label.plain.partition(" ")
    cell = label.copy()
    cell.plain = f"{head}\n{rest}"  # the same styles, a line break where the space was
    return cell


def _memory(row: ReplicaRow) -> Text:
    if not row.memory:
        return Text("")
    memory = Text(human_size(row.memory), style="bold red" if row.over_limit else "")
    if row.limit:
        memory.append(f"/{human_size(row.limit)}", "dim")
    return memory
