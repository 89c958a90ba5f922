"""What peach prints for users holds only their code and plain words: no frame of peach's
own runtime in their tracebacks, plurals right, no metavar placeholders in `--help`."""

from __future__ import annotations

import re

import pytest
from cli_support import run_peach
from projectkit import write_project

TRIGGERING = """\
codops: shop
tasks:
  poke: {notebook: t.ipynb, method: poke}
  retrain: {notebook: t.ipynb, method: retrain}
"""
TRIGGER_CELLS = [
    "from pipe_algorithms_lib.task_helpers import trigger_task_with_event\n\n"
    "def poke():\n    return trigger_task_with_event('retrian', {})\n",
    "def retrain(payload=None):\n    return 1\n",
]


@pytest.mark.slow
def test_a_users_traceback_has_no_frame_of_peachs_runtime(tmp_path):
    write_project(tmp_path, TRIGGERING, {"t.ipynb": TRIGGER_CELLS})
    result = run_peach("task", "run", "poke", str(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "poke | ValueError: unknown task 'retrian'" in result.stderr
    assert "File t.ipynb, cell 1, line 4, in poke" in result.stderr
    assert "triggers.py" not in result.stderr
    assert "peach_cli" not in result.stderr


@pytest.mark.parametrize(
    ("frames", "framing", "shown"),
    [(1, "sse", "1 event"), (2, "sse", "2 events"), (1, "jsonl", "1 line")],
)
def test_the_stream_summary_counts_in_words(capsys, frames, framing, shown):
    import time

    from peach_cli.boundary import Output
    from peach_cli.client import framing as kinds
    from peach_cli.client.send import StreamStats
    from peach_cli.views import ask

    now = time.perf_counter()
    stats = StreamStats(started=now, first_chunk=now, last_chunk=now, ended=now, chunks=1, bytes=9)
    kind = kinds.SSE if framing == "sse" else kinds.JSON_LINES
    ask._summary(Output(), stats, frames, kind, "done", ["200 OK"])
    summary = capsys.readouterr().err
    assert f" · {shown} · " in summary, summary
    assert "1 chunk · " in summary


def every_command() -> list[list[str]]:
    import typer

    from peach_cli.cli import app

    found: list[list[str]] = []

    def walk(command, path):
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


@pytest.mark.slow
@pytest.mark.parametrize("path", every_command(), ids=lambda p: " ".join(p) or "peach")
def test_help_shows_what_to_type_not_python_types(path):
    result = run_peach(*path, "--help", columns=100)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert not re.search(r"<(bool|str|int|float|path|list\[[a-z]+\])>", text), text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage
    if path == ["ask"]:
        assert usage.strip().endswith("ask [OPTIONS] TARGET [ITEMS]...")
        assert re.search(r"--stream\s+-s\s+Ask for a stream", text)  # nothing beside a flag


@pytest.mark.slow
@pytest.mark.parametrize("streaming", [False, True])
def test_the_docs_describe_the_commands_peach_inits_readme_lists(tmp_path, streaming):
    from cli_support import REPO

    result = run_peach("init", str(tmp_path), *(["--streaming"] if streaming else []))
    assert result.returncode == 0, result.stderr
    readme = (tmp_path / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].split()[:2] for line in block.splitlines() if line.strip()]
    row = next(
        line
        for line in (REPO / "docs" / "start.md").read_text().splitlines()
        if line.startswith("| `README.md` |")
    )
    assert not re.search(r"\b(one|two|three|four|five)\b", row), row  # no count to go stale
    for command in commands:
        assert f"`{' '.join(command)}`" in row, (command, row)
    assert [c[1] for c in commands[:2]] == ["validate", "dev"]
    assert {c[1] for c in commands[2:]} == {"ask", "test"} and len(commands) > 3
