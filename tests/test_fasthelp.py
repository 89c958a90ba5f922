"""`peach --help` does not import markdown-it or pygments, and nothing else notices."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from peach_cli.cli import main
sys.argv = ["peach", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
heavy = [m for m in ("markdown_it", "pygments", "rich.markdown", "rich.traceback") if m in sys.modules]
print("HEAVY", heavy, file=sys.stderr)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=60
    )


def test_help_and_usage_errors_skip_markdown_and_pygments():
    for args in (["--help"], ["validate", "--help"], ["validate", "--bogus"]):
        result = run(*args)
        assert "HEAVY []" in result.stderr, (args, result.stderr)
    assert "Usage" in run("--help").stdout


def test_the_stand_ins_build_the_real_classes():
    code = """
import sys
from peach_cli.commands import fasthelp
fasthelp.install()
import typer.rich_utils as r
assert "rich.markdown" not in sys.modules
import rich.markdown, rich.traceback
assert type(r.Markdown("# x")) is rich.markdown.Markdown
try:
    raise ValueError("x")
except ValueError as e:
    assert type(r.Traceback.from_exception(type(e), e, e.__traceback__)) is rich.traceback.Traceback
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "ok", result.stderr
