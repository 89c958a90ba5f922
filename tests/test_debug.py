"""SPEC §7: ``breakpoint()`` in a method, init or task opens pdb in peach's terminal.

Every case is a real `peach dev` (or `peach task run`) whose standard input is a pty that
is its controlling terminal, as when started from a shell; its output goes to a file the
test reads. What the test types reaches pdb in the replica's (or task's) process through
peach; the requests are real HTTP on loopback.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import PEACH

from tests.conftest import REPO, URL_LINE, DevProcess, with_group_killed
from tests.lifetime_support import dies_with_this_process
from tests.projectkit import write_project

DEADLINE_S = 30.0
PROMPT = r"\(Pdb\) "

CONF = """codops: debugging
timeout_s: 1
endpoints:
  greet:
    url: /greet
    components:
      main: {notebook: notebooks/Greet.ipynb, method: greet}
      fallback: {notebook: notebooks/Greet.ipynb, method: fallback}
  later:
    url: /later
    components:
      main: {notebook: notebooks/Greet.ipynb, method: later}
  other:
    url: /other
    components:
      main: {notebook: notebooks/Greet.ipynb, method: other}
  crash:
    url: /crash
    components:
      main: {notebook: notebooks/Greet.ipynb, method: crash}
      fallback: {notebook: notebooks/Greet.ipynb, method: fallback}
tasks:
  report: {notebook: notebooks/Greet.ipynb, method: report, timeout_s: 3}
"""
CELLS = [
    ("markdown", "# Endpoints that stop in the debugger"),
    'def greet(name: str = "nobody"):\n'  # cell 2
    '    message = "hello " + name\n'
    "    breakpoint()\n"
    "    return message\n",
    "async def later(n: int = 0):\n"  # cell 3
    "    import pdb\n"
    "    pdb.set_trace()\n"
    "    return n + 1\n",
    'def fallback(name: str = ""):\n    return "from the fallback"\n',  # cell 4
    'def other():\n    return "other answers"\n',  # cell 5
    "def crash(name: str = ''):\n"  # cell 6
    "    words = name.split()\n"
    "    return words[5]\n",
    "def report(payload):\n"  # cell 7
    "    total = sum(payload)\n"
    "    breakpoint()\n"
    "    return total * 2\n",
]
INIT_CONF = """codops: initdebug
endpoints:
  model:
    url: /model
    components:
      main: {notebook: notebooks/Model.ipynb, init: load, method: predict}
