"""`peach init`: write a new project (``peach_cli.project.scaffold``) and say what to run next."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.project_options import InitOptions


def run_init(output: Output, options: InitOptions) -> int:
    """Create the project in ``folder``; return the exit code (errors raise ``PeachError``)."""
    folder, codops, streaming, force = (
        options.folder, options.codops, options.streaming, options.force
    )  # fmt: skip
    from peach_cli.project.scaffold import create_project
    from peach_cli.views import console

    created = create_project(folder, codops=codops, streaming=streaming, force=force)
    relative = os.path.relpath(folder.resolve(), Path.cwd().resolve())
    steps = [] if relative == "." else [f"cd {_shell_word(relative)}"]
    steps += ["peach validate", "peach dev"]
    steps += [endpoint.ask for endpoint in created.endpoints]
    console.print_created(output, created, steps)
    return 0


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(text)
