"""Where the time went: the replicas' profiles merged, peach's frames folded, the hottest lines.

Each replica sends a profile (``peach_cli.runtime.sampler``): a table of frames
``(kind, position, function)`` and stacks of indices into it, root first, each with its
weight in seconds. ``Profile.merge`` folds every run of peach's own frames — the runtime, and
the standard library it calls (the event loop, the thread pool) — into one ``peach`` frame,
keeps the user's code and what it calls (a library, ``asyncio.sleep``) as they are, and adds
up the stacks of every replica::

    profile = Profile.merge(profiles, duration_s=10.0)
    profile.hottest("self")[0]   # Line("notebooks/Hot.ipynb, cell 3, line 4", "busy", 0.61)

The JSON of `peach profile --format json` (SPEC §12) is ``profile.to_json()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

PEACH = ("peach", "peach")
"""The one frame every run of peach's own frames becomes: (position, function)."""

Frame = tuple[str, str]
"""(position, function): ``("notebooks/X.ipynb, cell 2, line 4", "busy")``."""


@dataclass(frozen=True)
class Line:
    """One row of a table: a position, its function and its share of the samples."""

    position: str
    function: str
    share: float

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "function": self.function, "share": self.share}


@dataclass
class Profile:
    """Folded stacks (root first) and the seconds each stands for, over every replica."""

    stacks: dict[tuple[Frame, ...], float] = field(default_factory=dict)
    samples: int = 0
    duration_s: float = 0.0
    kinds: dict[Frame, str] = field(default_factory=dict)
    """Each frame's kind (``notebook``, ``project``, ``library``, ``stdlib``, ``peach``)."""
    replicas: list[str] = field(default_factory=list)
    mode: str = "wall"
    calls: dict[Frame, list[float]] = field(default_factory=dict)
    """The user's methods (their ``def`` line) → [calls, seconds in them], every replica's."""
    busy: int = 0
    """Samples that found a thread in the user's code (wall-clock)."""
    loops: float = 0.0
    """Seconds of samples taken at a loop's jump back and shared among its lines (an
    estimate: ``peach_cli.runtime.sampler._Loops``)."""
    leans: dict[Frame, float] = field(default_factory=dict)
    """Wall-clock seconds counted on a line where a thread was found in a call that lets go
    of the GIL while it had been running elsewhere (``Sampler._lean``)."""

    @classmethod
    def merge(cls, profiles: Iterable[dict[str, Any]], duration_s: float | None = None) -> Profile:
        merged = cls()
        longest = 0.0
        for profile in profiles:
            merged.samples += int(profile.get("samples", 0))
            longest = max(longest, float(profile.get("duration_s", 0.0)))
            merged.mode = str(profile.get("mode", merged.mode))
            merged.busy += int(profile.get("busy", 0))
            merged.loops += float(profile.get("loops", 0.0))
            if "replica" in profile:
                merged.replicas.append(str(profile["replica"]))
            for _kind, position, function, n, seconds in profile.get("calls", []):
                figures = merged.calls.setdefault((str(position), str(function)), [0, 0.0])
                figures[0] += int(n)
                figures[1] += float(seconds)
            table = [tuple(entry) for entry in profile.get("frames", [])]
            for leaf, seconds in profile.get("leans", []):
                _kind, position, function = table[leaf]
                frame = (str(position), str(function))
                merged.leans[frame] = merged.leans.get(frame, 0.0) + float(seconds)
            for indices, weight in profile.get("stacks", []):
                folded = merged._fold([table[i] for i in indices])
                if folded:
                    merged.stacks[folded] = merged.stacks.get(folded, 0.0) + float(weight)
        merged.duration_s = longest if duration_s is None else duration_s
        return merged

    def _fold(self, frames: Sequence[tuple[Any, ...]]) -> tuple[Frame, ...]:
        folded: list[Frame] = []
        in_peach = True  # a thread or a task starts in peach's code
        for kind, position, function in frames:
            in_peach = kind == "peach" or (kind == "stdlib" and in_peach)
            if in_peach:
                if not folded or folded[-1] != PEACH:
                    folded.append(PEACH)
                self.kinds[PEACH] = "peach"
                continue
            frame = (str(position), str(function))
            self.kinds.setdefault(frame, str(kind))
            folded.append(frame)
        return tuple(folded)

    @property
    def total_weight(self) -> float:
        return sum(self.stacks.values())

    def lean(self) -> tuple[float, Line | None]:
        """The share of the time counted on lines where a thread let go of the GIL after
        running elsewhere (wall-clock), and the line that took most of it."""
        whole = self.total_weight
        if not self.leans or whole <= 0:
            return 0.0, None
        (position, function), seconds = max(self.leans.items(), key=lambda item: item[1])
        share = min(1.0, sum(self.leans.values()) / whole)
        return share, Line(position, function, round(min(1.0, seconds / whole), 4))

    def hottest(self, by: Literal["self", "total"], limit: int | None = None) -> list[Line]:
        """The frames by the share of the time they were the innermost (``self``) or on
        the stack (``total``), the hottest first."""
        weights: dict[Frame, float] = {}
        for stack, weight in self.stacks.items():
            if by == "self":
                weights[stack[-1]] = weights.get(stack[-1], 0.0) + weight
            else:
                for frame in set(stack):
                    weights[frame] = weights.get(frame, 0.0) + weight
        whole = self.total_weight or 1.0
        ranked = sorted(weights.items(), key=lambda item: (-item[1], item[0]))
        lines = [Line(pos, fn, round(weight / whole, 4)) for (pos, fn), weight in ranked]
        return lines[:limit] if limit is not None else lines

    def to_json(self) -> dict[str, Any]:
        """SPEC §12's ``--format json``."""
        return {
            "samples": self.samples,
            "duration_s": round(self.duration_s, 3),
            "self": [line.to_json() for line in self.hottest("self")],
            "total": [line.to_json() for line in self.hottest("total")],
        }


def speedscope(profile: Profile, name: str) -> dict[str, Any]:
    """The profile as a speedscope file (its ``sampled`` profile type, weights in seconds):
    https://www.speedscope.app/file-format-schema.json."""
    frames: list[dict[str, Any]] = []
    index: dict[Frame, int] = {}
    samples = []
    weights = []
    for stack, weight in sorted(profile.stacks.items()):
        row = []
        for frame in stack:
            number = index.get(frame)
            if number is None:
                number = index[frame] = len(frames)
                frames.append(_speedscope_frame(frame))
            row.append(number)
        samples.append(row)
        weights.append(weight)
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": name,
                "unit": "seconds",
                "startValue": 0,
                "endValue": sum(weights),
                "samples": samples,
                "weights": weights,
            }
        ],
        "name": name,
        "activeProfileIndex": 0,
        "exporter": "peach profile",
    }


def _speedscope_frame(frame: Frame) -> dict[str, Any]:
    position, function = frame
    if frame == PEACH:
        return {"name": "peach"}
    file, _, line = position.rpartition(", line ")
    entry: dict[str, Any] = {"name": f"{function} ({position})", "file": file or position}
    if line.isdigit():
        entry["line"] = int(line)
    return entry


__all__ = ["PEACH", "Line", "Profile", "speedscope"]
