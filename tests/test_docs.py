"""The documentation cannot drift: its examples run, its references are the tool's own.

Every ``console`` block of ``docs/`` (a ``$ command`` line and the output under it) is run,
page by page in the order the page shows them, and what it prints must be what the page shows.
How a block runs (docs/contributing.md says the same for writers):

- in a fresh copy of ``examples/`` and ``tests/projects/`` (paths as in the repository), under
  a pseudo-terminal 100 columns wide without colour, stdout and stderr together, as a user
  at a terminal sees them; ``$ cd DIR`` changes the folder of the page's next commands;
- ``<!-- test: serve=PATH -->`` just above a block starts ``peach dev PATH --shared-env`` (once per page,
  on a free port) and points ``PEACH_URL`` at it, so ``peach ask`` talks to it;
- ``<!-- test: startup -->`` marks a command that keeps running (``peach dev``): it is run
  with ``--port 0``, piped, until it has printed as many lines as shown (30 s at most), then
  interrupted; its lines may come in any order after the first. ``<!-- test: startup keep -->``
  leaves it running as the page's server (as ``serve`` would start it).

Placeholders, in what a page shows:

- ``…`` matches any text within a line (ids, pids, sizes, versions);
- a time (a number followed by ``ms`` or ``s``) matches any time;
- ports and paths: the test's server address is shown as ``127.0.0.1:8000``, the env cache
  as ``~/.cache/peach/envs`` and the copy of the repository as ``~/work``.

Python blocks compile (``<!-- test: run -->`` above one runs it), YAML blocks parse, and
`mkdocs build --strict` builds the site.
"""

from __future__ import annotations

import ast
import fcntl
import importlib.util
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import PEACH, run_peach
from lifetime_support import dies_with_this_process
from projectkit import ASSISTANT_MODEL_DIR

from peach_cli.project.diagnostics import CODES, MEANINGS
from peach_cli.runtime.contract.errors import ERROR_STATUS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
COLUMNS = 100
COMMAND_DEADLINE_S = 30.0

