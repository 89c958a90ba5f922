"""Every command's `--help` reads as the golden file says: a change to the CLI's
declarations that changes any help shows up here as a diff.

``tests/data/cli_help.txt`` was generated from the CLI as it was while every option was
still written three times (in ``cli.py``'s signatures, in the command functions and in the
options objects), before the shared options were declared once: that restructuring, and
any later one, must not change a word, a default or a metavar of any `--help`. The file is
the CLI reference of the docs (``scripts/docs_reference.py``, 100 columns, no colour).
When help changes on purpose, write the file again and review its diff in the commit::

    PYTHONPATH=. python tests/test_help_golden.py
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from test_docs import load_reference

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "cli_help.txt"


def rendered() -> str:
    """Every command's `--help`, groups first, as the golden file holds them."""
    return load_reference().cli_reference() + "\n"


def test_every_help_is_the_golden_one():
    now, golden = rendered(), GOLDEN.read_text()
    diff = "".join(
        difflib.unified_diff(
            golden.splitlines(keepends=True),
            now.splitlines(keepends=True),
            fromfile="tests/data/cli_help.txt",
            tofile="peach ... --help now",
        )
    )
    assert not diff, f"`--help` changed (on purpose? see this module's docstring):\n{diff}"


if __name__ == "__main__":
    GOLDEN.write_text(rendered())
    print(f"wrote {GOLDEN.relative_to(ROOT)}", file=sys.stderr)
