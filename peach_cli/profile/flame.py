"""A flame graph of a ``Profile`` as one SVG file: no script, nothing fetched, readable offline.

The widest frames are where the time went; each frame is a box over the function that called
it, as wide as its share of the samples, labelled ``function · position`` as far as the box
allows, with the whole label and the share as its hover text (``<title>``). The user's
notebook code is warm, libraries and the standard library are blue, peach's own frames grey.

    svg = flame_graph(profile, "GET /hot, wall-clock")
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from peach_cli.boundary import Secrets
from peach_cli.boundary import shown as plain  # escaped: no run's secrets known
from peach_cli.profile.model import PEACH, Frame, Profile

WIDTH = 1200
ROW = 18
MARGIN = 10
TOP = 46
CHAR_PX = 7.0
"""The width of one character of the 12 px monospace labels, roughly."""
MIN_PX = 0.5
"""Narrower frames are left out (their time is still in their callers)."""


@dataclass
class _Node:
    frame: Frame
    weight: float = 0.0
    children: dict[Frame, _Node] = field(default_factory=dict)


def _tree(profile: Profile) -> _Node:
    root = _Node(("", "all"))
    for stack, weight in profile.stacks.items():
        node = root
        node.weight += weight
        for frame in stack:
            node = node.children.setdefault(frame, _Node(frame))
            node.weight += weight
    return root


def _depth(node: _Node) -> int:
    return 1 + max((_depth(child) for child in node.children.values()), default=0)


def _colour(frame: Frame, kind: str) -> str:
    if frame == PEACH:
        return "#c8c8c8"
    seed = zlib.crc32(frame[1].encode())
    if kind in ("notebook", "project"):
        return f"rgb(240,{110 + seed % 110},{40 + seed % 40})"
    return f"rgb({90 + seed % 50},{150 + seed % 50},{215 + seed % 40})"


def _label(frame: Frame) -> str:
    position, function = frame
    if frame == PEACH:
        return "peach (its own code: the runtime, the event loop)"
    if not position:
        return function
    return f"{function} · {position}"


def flame_graph(profile: Profile, title: str, secrets: Secrets | None = None) -> str:
    """The SVG text of ``profile``'s flame graph (the root at the bottom); ``secrets``
    masked in its labels before a box cuts them to its width."""
    shown = secrets.shown if secrets is not None else plain
    root = _tree(profile)
    depth = _depth(root)
    height = TOP + depth * ROW + MARGIN * 2
    total = root.weight or 1.0
    scale = (WIDTH - 2 * MARGIN) / total
    boxes: list[str] = []

    def place(node: _Node, x: float, level: int) -> None:
        width = node.weight * scale
        if width < MIN_PX:
            return
        y = height - MARGIN - (level + 1) * ROW
        share = node.weight / total
        label = shown(_label(node.frame))
        kind = profile.kinds.get(node.frame, "peach" if node.frame == PEACH else "")
        hover = f"{label} — {share:.1%} of the time"
        fits = int((width - 6) / CHAR_PX)
        text = label if len(label) <= fits else (label[: fits - 1] + "…" if fits > 3 else "")
        boxes.append(
            f'<g><title>{escape(hover)}</title><rect x="{x:.1f}" y="{y}" width="{width:.1f}" '
            f'height="{ROW - 1}" rx="2" fill="{_colour(node.frame, kind)}"/>'
            + (f'<text x="{x + 3:.1f}" y="{y + ROW - 5}">{escape(text)}</text>' if text else "")
            + "</g>"
        )
        offset = x
        for child in sorted(node.children.values(), key=lambda c: c.frame):
            place(child, offset, level + 1)
            offset += child.weight * scale

    place(root, MARGIN, 0)
    heading = shown(title)
    subtitle = (
        f"{profile.samples} samples over {profile.duration_s:.1f} s · "
        f"{'CPU time' if profile.mode == 'cpu' else 'wall-clock time'} · "
        "hover a frame for its share"
    )
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="12">',
            f"<title>{escape(heading)}</title>",
            "<style>text{fill:#000;pointer-events:none}rect:hover{stroke:#000;"
            "stroke-width:1}</style>",
            f'<rect width="{WIDTH}" height="{height}" fill="#fbfbf7"/>',
            f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="15">'
            f"{escape(heading)}</text>",
            f'<text x="{WIDTH / 2}" y="36" text-anchor="middle" fill="#555">'
            f"{escape(subtitle)}</text>",
            *boxes,
            "</svg>",
            "",
        ]
    )


__all__ = ["flame_graph"]
