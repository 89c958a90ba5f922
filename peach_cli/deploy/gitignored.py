"""What git ignores among a project's files, when the project is inside a git repository.

``.gitignore`` files in the project are read by ``uploads`` itself; this adds what only git
knows: a parent folder's ``.gitignore`` up to the repository's root, ``.git/info/exclude``
and ``core.excludesFile``. It asks ``git check-ignore`` (one process for every path).
Where git is not installed, the parent folders' ``.gitignore`` files up to the folder
holding ``.git`` and ``.git/info/exclude`` are matched with ``pathspec`` instead (no
``core.excludesFile``: that needs git's config). Outside a repository, nothing more is
ignored.
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
        if not wanted:
            return set()
        git = shutil.which("git")
        if git is None:
            return self._without_git(wanted)
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

    def _without_git(self, paths: list[str]) -> set[str]:
        """What the parent folders' ``.gitignore`` and ``.git/info/exclude`` ignore."""
        import pathspec

        root = self.root.resolve()
        repository = next((p for p in (root, *root.parents) if (p / ".git").exists()), None)
        if repository is None:
            return set()
        rules: list[tuple[Path, pathspec.GitIgnoreSpec]] = []
        sources = [(repository, repository / ".git" / "info" / "exclude")]
        folder = root.parent
        while folder.is_relative_to(repository):  # the project's own are read by uploads
            sources.append((folder, folder / ".gitignore"))
            if folder == repository:
                break
            folder = folder.parent
        for base, path in sources:
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            rules.append((base, pathspec.GitIgnoreSpec.from_lines(lines)))
        rules.sort(key=lambda rule: len(rule[0].parts))  # deeper folders decide last
        ignored = set()
        for relative in paths:
            decision = False
            for base, spec in rules:
                parts = (root / relative).relative_to(base).parts
                for end in range(1, len(parts) + 1):  # a folder ignored ignores what it holds
                    inner = "/".join(parts[:end]) + ("/" if end < len(parts) else "")
                    verdict = spec.check_file(inner).include
                    if verdict is not None and (end == len(parts) or verdict):
                        decision = verdict
            if decision:
                ignored.add(relative)
        return ignored
