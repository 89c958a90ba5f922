"""Shell completion as a shell asks for it: endpoint urls for `peach ask`, task names.

A shell runs ``peach`` with ``_PEACH_COMPLETE`` set (what ``peach --install-completion``
installs) and reads the candidates from stdout; these tests do the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import run_peach
from projectkit import write_project

from peach_cli.commands import completion

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
AS_PEACH = "import sys; sys.argv[0] = 'peach'; from peach_cli.cli import main; main()"


def complete(
    words: str,
    cwd: Path,
    shell: str = "bash",
    env: dict[str, str] | None = None,
    code: str = AS_PEACH,
) -> subprocess.CompletedProcess[str]:
    """What the shell gets for ``words`` (the command line up to the cursor) from ``peach``
    (``code``)."""
    environment = {**os.environ, "_PEACH_COMPLETE": f"complete_{shell}"}
    environment.pop("PEACH_URL", None)
    environment.update(env or {})
    if shell == "bash":
        environment.update(COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1))
    else:
        environment.update(_TYPER_COMPLETE_ARGS=words)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=60,
    )


def new_project(tmp_path: Path) -> Path:
    created = run_peach("init", "shop", "--streaming", cwd=tmp_path)
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


def test_zsh_gets_from_the_fast_completer_what_typer_would_answer(tmp_path):
    """`answer_fast` writes Typer's zsh answer itself (Typer is not imported): the same
    bytes as Typer's own completion, found with `answer_fast` switched off."""
    project = new_project(tmp_path)
    as_typer = (
        "import peach_cli.commands.completion as c; c.answer_fast = lambda: None; " + AS_PEACH
    )
    codes = (AS_PEACH, as_typer)
    for words in ("peach ask http://", "peach ask /", "peach ask /nothing", "peach task run "):
        answers = [complete(words, project, "zsh", code=code).stdout for code in codes]
        assert answers[0] == answers[1], words
    tasks = Path(__file__).resolve().parent / "projects" / "tasks"  # `notebook:method` beside
    answers = [complete("peach task run ", tasks, "zsh", code=code).stdout for code in codes]
    assert answers[0] == answers[1] and "\\\\:" in answers[0]
    assert complete("peach ask http://", project, shell="zsh").stdout == (
        """_arguments '*: :(("http\\\\://127.0.0.1\\\\:8000/greet":"greet"\n"""
        """"http\\\\://127.0.0.1\\\\:8000/story":"story"))'\n"""
    )


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
    environment = {k: v for k, v in os.environ.items() if k != "PEACH_URL"}
    bash = {"_PEACH_COMPLETE": "complete_bash"}
    zsh = {"_PEACH_COMPLETE": "complete_zsh"}
    cases = [
        ({**bash, "COMP_WORDS": "peach ask /", "COMP_CWORD": "2"}, "/greet\n/story"),
        ({**bash, "COMP_WORDS": "peach task run ", "COMP_CWORD": "3"}, ""),
        ({**zsh, "_TYPER_COMPLETE_ARGS": "peach ask /"}, "/greet"),
        ({**zsh, "_TYPER_COMPLETE_ARGS": "peach task run "}, "_files"),
    ]
    for variables, expected in cases:
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", AS_PEACH],
            capture_output=True,
            text=True,
            cwd=project,
            env={**environment, **variables},
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert expected in result.stdout
        imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
        assert not {"typer", "click", "pydantic", "peach_cli.project.loader"} & imported
    # an option still goes through Typer's own completion
    assert "--format" in complete("peach validate --fo", project).stdout


