"""What git ignores among a project's files, when the project is inside a git repository.

``.gitignore`` files in the project are read by ``uploads`` itself; this adds what only git
knows: a parent folder's ``.gitignore`` up to the repository's root, ``.git/info/exclude``
and ``core.excludesFile``. It asks ``git check-ignore`` (one process for every path). Where
git is not installed or the project is not in a repository, nothing more is ignored.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

GIT_TIMEOUT_S = 30


class GitIgnored:
    """``GitIgnored(root).of(paths)``: the project-relative ``paths`` git ignores."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def of(self, paths: Iterable[str]) -> set[str]:
        wanted = list(paths)
        git = shutil.which("git")
        if not wanted or git is None:
            return set()
        try:
            done = subprocess.run(
                [git, "-C", str(self.root), "check-ignore", "--no-index", "-z", "--stdin"],
                input=b"".join(p.encode() + b"\0" for p in wanted),
                capture_output=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return set()
        # 0: some are ignored, 1: none is, 128: not a repository (or git failed)
        if done.returncode != 0:
            return set()
        return {p.decode(errors="surrogateescape") for p in done.stdout.split(b"\0") if p}