"""
INIT_CELLS = [
    "def load():\n"  # cell 1
    "    weights = [1, 2, 3]\n"
    "    breakpoint()\n"
    "    return {'weights': weights}\n",
    "def predict(model, x: int = 1):\n"  # cell 2
    "    breakpoint()\n"
    "    return sum(model['weights']) * x\n",
]


def _take_terminal() -> None:
    """In the child, after ``setsid``: the pty becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A peach command on a pty: ``type`` a line, ``wait`` for output (in a file)."""

    def __init__(self, args: list[str], log_path: Path, *, tty: bool = True) -> None:
        self.primary, secondary = pty.openpty()
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                # a real process: `peach dev` on a pty, with pdb taking over its terminal
                [*PEACH, *args],
                stdin=secondary if tty else subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=dict(os.environ, NO_COLOR="1", COLUMNS="200", PYTHONUNBUFFERED="1"),
                start_new_session=True,
                preexec_fn=dies_with_this_process(then=_take_terminal if tty else None),
            )
        os.close(secondary)
        self.dev = DevProcess(self.process, log_path)

    def type(self, line: str) -> None:
        os.write(self.primary, line.encode() + b"\n")

    def wait(self, pattern: str, timeout_s: float = DEADLINE_S) -> re.Match[str]:
        return self.dev.wait_for_output(pattern, timeout_s)

    def command(self, line: str, pattern: str) -> str:
        """Type a pdb command; the output up to the next prompt (which must match)."""
        self.dev.mark()
        self.type(line)
        match = self.wait(rf"(?s)({pattern}.*?){PROMPT}")
        return match.group(1)

    def serve(self) -> str:
        self.dev.url = self.wait(URL_LINE.pattern).group(1)
        return self.dev.url

    def close(self) -> None:
        with_group_killed(self.process)
        self.process.wait(timeout=DEADLINE_S)
        os.close(self.primary)


class Request:
    """An HTTP request in a thread of its own (it waits while its call is in pdb)."""

    def __init__(self, url: str) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self.thread.start()

    def _run(self, url: str) -> None:
        try:
            self.response = httpx.get(url, timeout=DEADLINE_S)
        except BaseException as error:  # noqa: BLE001 - reported by ``answer``
            self.error = error

    def answer(self) -> dict[str, Any]:
        self.thread.join(DEADLINE_S)
        assert self.response is not None, f"no answer: {self.error}"
        return {"component": self.response.headers.get("x-peach-component"), **self.response.json()}


def _project(root: Path, conf: str, notebook: str, cells: list) -> Path:
    return write_project(root, conf, {f"notebooks/{notebook}": cells})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _project(tmp_path_factory.mktemp("debugging"), CONF, "Greet.ipynb", CELLS)


@pytest.fixture(scope="module")
def terminal(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Terminal]:
    """`peach dev --pdb` of the project on a terminal, shared by the module's tests."""
    log = tmp_path_factory.mktemp("debug-log") / "dev.log"
    args = ["dev", str(project), "--port", "0", "--no-reload", "--shared-env", "--pdb"]
    term = Terminal(args, log)
    try:
        term.serve()
        term.dev.wait_ready()
        term.dev.mark()
        yield term
    finally:
        term.close()


def test_a_breakpoint_in_a_method_stops_the_request_in_pdb(terminal: Terminal) -> None:
    request = Request(f"{terminal.dev.url}/greet?name=Ada")
    banner = terminal.wait(rf"breakpoint: (.*)\n(?s:.*?){PROMPT}").group(1)
    assert banner == "greet/main#1 · GET /greet?name=Ada · notebooks/Greet.ipynb, cell 2, line 4"
    assert "> notebooks/Greet.ipynb, cell 2, line 4, in greet()" in terminal.dev.output()
    assert "'Ada'" in terminal.command("p name", "'Ada'")
    listing = terminal.command("ll", "def greet")
    assert "breakpoint()" in listing and "->\t    return message" in listing
    assert '"source"' not in listing  # the cell's code, not the notebook's JSON
    where = terminal.command("where", "notebooks/Greet.ipynb")
    assert "threading.py" not in where and "peach_cli" not in where
    terminal.type("c")
    assert request.answer() == {"component": "main", "result": "hello Ada", "status": "ok"}
    terminal.wait(r"debugger: greet/main#1 continues")


def test_the_timeout_waits_and_other_endpoints_answer_while_stopped(terminal: Terminal) -> None:
    """timeout_s is 1 s: the call stays stopped past it, and still answers from main."""
    stopped_at = time.monotonic()
    request = Request(f"{terminal.dev.url}/greet?name=Bo")
    terminal.wait(rf"breakpoint: greet/main#1 · GET /greet\?name=Bo(?s:.*?){PROMPT}")
    other = httpx.get(f"{terminal.dev.url}/other", timeout=DEADLINE_S)
    assert other.json() == {"result": "other answers", "status": "ok"}
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() - stopped_at < 3.0:  # stopped for 3 s, 3 times its timeout
        assert time.monotonic() < deadline
        assert request.thread.is_alive()  # no timeout, no fallback answered meanwhile
        time.sleep(0.05)
    terminal.type("c")
    assert request.answer() == {"component": "main", "result": "hello Bo", "status": "ok"}