class Shell:
    """An interactive shell (``argv``) on a pty, with ``peach`` on its PATH as pip installs it
    and ``home`` as its HOME; what it shows is rendered by a terminal emulator (pyte)."""

    def __init__(self, argv: list[str], cwd: Path, home: Path) -> None:
        import pty

        import pyte

        bin_folder = home / "bin"
        bin_folder.mkdir()
        peach = bin_folder / "peach"  # the console script, as pip would write it
        peach.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{AS_PEACH}" "$@"\n')
        peach.chmod(0o755)
        self.primary, secondary = pty.openpty()
        self.screen = pyte.Screen(100, 24)
        self.stream = pyte.ByteStream(self.screen)
        env = {k: v for k, v in os.environ.items() if k != "PEACH_URL"}
        env.update(PATH=f"{bin_folder}:{env['PATH']}", HOME=str(home), PS1="$ ", TERM="xterm")
        env.update(INPUTRC="/dev/null", COLUMNS="100", LINES="24")
        self.process = subprocess.Popen(
            argv,
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        os.close(secondary)

    def type(self, text: str) -> None:
        os.write(self.primary, text.encode())

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def wait_for(self, line: str, timeout_s: float = 60.0) -> None:
        """Until ``line`` is a line of the screen (a guard against a hang, not a pause)."""
        import select

        deadline = time.monotonic() + timeout_s
        while line not in self.lines():
            left = deadline - time.monotonic()
            assert left > 0, "\n".join(self.lines())
            ready, _, _ = select.select([self.primary], [], [], min(left, 0.5))
            if ready:
                self.stream.feed(os.read(self.primary, 65536))

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        os.close(self.primary)


def bash(cwd: Path, home: Path) -> Shell:
    """A bash with peach's completion from `peach --show-completion bash`, as
    `--install-completion` installs it."""
    shell = Shell(["bash", "--norc", "--noprofile", "-i"], cwd, home)
    script = home / "peach-completion.bash"
    shell.type(f"peach --show-completion bash > {script} && . {script} && complete -p peach\n")
    shell.wait_for("complete -o default -F _peach_completion peach")
    shell.wait_for("$")  # the next prompt: readline reads what is typed from now on
    return shell


def zsh(cwd: Path, home: Path) -> Shell:
    """A zsh without rc files where `peach --install-completion` installs completion (the
    script in ~/.zfunc/_peach, compinit in ~/.zshrc), then reads ~/.zshrc as a new terminal
    would: compinit autoloads the script on the first <TAB>."""
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (.ci/run installs it)")
    shell = Shell(["zsh", "-f", "-i"], cwd, home)
    shell.type("peach --install-completion && . ~/.zshrc && echo for:$_comps[peach]\n")
    shell.wait_for("for:_peach")  # compinit found ~/.zfunc/_peach for peach
    shell.wait_for("$")
    return shell


def test_bash_completes_a_full_url_after_http_colon(tmp_path):
    """`:` is in COMP_WORDBREAKS: bash splits `http://` into `http`, `:` and `//`; the
    completion still completes the URL (docs/start.md), in a real bash."""
    project = new_project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    shell = bash(project, home)
    try:
        shell.type("peach ask http://\t")
        shell.wait_for("$ peach ask http://127.0.0.1:8000/")
        shell.type("\t\t")  # ambiguous: a second <TAB> lists what follows the last `:`
        shell.wait_for("8000/greet  8000/story")
        shell.type("s\t")
        shell.wait_for("$ peach ask http://127.0.0.1:8000/story")
    finally:
        shell.close()


def test_zsh_completes_a_full_url_from_the_first_tab(tmp_path):
    """In a real zsh with the script `--install-completion` installs, the first <TAB> of a
    new terminal completes (Typer's script only registered itself on it), and the URL stays
    one word (docs/start.md)."""
    project = new_project(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    shell = zsh(project, home)
    try:
        shell.type("peach ask http://\t")
        shell.wait_for("$ peach ask http://127.0.0.1:8000/")
        shell.type("\t")  # ambiguous: the next <TAB> lists the URLs with their endpoints
        shell.wait_for("http://127.0.0.1:8000/greet  -- greet")
        shell.wait_for("http://127.0.0.1:8000/story  -- story")
        shell.type("s\t")
        shell.wait_for("$ peach ask http://127.0.0.1:8000/story")
    finally:
        shell.close()
