"""Shell completion from the project in the current folder: endpoint urls and task names.

A completer runs on every <TAB>, so it only reads: the conf files with PyYAML (no model, no
validation), and, for ``decorator_endpoints``, the notebooks' code cells with ``ast``. A
project that is broken or missing completes nothing rather than failing.

Typer attaches them with ``autocompletion=``::

    target: Annotated[str, typer.Argument(autocompletion=complete_target)]
    name: Annotated[str, typer.Argument(autocompletion=complete_task)]

Bash splits the words it completes at the characters of ``COMP_WORDBREAKS``, ``:`` among
them: for ``peach ask http://`` the word under the cursor is ``//``, and bash replaces only
what follows the last ``:``. peach's bash script (``BASH_SCRIPT``, what
``--install-completion`` installs) also passes the line up to the cursor (``COMP_LINE``) and
``COMP_WORDBREAKS``; the completer takes the whole word from the line and answers with the
part bash replaces, as bash-completion's ``_get_comp_words_by_ref -n :`` and
``__ltrim_colon_completions`` do.

zsh keeps ``http://127.0.0.1:8000/`` one word. ``--install-completion`` writes peach's zsh
script (``ZSH_SCRIPT``) to ``~/.zfunc/_peach``, which compinit autoloads on the first <TAB>:
Typer's script then only registered its function, so that <TAB> completed nothing; peach's
completes on it too, and still registers when sourced. ``answer_fast`` answers both shells.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_DEV_URL = "http://127.0.0.1:8000"
URL_ENV = "PEACH_URL"
_MAX_FILE_BYTES = 4 * 1024 * 1024

BASH_SCRIPT = """
%(complete_func)s() {
    local IFS=$'\\n'
    COMPREPLY=( $( env COMP_WORDS="${COMP_WORDS[*]}" \\
                   COMP_CWORD=$COMP_CWORD \\
                   COMP_LINE="${COMP_LINE:0:COMP_POINT}" \\
                   COMP_WORDBREAKS="$COMP_WORDBREAKS" \\
                   %(autocomplete_var)s=complete_bash $1 ) )
    return 0
}

complete -o default -F %(complete_func)s %(prog_name)s
"""
"""Typer's bash script, passing also the line up to the cursor (``COMP_LINE``) and the
characters bash splits words at (``COMP_WORDBREAKS``)."""


ZSH_SCRIPT = """
#compdef %(prog_name)s

%(complete_func)s() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" %(autocomplete_var)s=complete_zsh %(prog_name)s)
}

compdef %(complete_func)s %(prog_name)s
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  %(complete_func)s "$@"
fi
"""
"""Typer's zsh script, which also completes when compinit autoloads it from ``fpath``
(``~/.zfunc/_peach``, where ``--install-completion`` puts it): the file is then the body of
``_peach``, run on a <TAB>, and Typer's only defined a function and registered it for the
next <TAB>. Sourced, it registers, as Typer's does (Click's zsh script does the same)."""


def install_scripts() -> None:
    """Make ``--install-completion`` and ``--show-completion`` write ``BASH_SCRIPT`` for
    bash and ``ZSH_SCRIPT`` for zsh (Typer keeps its scripts in a dict;
    ``tests/test_completion.py`` checks both in a real shell)."""
    from typer import _completion_shared

    _completion_shared._completion_scripts["bash"] = BASH_SCRIPT
    _completion_shared._completion_scripts["zsh"] = ZSH_SCRIPT


def conf_files(folder: Path) -> list[Path]:
    """The conf files of the project folder ``folder``, in merge order, found as the loader
    finds them (``peach_cli.project.filenames``; the loader is not imported: a <TAB> would
    pay for its imports)."""
    from peach_cli.project import filenames

    try:
        return filenames.conf_files(folder)
    except OSError:
        return []


def read_confs(folder: Path) -> list[dict[str, Any]]:
    """The top-level mapping of each conf file of the project at ``folder`` (unreadable
    files and files that are not a mapping are left out)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    confs = []
    for path in conf_files(folder):
        try:
            if path.stat().st_size > _MAX_FILE_BYTES:
                continue
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError):
            continue
        if isinstance(data, dict):
            confs.append(data)
    return confs