def test_a_second_breakpoint_waits_its_turn(terminal: Terminal) -> None:
    first = Request(f"{terminal.dev.url}/greet?name=One")
    terminal.wait(rf"breakpoint: greet/main#1 · GET /greet\?name=One(?s:.*?){PROMPT}")
    second = Request(f"{terminal.dev.url}/later?n=41")
    terminal.wait(r"another breakpoint waits: later/main#1 · GET /later\?n=41 .*\(1 waiting")
    assert "'One'" in terminal.command("p name", "'One'")
    terminal.type("c")
    assert first.answer()["result"] == "hello One"
    terminal.wait(
        rf"breakpoint: later/main#1 · GET /later\?n=41 · notebooks/Greet.ipynb, cell 3(?s:.*?){PROMPT}"
    )
    assert "41" in terminal.command("p n", "41")  # an async method, pdb.set_trace()
    terminal.type("c")
    assert second.answer() == {"component": "main", "result": 42, "status": "ok"}


def test_pdb_opens_post_mortem_then_the_fallback_answers(terminal: Terminal) -> None:
    request = Request(f"{terminal.dev.url}/crash?name=a+b")
    banner = terminal.wait(rf"post-mortem: (.*)\n  (.*)\n(?s:.*?){PROMPT}")
    assert (
        banner.group(1)
        == "crash/main#1 · GET /crash?name=a+b · notebooks/Greet.ipynb, cell 6, line 3"
    )
    assert banner.group(2) == "IndexError: list index out of range"
    assert "['a', 'b']" in terminal.command("p words", r"\['a', 'b'\]")
    terminal.type("c")
    assert request.answer() == {
        "component": "fallback",
        "result": "from the fallback",
        "status": "ok",
    }
    terminal.wait(r"File notebooks/Greet.ipynb, cell 6, line 3, in crash")  # the usual log


@pytest.mark.serial  # its task's timeout_s is 3 s, start-up included (5 times that start-up)
def test_a_breakpoint_in_a_task_stops_peach_task_run(project: Path, tmp_path: Path) -> None:
    args = ["task", "run", "report", str(project), "--shared-env", "--payload", "[1, 2, 3]"]
    term = Terminal(args, tmp_path / "task.log")
    try:
        banner = term.wait(rf"breakpoint: (.*)\n(?s:.*?){PROMPT}").group(1)
        stopped_at = time.monotonic()
        assert banner == "task report · notebooks/Greet.ipynb, cell 7, line 4"
        assert "6" in term.command("p total", "6")
        assert "return total * 2" in term.command("ll", "def report")
        while time.monotonic() - stopped_at < 3.5:  # past its timeout_s of 3 s: not killed
            assert term.process.poll() is None and "timed out" not in term.dev.output()
            time.sleep(0.05)
        term.type("c")
        term.wait(r"task report run report#1 ok in .* returned 12")
        assert term.process.wait(timeout=DEADLINE_S) == 0
    finally:
        term.close()


