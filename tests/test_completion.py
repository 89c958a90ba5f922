"""Shell completion as a shell asks for it: endpoint urls for `peach ask`, task names.

A shell runs ``peach`` with ``_PEACH_COMPLETE`` set (what ``peach --install-completion``
installs) and reads the candidates from stdout; these tests do the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from projectkit import write_project

from peach_cli.commands import completion

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
AS_PEACH = "import sys; sys.argv[0] = 'peach'; from peach_cli.cli import main; main()"


def complete(
    words: str, cwd: Path, shell: str = "bash", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """What the shell gets for ``words`` (the command line up to the cursor)."""
    environment = {**os.environ, "_PEACH_COMPLETE": f"complete_{shell}"}
    environment.pop("PEACH_URL", None)
    environment.update(env or {})
    if shell == "bash":
        environment.update(COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1))
    else:
        environment.update(_TYPER_COMPLETE_ARGS=words)
    return subprocess.run(
        [sys.executable, "-c", AS_PEACH],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=60,
    )


def new_project(tmp_path: Path) -> Path:
    created = subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", "init", "shop", "--streaming"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    return tmp_path / "shop"


@pytest.mark.slow
def test_ask_completes_the_urls_of_the_project_here(tmp_path):
    project = new_project(tmp_path)
    result = complete("peach ask /", project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["/greet", "/story"]
    assert complete("peach ask /s", project).stdout.split() == ["/story"]
    assert complete("peach ask /nothing", project).stdout.split() == []


@pytest.mark.slow
def test_zsh_shows_the_endpoint_name_beside_its_url(tmp_path):
    result = complete("peach ask /g", new_project(tmp_path), shell="zsh")
    assert result.returncode == 0, result.stderr
    assert '"/greet":"greet"' in result.stdout


@pytest.mark.slow
def test_a_full_url_completes_on_peach_url(tmp_path):
    project = new_project(tmp_path)
    result = complete("peach ask http://", project, env={"PEACH_URL": "http://10.0.0.5:9000/"})
    assert result.stdout.split() == ["http://10.0.0.5:9000/greet", "http://10.0.0.5:9000/story"]
    default = complete("peach ask http://127.0.0.1:8000/g", project)
    assert default.stdout.split() == ["http://127.0.0.1:8000/greet"]


def test_decorator_endpoints_are_completed_from_their_notebook():
    assert complete("peach ask /", EXAMPLES / "decorated").stdout.split() == ["/related", "/spell"]


def test_a_broken_or_missing_project_completes_nothing(tmp_path):
    assert complete("peach ask /", tmp_path).stdout.split() == []
    write_project(tmp_path, "codops: x\nendpoints: [\n")
    result = complete("peach ask /", tmp_path)
    assert result.returncode == 0 and result.stdout.split() == [] and result.stderr == ""


def test_task_names_complete_from_the_conf(monkeypatch):
    monkeypatch.chdir(EXAMPLES / "assistant")
    assert completion.complete_task("") == [("retrain", "notebooks/Tasks.ipynb:retrain")]
    assert completion.complete_task("x") == []


def test_peach_task_run_completes_the_task_names_of_the_project_here():
    tasks = Path(__file__).resolve().parent / "projects" / "tasks"
    assert complete("peach task run ", tasks).stdout.split() == [
        "record",
        "greet",
        "fail",
        "hang",
        "chain",
    ]
    assert complete("peach task run gr", tasks).stdout.split() == ["greet"]


@pytest.mark.slow
def test_the_completers_import_no_model_and_no_network_code(tmp_path):
    project = new_project(tmp_path)
    code = (
        "import sys\n"
        "from peach_cli.commands.completion import complete_target, complete_task\n"
        "assert complete_target('/') == [('/greet', 'greet'), ('/story', 'story')]\n"
        "complete_task('')\n"
        "heavy = ('pydantic', 'httpx', 'ray', 'uvicorn', 'rich.console', 'peach_cli.project.conf')\n"
        "print([name for name in heavy if name in sys.modules])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=project, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.slow
def test_a_tab_on_ask_and_task_run_is_answered_before_typer_is_imported(tmp_path):
    project = new_project(tmp_path)
    environment = {**os.environ, "_PEACH_COMPLETE": "complete_bash"}
    environment.pop("PEACH_URL", None)
    cases = [("peach ask /", "2", ["/greet", "/story"]), ("peach task run ", "3", [])]
    for words, cword, expected in cases:
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", AS_PEACH],
            capture_output=True,
            text=True,
            cwd=project,
            env={**environment, "COMP_WORDS": words, "COMP_CWORD": cword},
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == expected
        imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
        assert not {"typer", "click", "pydantic", "peach_cli.project.loader"} & imported
    # an option still goes through Typer's own completion
    assert "--format" in complete("peach validate --fo", project).stdout