def endpoint_urls(folder: Path) -> list[tuple[str, str]]:
    """``(url, endpoint name)`` of every endpoint of the project, in conf order."""
    found: dict[str, str] = {}
    for conf in read_confs(folder):
        endpoints = conf.get("endpoints")
        if isinstance(endpoints, dict):
            for name, endpoint in endpoints.items():
                url = endpoint.get("url") if isinstance(endpoint, dict) else None
                if isinstance(url, str) and url.startswith("/"):
                    found.setdefault(url, str(name))
        notebooks = conf.get("decorator_endpoints")
        if isinstance(notebooks, list):
            for notebook in notebooks:
                if isinstance(notebook, str):
                    for url, name in decorated_urls(folder / notebook):
                        found.setdefault(url, name)
    return list(found.items())


def decorated_urls(path: Path) -> list[tuple[str, str]]:
    """``(url, function name)`` of each ``@endpoint("/url", ...)`` in a notebook."""
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            return []
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return []
    found = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source")
        text = "".join(source) if isinstance(source, list) else source
        if not isinstance(text, str) or "endpoint" not in text:
            continue
        lines = ["pass" if line.lstrip()[:1] in ("%", "!") else line for line in text.split("\n")]
        try:
            tree = ast.parse("\n".join(lines))
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                url = _decorator_url(node)
                if url is not None:
                    found.append((url, node.name))
    return found