@pytest.mark.slow
def test_a_breakpoint_in_init_then_ctrl_c_stops_cleanly(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", INIT_CONF, "Model.ipynb", INIT_CELLS)
    args = ["dev", str(project), "--port", "0", "--no-reload", "--shared-env"]
    term = Terminal(args, tmp_path / "dev.log")
    try:
        url = term.serve()
        banner = term.wait(rf"breakpoint: (.*)\n(?s:.*?){PROMPT}").group(1)
        assert banner == "model/main#1 · init · notebooks/Model.ipynb, cell 1, line 4"
        assert "[1, 2, 3]" in term.command("p weights", r"\[1, 2, 3\]")
        assert "def load" in term.command("ll", "def load")
        term.type("c")
        term.dev.wait_ready()
        request = Request(f"{url}/model?x=2")
        term.wait(rf"breakpoint: model/main#1 · GET /model\?x=2(?s:.*?){PROMPT}")
        term.type("c")
        assert request.answer() == {"component": "main", "result": 12, "status": "ok"}
        Request(f"{url}/model?x=3")
        term.wait(rf"GET /model\?x=3(?s:.*?){PROMPT}")
        os.write(term.primary, b"\x03")  # Ctrl-C while pdb holds the terminal
        assert term.process.wait(timeout=DEADLINE_S) == 0
        assert "model/main#1 stopped" in term.dev.output()
    finally:
        term.close()


@pytest.mark.slow
def test_without_a_terminal_breakpoints_are_skipped(project: Path, tmp_path: Path) -> None:
    args = ["dev", str(project), "--port", "0", "--no-reload", "--shared-env"]
    term = Terminal(args, tmp_path / "dev.log", tty=False)
    try:
        url = term.serve()
        term.dev.wait_ready()
        for name in ("Ada", "Bo"):
            answer = httpx.get(f"{url}/greet?name={name}", timeout=DEADLINE_S)
            assert answer.json() == {"result": f"hello {name}", "status": "ok"}
            assert answer.headers["x-peach-component"] == "main"
        line = (
            r"greet/main#1 \| peach: greet/main#1: breakpoint\(\) at notebooks/Greet.ipynb, "
            r"cell 2, line 3 skipped \(standard input is not a terminal\)"
        )
        term.wait(line)
        assert len(re.findall(line, term.dev.output())) == 1
        assert "(Pdb)" not in term.dev.output()
    finally:
        term.close()


@pytest.mark.slow
def test_the_skip_line_comes_once_per_component(tmp_path: Path) -> None:
    """Two replicas each skip the breakpoint of their init: one line says so."""
    conf = INIT_CONF.replace("method: predict}", "method: predict, replicas: 2}")
    project = _project(tmp_path / "p", conf, "Model.ipynb", INIT_CELLS)
    args = ["dev", str(project), "--port", "0", "--no-reload", "--shared-env"]
    term = Terminal(args, tmp_path / "dev.log", tty=False)
    try:
        url = term.serve()
        health = term.dev.wait_ready()
        assert [r["state"] for c in health["components"] for r in c["replicas"]] == ["healthy"] * 2
        answer = httpx.get(f"{url}/model?x=2", timeout=DEADLINE_S)
        assert answer.json() == {"result": 12, "status": "ok"}
        line = (
            r"peach: model/main#\d: breakpoint\(\) at notebooks/Model.ipynb, cell 1, line 3 skipped"
        )
        term.wait(line)
        term.dev.stop()
        assert len(re.findall(line, term.dev.output())) == 1, term.dev.output()
    finally:
        term.close()


@pytest.mark.serial  # its task's timeout_s is 3 s, start-up included (5 times that start-up)
def test_no_debug_skips_breakpoints_in_a_task_on_a_terminal(project: Path, tmp_path: Path) -> None:
    args = ["task", "run", "report", str(project), "--shared-env", "--payload", "[1]", "--no-debug"]
    term = Terminal(args, tmp_path / "task.log")
    try:
        assert term.process.wait(timeout=DEADLINE_S) == 0
        output = term.dev.output()
        assert (
            "breakpoint() at notebooks/Greet.ipynb, cell 7, line 3 skipped (--no-debug)" in output
        )
        assert "returned 2" in output and "(Pdb)" not in output
    finally:
        term.close()


class Screen:
    """`peach dev` with a pty as its terminal (input and output), ``columns`` wide: what a
    terminal shows, rendered by a terminal emulator (pyte) from everything peach wrote."""

    ROWS = 30

    def __init__(self, args: list[str], columns: int) -> None:
        import pyte

        self.primary, secondary = pty.openpty()
        size = struct.pack("HHHH", self.ROWS, columns, 0, 0)
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, size)
        self.screen = pyte.HistoryScreen(columns, self.ROWS, history=1000)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        self.changed = threading.Condition()
        env = dict(os.environ, NO_COLOR="1", COLUMNS=str(columns), LINES=str(self.ROWS))
        self.process = subprocess.Popen(
            # a real process: what a terminal of ROWS lines shows of it
            [*PEACH, *args],
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            cwd=REPO,
            env=dict(env, PYTHONUNBUFFERED="1", TERM="xterm"),
            start_new_session=True,
            preexec_fn=dies_with_this_process(then=_take_terminal),
        )
        os.close(secondary)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.primary, 65536)
            except OSError:  # the terminal closed
                data = b""
            with self.changed:
                if data:
                    self.raw += data
                    self.stream.feed(data)
                self.changed.notify_all()
            if not data:
                return

    def text(self) -> str:
        """Everything written so far, control sequences left out (to wait on)."""
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", self.raw.decode(errors="replace"))

    def wait(self, pattern: str, after: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in ``text()`` from offset ``after``."""
        deadline = time.monotonic() + DEADLINE_S
        with self.changed:
            while True:
                match = re.compile(pattern).search(self.text(), after)
                if match is not None:
                    return match
                left = deadline - time.monotonic()
                assert left > 0 and self.reader.is_alive(), (pattern, self.text()[after:])
                self.changed.wait(left)

    def type(self, line: str) -> None:
        os.write(self.primary, line.encode() + b"\n")

    def lines(self) -> list[str]:
        """The lines shown: the scrollback, then the screen (trailing blanks dropped)."""
        with self.changed:
            columns = self.screen.columns
            rows = [*self.screen.history.top, *(self.screen.buffer[y] for y in range(self.ROWS))]
            shown = ["".join(row[x].data for x in range(columns)).rstrip() for row in rows]
        while shown and not shown[-1]:
            shown.pop()
        return shown

    def close(self) -> None:
        with_group_killed(self.process)
        self.process.wait(timeout=DEADLINE_S)
        self.reader.join(DEADLINE_S)
        os.close(self.primary)


def _inspect_then_continue(screen: Screen, url: str, who: str) -> list[str]:
    """Stop at ``url``, print ``name``, continue; the lines shown once the view is back."""
    start = len(screen.text())
    request = Request(url)
    screen.wait(rf"(?s){who} · GET .*{PROMPT}", start)
    screen.type("p name")
    screen.wait(rf"p name\n'Ada'\n{PROMPT}", start)
    screen.type("c")
    assert request.answer()["result"] in ("hello Ada", "from the fallback")
    continued = screen.wait(rf"debugger: {who} continues", start).end()
    logged = screen.wait(r"GET /\w+ 200", continued).end()
    screen.wait(r"healthy", logged)  # the live table, drawn again after the request's line
    return screen.lines()


@pytest.mark.parametrize("columns", [80, 100])
def test_the_pdb_transcript_stays_on_screen_when_the_view_comes_back(
    project: Path, columns: int
) -> None:
    """The live view (a pty is peach's terminal) pauses for pdb and comes back below what
    pdb printed, drawing over none of it: after a breakpoint and after a post-mortem."""
    args = ["dev", str(project), "--port", "0", "--no-reload", "--shared-env", "--pdb"]
    screen = Screen(args, columns)
    try:
        url = screen.wait(URL_LINE.pattern).group(1)
        screen.wait(r"replicas healthy")
        for kind, path, who in (
            ("breakpoint", "greet", "greet/main#1"),
            ("post-mortem", "crash", "crash/main#1"),
        ):
            lines = _inspect_then_continue(screen, f"{url}/{path}?name=Ada", who)
            shown = "\n".join(lines)
            transcript = ["(Pdb) p name", "'Ada'", "(Pdb) c", f"debugger: {who} continues"]
            assert transcript[-1] in lines, shown
            at = lines.index(transcript[-1])
            assert lines[at - 3 : at + 1] == transcript, shown
            assert any(line.startswith(f"{kind}: {who} · GET") for line in lines[:at]), shown
            assert any("healthy" in line for line in lines[at + 1 :]), shown  # the view, below
    finally:
        screen.close()


def test_a_crash_the_fallback_answered_counts_for_main_in_the_live_table(project: Path) -> None:
    """--pdb: main raised (a post-mortem), the fallback answered; both served the request."""
    args = ["dev", str(project), "--port", "0", "--no-reload", "--shared-env", "--pdb"]
    screen = Screen(args, 100)
    try:
        url = screen.wait(URL_LINE.pattern).group(1)
        screen.wait(r"replicas healthy")
        start = len(screen.text())
        _inspect_then_continue(screen, f"{url}/crash?name=Ada", "crash/main#1")
        screen.wait(r"crash /crash\n.*\nmain .*\nfallback +#1 +healthy +1 ", start)
        lines = screen.lines()
        table = lines[max(n for n, line in enumerate(lines) if line == "crash /crash") :]
        rows = {line.split()[0]: line.split() for line in table[2:4]}
        assert rows["main"][:4] == ["main", "#1", "healthy", "1"], "\n".join(lines)
        assert rows["fallback"][:4] == ["fallback", "#1", "healthy", "1"], "\n".join(lines)
    finally:
        screen.close()


LATER_CELL_CELLS = [
    "def load():\n"  # cell 1: six lines before the method's cell
    "    weights = [1, 2, 3]\n"
    "    total = sum(weights)\n"
    "    scale = total / 3\n"
    "    return {'weights': weights, 'scale': scale}\n"
    "\n",
    "def predict(model, x: int = 1):\n"  # cell 2
    "    weights = model['weights']\n"
    "    doubled = [w * x for w in weights]\n"
    "    breakpoint()\n"
    "    return sum(doubled)\n",
]


def test_list_ll_and_where_number_lines_by_the_cell_as_the_banner(tmp_path: Path) -> None:
    """The method's cell comes after the init's: pdb's listings count from the cell's first
    line (``cell 2, line 5`` is line 5 with the arrow), not from the joined module's."""
    project = _project(tmp_path / "p", INIT_CONF, "Model.ipynb", LATER_CELL_CELLS)
    args = ["dev", str(project), "--port", "0", "--no-reload", "--shared-env"]
    term = Terminal(args, tmp_path / "dev.log")
    try:
        url = term.serve()
        term.dev.wait_ready()
        term.dev.mark()  # what follows is searched from here on
        request = Request(f"{url}/model?x=2")
        banner = term.wait(rf"breakpoint: (.*)\n(?s:.*?){PROMPT}").group(1)
        assert banner == "model/main#1 · GET /model?x=2 · notebooks/Model.ipynb, cell 2, line 5"
        rows = [
            "  1  \tdef predict(model, x: int = 1):",
            "  2  \t    weights = model['weights']",
            "  3  \t    doubled = [w * x for w in weights]",
            "  4  \t    breakpoint()",
            "  5  ->\t    return sum(doubled)",
        ]
        assert term.command("ll", "  1 ").splitlines() == rows
        where = term.command("where", "> notebooks/Model.ipynb")
        assert where.startswith("> notebooks/Model.ipynb, cell 2, line 5, in predict()"), where
        assert term.command("list", "  1 ").splitlines() == [*rows, "[EOF]"]
        assert term.command("list 2,3", "  2 ").splitlines() == rows[1:3]
        assert term.command("list 1", r"\[cell 1\]").splitlines() == [  # cell 1's end too
            "[cell 1]",
            "  3  \t    total = sum(weights)",
            "  4  \t    scale = total / 3",
            "  5  \t    return {'weights': weights, 'scale': scale}",
            "  6  \t",
            "[cell 2]",
            *rows,
        ]
        term.type("c")
        assert request.answer() == {"component": "main", "result": 12, "status": "ok"}
    finally:
        term.close()