FENCE = re.compile(
    r"^(?P<marker><!-- test: (?P<options>[^>]*) -->\n)?```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TIME = re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        options: dict[str, str] = {}
        for item in (match.group("options") or "").split():
            key, _, value = item.partition("=")
            options[key] = value
        line = text.count("\n", 0, match.start("lang")) + 1
        found.append(Block(page, line, match.group("lang"), match.group("body"), options))
    return found


def commands_of(block: Block) -> list[tuple[str, list[str]]]:
    """The block's ``$ command`` lines, each with the output lines shown under it."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.body.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise AssertionError(f"{block.where}: a console block starts with `$ command`")
    return steps


def shape(line: str) -> str:
    return TIME.sub("N s", line.rstrip())


def line_matches(shown: str, got: str) -> bool:
    parts = [re.escape(part) for part in shape(shown).split("…")]
    return re.fullmatch(".*?".join(parts), shape(got)) is not None


def compare(where: str, command: str, shown: list[str], got: list[str], unordered=False) -> None:
    if unordered and len(shown) == len(got) and shown:
        rest = list(got[1:])
        matched = line_matches(shown[0], got[0])
        for line in shown[1:]:
            hit = next((other for other in rest if line_matches(line, other)), None)
            if hit is None:
                matched = False
                break
            rest.remove(hit)
        if matched:
            return
    elif len(shown) == len(got) and all(map(line_matches, shown, got)):
        return
    raise AssertionError(
        f"{where}: `$ {command}` printed something else than the page shows.\n"
        "--- the page shows\n" + "\n".join(shown) + "\n--- it printed\n" + "\n".join(got)
    )


class Page:
    """One page's runs: its copy of the repository, its folder, its dev server."""

    def __init__(self, tmp: Path) -> None:
        self.work = tmp / "work"
        for part in ("examples", "tests/projects"):
            shutil.copytree(ROOT / part, self.work / part, symlinks=True)
        # the assistant's model folder (ASSISTANT_MODEL_DIR): the page's own, at version 1
        conf = self.work / "examples" / "assistant" / "peach.yaml"
        model = f"ASSISTANT_MODEL_DIR: {self.work / 'assistant-model'}"
        conf.write_text(conf.read_text().replace(ASSISTANT_MODEL_DIR, model))
        self.cwd = self.work
        # short, so that tables are as wide as with the ~/.cache/peach/envs they are shown with
        self.cache = Path(tempfile.mkdtemp(prefix="p", dir="/tmp")) / "e"
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        shim = bin_dir / "peach"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m peach_cli.cli "$@"\n')
        shim.chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "PEACH_ENV_CACHE": str(self.cache),
            "COLUMNS": str(COLUMNS),
            "NO_COLOR": "1",
            "TERM": "dumb",  # no live progress: what stays on the screen
            "LINES": "40",
        }
        self.env.pop("PEACH_URL", None)
        self.env.pop("PEACH_RAY_ADDRESS", None)
        self.server: subprocess.Popen[Any] | None = None
        self.address = ""

    def serve(self, project: str) -> None:
        if self.server is not None:
            return
        self.server = subprocess.Popen(
            [
                # a real process: a `peach dev` server the tutorial's commands talk to
                *PEACH,
                "dev",
                project,
                "--port",
                "0",
                "--no-reload",
                "--shared-env",
            ],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=dies_with_this_process(),
        )
        assert self.server.stdout is not None
        deadline = time.monotonic() + COMMAND_DEADLINE_S
        lines = []
        while time.monotonic() < deadline:
            line = self.server.stdout.readline()
            if not line:
                break
            lines.append(line)
            if found := re.search(r"serving on (http://[\d.]+:\d+)", line):
                self.address = found.group(1)
            if re.search(r"\d+/\d+ replicas healthy", line):
                break
        assert self.address, "peach dev did not start:\n" + "".join(lines)
        self.env["PEACH_URL"] = self.address
        os.set_blocking(self.server.stdout.fileno(), False)  # its log is not read any more

    def close(self) -> None:
        shutil.rmtree(self.cache.parent, ignore_errors=True)
        if self.server is not None:
            os.killpg(self.server.pid, signal.SIGINT)
            try:
                self.server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait()

    def normalise(self, text: str) -> list[str]:
        text = ESCAPES.sub("", text.replace("\r\n", "\n"))
        if self.address:
            text = text.replace(self.address.removeprefix("http://"), "127.0.0.1:8000")
        text = text.replace(str(self.cache), "~/.cache/peach/envs")
        text = text.replace(str(self.work), "~/work")
        lines = [line.rstrip() for line in text.split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def run_in_terminal(self, command: str) -> str:
        controller, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
        process = subprocess.Popen(
            ["bash", "-c", command],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
        )
        os.close(terminal)
        output = b""
        deadline = time.monotonic() + COMMAND_DEADLINE_S
        try:
            while True:
                ready, _, _ = select.select([controller], [], [], deadline - time.monotonic())
                if not ready:
                    raise AssertionError(
                        f"`$ {command}` still running after {COMMAND_DEADLINE_S} s"
                    )
                try:
                    data = os.read(controller, 65536)
                except OSError:  # the terminal closed: every writer exited
                    break
                if not data:
                    break
                output += data
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            os.close(controller)
        return output.decode(errors="replace")

    def run_until(self, command: str, lines_wanted: int, keep: bool = False) -> str:
        """A command that keeps running: its first lines, then Ctrl-C (with ``keep``, it
        stays up as the page's server)."""
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command} --port 0"],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_this_process(),
        )
        assert process.stdout is not None
        lines: list[bytes] = []
        deadline = time.monotonic() + COMMAND_DEADLINE_S
        try:
            while len(lines) < lines_wanted and time.monotonic() < deadline:
                line = process.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if not self.address and (found := re.search(rb"on (http://[\d.]+:\d+)", line)):
                    self.address = found.group(1).decode()
        finally:
            if keep and self.address and process.poll() is None:
                self.server = process
                self.env["PEACH_URL"] = self.address
                os.set_blocking(process.stdout.fileno(), False)  # its log is not read any more
            else:
                os.killpg(process.pid, signal.SIGINT)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                process.stdout.close()
        text = b"".join(lines).decode(errors="replace")
        if self.server is not process:
            self.address = ""  # the next server's port is its own
        return text

    def run(self, block: Block) -> None:
        if "serve" in block.options:
            self.serve(block.options["serve"])
        for command, shown in commands_of(block):
            if command.startswith("cd "):
                self.cwd = (self.cwd / command[3:].strip()).resolve()
                assert not shown, f"{block.where}: `cd` prints nothing"
                continue
            if "startup" in block.options:
                keep = "keep" in block.options and self.server is None
                got = self.normalise(self.run_until(command, len(shown), keep))
                if self.server is None:
                    got = [re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:8000", line) for line in got]
                compare(block.where, command, shown, got, unordered=True)
            else:
                got = self.normalise(self.run_in_terminal(command))
                compare(block.where, command, shown, got)


def pages_with(lang: str) -> list[Path]:
    return [page for page in PAGES if any(block.lang == lang for block in blocks(page))]


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_with("console"), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_console_block_prints_what_the_page_shows(page, tmp_path):
    runs = Page(tmp_path)
    try:
        for block in blocks(page):
            if block.lang == "console":
                runs.run(block)
    finally:
        runs.close()


def test_a_page_whose_block_no_longer_matches_fails(tmp_path):
    """docs/validate.md's first block with its summary line changed by hand: it fails."""
    (block, *_) = [block for block in blocks(DOCS / "validate.md") if block.lang == "console"]
    changed = block.body.replace("✗ 3 errors in", "✗ 2 errors in")
    assert changed != block.body
    runs = Page(tmp_path)
    runs.run(block)  # as the page shows it: passes
    with pytest.raises(AssertionError, match="printed something else than the page shows"):
        runs.run(Block(block.page, block.line, block.lang, changed))


def test_the_placeholders_match_what_they_stand_for_and_nothing_else():
    assert line_matches("3/3 replicas healthy in 0.86 s", "3/3 replicas healthy in 1.2 s")
    assert line_matches("200 OK · 4 ms · replica …#1", "200 OK · 12 ms · replica answer/main#1")
    assert not line_matches("3/3 replicas healthy in 0.86 s", "2/3 replicas healthy in 0.86 s")
    assert not line_matches("healthy (pid …)", "unhealthy (pid 12)")


@pytest.mark.parametrize("page", pages_with("python"), ids=lambda p: str(p.relative_to(DOCS)))
def test_python_blocks_compile_and_marked_ones_run(page):
    for block in blocks(page):
        if block.lang != "python":
            continue
        try:
            ast.parse(block.body, filename=block.where)
        except SyntaxError as error:
            raise AssertionError(f"{block.where}: {error}") from error
        if "run" in block.options:  # <!-- test: run -->: a self-contained example, run as is
            ran = subprocess.run(
                [sys.executable, "-c", block.body], capture_output=True, text=True, timeout=90
            )
            assert ran.returncode == 0, f"{block.where}:\n{ran.stderr}"


@pytest.mark.parametrize("page", pages_with("yaml"), ids=lambda p: str(p.relative_to(DOCS)))
def test_yaml_blocks_parse(page):
    for block in blocks(page):
        if block.lang == "yaml":
            try:
                yaml.safe_load(block.body)
            except yaml.YAMLError as error:
                raise AssertionError(f"{block.where}: {error}") from error


def load_reference():
    spec = importlib.util.spec_from_file_location(
        "docs_reference", ROOT / "scripts" / "docs_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("path", [["peach"], ["peach", "dev"], ["peach", "task", "run"]])
def test_the_cli_reference_is_what_help_prints(path):
    reference = load_reference()
    command = dict((tuple(p), c) for p, c in reference.commands())[tuple(path)]
    printed = run_peach(*path[1:], "--help", columns=reference.HELP_COLUMNS, env={"TERM": "dumb"})
    assert printed.returncode == 0, printed.stderr
    assert reference.help_text(path, command) == reference.tidy(printed.stdout)


@pytest.mark.slow
def test_the_cli_reference_covers_every_command():
    reference = load_reference()
    text = reference.cli_reference()
    for path, _ in reference.commands():
        assert f"## `{' '.join(path)}`" in text


def test_the_codes_reference_documents_every_code_with_its_severity():
    rows = re.findall(r"^\| `(PC\d{3})` \| (\w+) \| (.+) \|$", load_reference().codes_table(), re.M)
    assert {code: severity for code, severity, _ in rows} == {
        code: severity for code, (severity, _) in CODES.items()
    }
    assert set(MEANINGS) == set(CODES), "every code says what it means (diagnostics.MEANINGS)"


def test_the_troubleshooting_page_says_what_to_do_for_every_error_code():
    page = (DOCS / "troubleshooting.md").read_text()
    documented = set(re.findall(r"^### `(\w+)`", page, re.M))
    assert set(ERROR_STATUS) <= documented


@pytest.mark.slow
def test_the_conf_reference_names_every_key_of_the_schema():
    from peach_cli.project.conf import json_schema

    text = load_reference().conf_reference()
    schema = json_schema()
    printed = run_peach("schema")
    assert json.loads(printed.stdout) == schema, (
        "the reference is built from what `peach schema` prints"
    )
    for definition in [schema, *schema["$defs"].values()]:
        for key in definition.get("properties", {}):
            assert f"| `{key}` |" in text


@pytest.mark.slow
def test_the_site_builds_with_strict_checks(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    # read offline, nothing from the network: no font, script, style or image from elsewhere
    external = []
    asset = re.compile(
        r"<(?:script|img|iframe|source|link)\b[^>]*\b(?:src|href)=[\"']((?:https?:)?//[^\"']+)"
        r"|url\(\s*[\"']?((?:https?:)?//[^)\"']+)|@import\s+[\"']((?:https?:)?//[^\"']+)"
    )
    for path in (tmp_path / "site").rglob("*"):
        if path.suffix in (".html", ".css", ".js"):
            for match in asset.finditer(path.read_text(errors="replace")):
                external.append((path.name, next(group for group in match.groups() if group)))
    assert external == [], external[:5]
    page = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "stylesheets/extra.css" in page  # the wider grid: 100-column help boxes fit


def test_the_docs_extra_builds_the_site_without_ray():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {re.split(r"[<>=\[]", r)[0] for r in extras["docs"]} == {"mkdocs", "mkdocs-material"}
    assert "peach-cli[docs]" in extras["test"]
    assert "site/" in (ROOT / ".gitignore").read_text().splitlines()


def nav_pages(nav) -> list[str]:
    pages: list[str] = []
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_readme_is_one_screen_of_commands_and_the_site_navigation():
    readme = (ROOT / "README.md").read_text()
    lines = readme.split("\n")
    assert len(lines) <= 200
    assert any(line == "## Two commands" for line in lines[:25]), "the first screen has them"
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    linked = re.findall(r"\]\(docs/([\w/.-]+\.md)\)", readme)
    assert set(nav_pages(config["nav"])) == set(linked), "README's navigation is the site's"
    assert sorted(str(p.relative_to(DOCS)) for p in PAGES) == sorted(set(linked))


def test_the_readmes_first_command_installs_what_every_tour_command_needs():
    """After the README's first command, every `peach` command of its tour runs: an extra a
    command asks for when missing (`pip install 'peach-cli[fuzz]'`) is one that command
    installs. (`ray start` has its own line saying which extra it needs.)"""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    first = next(line for line in blocks[0].splitlines() if "pip install" in line)
    installed = re.search(r"pip install -e '?\.(?:\[([\w,]+)\])?'?", first)
    assert installed is not None, first
    extras = set((installed.group(1) or "").split(",")) - {""}
    tour = readme.split("## A tour", 1)[1]
    tour_block = re.search(r"```bash\n(.*?)```", tour, re.S)
    assert tour_block is not None
    commands = {
        line.split()[1]
        for line in tour_block.group(1).splitlines()
        if line.startswith("peach ") and "--url" not in line
    }
    assert {"fuzz", "profile", "test", "openapi"} <= commands
    for command in sorted(commands):
        module = ROOT / "peach_cli" / "commands" / f"{command}.py"
        source = module.read_text() if module.exists() else ""
        needed = set(re.findall(r"peach-cli\[(\w+)\]", source))
        assert needed <= extras, f"`peach {command}` needs {needed}; README installs {extras}"


def test_the_junit_docs_show_what_peach_writes_and_jenkins_schema_takes():
    """docs/testing.md shows a real `--format junit` sample; it validates against Jenkins'
    `junit-10.xsd` (no `file`/`line` on a `<testcase>`: SPEC §8), the suite names its file
    and a failure's message starts with the case's `file:line`."""
    from lxml import etree

    text = (DOCS / "testing.md").read_text()
    samples = re.findall(r"```xml\n(.*?)```", text, re.S)
    assert samples, "docs/testing.md shows a --format junit sample"
    schema = etree.XMLSchema(etree.parse(str(ROOT / "tests" / "data" / "junit-10.xsd")))
    for sample in samples:
        document = etree.fromstring(sample.encode())
        assert schema.validate(document), schema.error_log
        for suite in document.iter("testsuite"):
            assert suite.get("file") == suite.get("name")
            for failure in suite.iter("failure"):
                assert failure.get("message", "").startswith(suite.get("file") + ":")
    assert "with `file` and\n`line` attributes" not in text


def test_the_readmes_bench_sample_shows_every_latency_figure_bench_prints():
    from peach_cli.bench.summary import PERCENTILES

    readme = (ROOT / "README.md").read_text()
    sample = re.search(r"```text\n\$ peach bench .*?```", readme, re.S)
    assert sample is not None
    (latency,) = [
        line for line in sample.group(0).splitlines() if line.strip().startswith("latency")
    ]
    shown = re.findall(r"(p[\d.]+|max) [\d.,]+ ms", latency)
    assert shown == [name for name, _ in PERCENTILES] + ["max"], latency