def _decorator_url(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in function.decorator_list:
        if not isinstance(decorator, ast.Call):
            continue
        callee = decorator.func
        name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", None)
        if name != "endpoint":
            continue
        candidates = decorator.args[:1] + [k.value for k in decorator.keywords if k.arg == "url"]
        for candidate in candidates:
            if isinstance(candidate, ast.Constant) and isinstance(candidate.value, str):
                return candidate.value
    return None


def task_names(folder: Path) -> list[tuple[str, str]]:
    """``(task name, notebook:method)`` of every task of the project."""
    found: dict[str, str] = {}
    for conf in read_confs(folder):
        tasks = conf.get("tasks")
        if isinstance(tasks, dict):
            for name, task in tasks.items():
                where = ""
                if isinstance(task, dict):
                    where = f"{task.get('notebook', '?')}:{task.get('method', '?')}"
                found.setdefault(str(name), where)
    return list(found.items())


def complete_target(incomplete: str) -> list[tuple[str, str]]:
    """`peach ask` TARGET: the project's urls (``/greet``), or full URLs on ``PEACH_URL``."""
    urls = endpoint_urls(Path.cwd())
    if incomplete and not incomplete.startswith("/"):  # a full URL
        base = (os.environ.get(URL_ENV) or DEFAULT_DEV_URL).rstrip("/")
        full = [(f"{base}{url}", name) for url, name in urls]
        return [(url, name) for url, name in full if url.startswith(incomplete)]
    return [(url, name) for url, name in urls if url.startswith(incomplete)]


def complete_task(incomplete: str) -> list[tuple[str, str]]:
    """A task NAME (for `peach task run`): the project's tasks."""
    return [(name, where) for name, where in task_names(Path.cwd()) if name.startswith(incomplete)]


def answer_fast() -> None:
    """Answer a <TAB> on `peach ask TARGET` or `peach task run NAME` and exit, before Typer
    is imported (Typer would import pydantic and build every command to get there); anything
    else returns, and Typer's own completion answers.

    The shell protocols are Typer's: ``_PEACH_COMPLETE=complete_bash`` with the words in
    ``COMP_WORDS`` and the cursor's word in ``COMP_CWORD``, answered one completion a line;
    ``_PEACH_COMPLETE=complete_zsh`` with the line up to the cursor in
    ``_TYPER_COMPLETE_ARGS``, answered with the ``_arguments`` call zsh evaluates
    (``zsh_answer``).
    """
    shell = os.environ.get("_PEACH_COMPLETE")
    if shell == "complete_bash":
        request = bash_request()
    elif shell == "complete_zsh":  # zsh replaces the whole word
        words = words_of_line(os.environ.get("_TYPER_COMPLETE_ARGS"))
        request = None if words is None else (words[1:-1], words[-1], 0)
    else:
        return
    if request is None:
        return
    args, incomplete, kept = request
    if incomplete.startswith("-"):
        return
    if args == ["ask"]:
        found = complete_target(incomplete)
    elif args == ["task", "run"]:
        found = complete_task(incomplete)
    else:
        return
    from peach_cli.boundary import Output, shown

    output = Output()  # a completion learns no secret: an output of its own
    if shell == "complete_zsh":
        output.write_report(zsh_answer(found), channel="terminal")
    else:  # bash replaces what follows the word's last break: `//` of `http://`
        output.write_report(
            "\n".join(shown(value[kept:]) for value, _ in found), channel="terminal"
        )
    sys.exit(0)


def bash_request() -> tuple[list[str], str, int] | None:
    """The words before the cursor's (without ``peach``), the cursor's word, and how many of
    its characters bash keeps (up to its last word break), from bash's variables."""
    import shlex

    try:
        words = shlex.split(os.environ["COMP_WORDS"])
        cword = int(os.environ["COMP_CWORD"])
    except (KeyError, ValueError):
        return None
    args, incomplete = words[1:cword], words[cword] if cword < len(words) else ""
    kept = 0
    whole = words_of_line(os.environ.get("COMP_LINE"))
    if whole is not None:  # the words as typed, not split at ':'
        args, incomplete = whole[1:-1], whole[-1]
        breaks = os.environ.get("COMP_WORDBREAKS", "")
        kept = max((incomplete.rfind(c) + 1 for c in breaks if not c.isspace()), default=0)
    return args, incomplete, kept


def zsh_answer(found: list[tuple[str, str]]) -> str:
    """What Typer's zsh completion prints for ``(value, help)`` pairs
    (``ZshComplete.complete``; ``tests/test_completion.py`` compares the two): an
    ``_arguments`` call listing them, ``:`` and the shell's quotes escaped, or ``_files``
    when there are none.

    >>> print(zsh_answer([("http://127.0.0.1:8000/greet", "greet")]), end="")
    _arguments '*: :(("http\\\\://127.0.0.1\\\\:8000/greet":"greet"))'
    """
    from peach_cli.boundary import shown

    def escape(text: str) -> str:
        for character, escaped in _ZSH_ESCAPES:
            text = text.replace(character, escaped)
        return text

    items = [
        f'"{escape(shown(value))}":"{escape(shown(about))}"'
        if about
        else f'"{escape(shown(value))}"'
        for value, about in found
    ]
    return ("_arguments '*: :((" + "\n".join(items) + "))'" if items else "_files") + "\n"


_ZSH_ESCAPES = (('"', '""'), ("'", "''"), ("$", "\\$"), ("`", "\\`"), (":", "\\\\:"))
"""Typer's ``ZshComplete.format_completion`` escapes, in its order."""


def words_of_line(line: str | None) -> list[str] | None:
    """The words of a command line up to the cursor, as the shell will pass them, the last
    one the word under the cursor (``""`` after a space); None when it cannot be split.

    >>> words_of_line("peach ask http://127.0.0.1:8000/g")
    ['peach', 'ask', 'http://127.0.0.1:8000/g']
    >>> words_of_line("peach task run ")
    ['peach', 'task', 'run', '']
    """
    if line is None:
        return None
    import shlex

    try:
        words = shlex.split(line)
    except ValueError:  # an open quote
        return None
    if not line or line[-1].isspace():
        words.append("")
    return words if len(words) >= 2 else None
