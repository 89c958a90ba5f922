"""Command-line words reach the commands as the values their options declare, without
pydantic: typer 0.29 built a pydantic adapter for each parameter of the command run, about
0.12 s of CPU on every command (``peach_cli/commands/coercion.py``). A word that is no
number is refused naming it, as click always did."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from peach_cli.cli import app

STOP_AT_THE_COMMAND = """
import json, os, sys
from pathlib import Path
import peach_cli.commands.{module} as module

def first_line(*args, **kwargs):
    args = tuple(a for a in args if type(a).__name__ != "Output")  # the run's, no word
    if len(args) == 1 and hasattr(args[0], "_fields"):  # a command's options, whole
        args, kwargs = (), vars(args[0])
    def shown(value):
        if isinstance(value, (list, tuple)):
            return [shown(v) for v in value]
        return [type(value).__name__, str(value)] if value is not None else None
    print(json.dumps({{
        "args": [shown(a) for a in args],
        "kwargs": {{k: shown(v) for k, v in kwargs.items()}},
        "loaded": [m for m in ("pydantic", "typer._adapters") if m in sys.modules],
    }}))
    os._exit(0)

module.{function} = first_line
sys.argv = ["peach", *sys.argv[1:]]
from peach_cli.cli import main
main()
"""


def arguments_of(module: str, function: str, *words: str) -> dict:
    """What ``peach WORDS`` hands to ``peach_cli.commands.MODULE.FUNCTION``, and which of
    pydantic and typer's adapters were imported by then."""
    code = STOP_AT_THE_COMMAND.format(module=module, function=function)
    done = subprocess.run(
        [sys.executable, "-c", code, *words], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_values_reach_the_command_typed_and_pydantic_is_not_imported():
    seen = arguments_of(
        "logs", "run_logs", "logs", "shop", "--tail", "25", "-d", "hello.main", "--follow"
    )
    assert seen["kwargs"] == {
        "app_name": ["str", "shop"],
        "address": None,
        "deployment": ["str", "hello.main"],
        "tail": ["int", "25"],
        "follow": ["bool", "True"],
    }
    assert seen["loaded"] == []


def test_lists_paths_and_floats_are_converted_item_by_item():
    seen = arguments_of(
        "test", "run_test", "test", "proj", "a.peach-test.yaml", "b.peach-test.yaml",
        "--timeout", "2.5",
    )  # fmt: skip
    assert seen["kwargs"]["paths"] == [["PosixPath", "proj"], ["PosixPath", "a.peach-test.yaml"],
                                       ["PosixPath", "b.peach-test.yaml"]]  # fmt: skip
    assert seen["kwargs"]["timeout_s"] == ["float", "2.5"]
    seen = arguments_of("ask", "run_ask", "ask", "/x", "-H", "A:1", "-H", "B:2")
    assert seen["kwargs"]["headers"] == [["str", "A:1"], ["str", "B:2"]]
    assert seen["loaded"] == []


def test_a_word_that_is_no_number_is_refused_naming_it():
    runner = CliRunner()
    for words, message in (
        (["dev", "--port", "80a"], "Invalid value for '--port': '80a' is not a valid integer."),
        (["env", "prune", "--days", "soon"], "'soon' is not a valid number."),
        (["logs", "--tail", "1.5"], "'1.5' is not a valid integer."),
    ):
        result = runner.invoke(app, words, env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert result.exit_code == 2, (words, result.output)
        assert message in result.output, (words, result.output)
