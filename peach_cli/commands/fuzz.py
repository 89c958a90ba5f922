"""`peach fuzz`: generated requests to every endpoint (or the named ones) of the project's
simulator, or of a URL; each finding shrunk to a minimal request (SPEC §11).

Exit codes: 0 nothing found, 1 something found, 2 the command line is wrong, the project
has errors, or Hypothesis (the ``fuzz`` extra) is not installed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.host_options import FuzzOptions

FORMATS = ("text", "json")
DEFAULT_EXAMPLES = 50
MISSING_EXTRA = "peach fuzz needs Hypothesis, which is not installed: pip install 'peach-cli[fuzz]'"


def require_hypothesis() -> None:
    """``UsageError`` (one line: what to install) when Hypothesis cannot be imported."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        raise UsageError(MISSING_EXTRA) from None


def split_arguments(arguments: Sequence[str]) -> tuple[Path, list[str]]:
    """PROJECT and TARGETS: a first argument that is an existing folder or file is the
    project (default: the current folder); the rest name endpoints (name or url)."""
    if arguments and Path(arguments[0]).exists():
        return Path(arguments[0]), list(arguments[1:])
    return Path("."), list(arguments)


def _check_options(options: FuzzOptions) -> None:
    if options.output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {options.output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    if options.examples < 1:
        raise UsageError(f"--examples must be 1 or more, not {options.examples}")
    if options.seed is not None and options.seed < 0:
        raise UsageError(f"--seed must be 0 or more, not {options.seed}")


def run_fuzz(output: Output, options: FuzzOptions) -> int:
    """Fuzz the selected endpoints; print the findings (or JSON). Returns the exit code."""
    _check_options(options)
    require_hypothesis()
    began = time.perf_counter()
    seed = random.randrange(2**32) if options.seed is None else options.seed
    words = [*([options.project] if options.project is not None else []), *(options.targets or [])]
    path, names = split_arguments(words)
    from peach_cli.client.items import base_url
    from peach_cli.fuzz.run import fuzz_host
    from peach_cli.fuzz.watch import Watch
    from peach_cli.testing.host import Host
    from peach_cli.views.fuzz import FuzzShown

    url = base_url(options.url)
    shown = FuzzShown(
        output,
        options.output_format,
        examples=options.examples,
        seed=seed,
        url=options.url,
        began=began,
    )
    watch = Watch() if url is None else None  # the simulator's events, run here
    on_event = watch.on_event if watch is not None else None
    with Host(
        path,
        url,
        doing="fuzzing",
        tool="fuzz",
        on_event=on_event,
        openapi=True,
        secrets=output.secrets,
    ) as host:
        explored = fuzz_host(
            host, names, examples=options.examples, seed=seed, watch=watch, shown=shown
        )
    return 1 if any(e.findings for e in explored) else 0
