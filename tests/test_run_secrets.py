"""A run's secrets are its own (SPEC §6 "One output boundary", issue 51): each run makes an
``Output`` holding the values it learns, every writer of that output masks them, and another
run in the same process (the in-process runner runs hundreds in one pytest process; a
`peach dev` session reloads for a day) neither masks nor keeps them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path

import pytest
from cli_support import run_peach
from projectkit import write_project

SECRET = "Qz7vK2mX9pL4wR8tN3bY6cH1"
"""Random-looking enough for the credential warning (PC311), which echoes its line."""
CONF = """codops: shop
{secrets}endpoints:
  e:
    url: /e
    components:
      main: {{notebook: nb.ipynb, method: ask, full_notebook: true}}
"""
CELLS = ["def ask():\n    return 1\n", f'secret = "{SECRET}"\n']


def _project(root: Path, *, declared: bool) -> Path:
    """A project whose notebook holds ``SECRET`` in a line `peach validate` echoes; with
    ``declared``, its conf names it as a secret whose value is in `.env`."""
    conf = CONF.format(secrets="secrets: [API_KEY]\n" if declared else "")
    files = {".env": f"API_KEY={SECRET}\n"} if declared else {}
    return write_project(root, conf, {"nb.ipynb": CELLS}, files)


def test_a_secret_one_run_learns_is_not_another_runs(tmp_path: Path) -> None:
    """Three `peach validate` runs in one process: the project declaring the secret shows
    its line masked, before and after a run of a project that declares none, which shows
    the same line as it is (before: the first run's secret was masked by every later run
    of the process, until the process ended)."""
    declaring = _project(tmp_path / "declaring", declared=True)
    plain = _project(tmp_path / "plain", declared=False)
    first = run_peach("validate", str(declaring))
    other = run_peach("validate", str(plain))
    again = run_peach("validate", str(declaring))
    for done in (first, again):
        text = done.stdout + done.stderr
        assert "PC311" in text and SECRET not in text and 'secret = "***"' in text, text
    text = other.stdout + other.stderr
    assert "PC311" in text and f'secret = "{SECRET}"' in text, text


def _written(output, tmp_path: Path) -> dict[str, str]:
    """What each writer of ``output`` wrote when given ``SECRET`` (in a table cell too
    narrow for it, in JSON, in a log record, in relayed terminal bytes, …)."""
    from rich.table import Table
    from rich.text import Text

    from peach_cli.boundary import json_text, markup

    written: dict[str, str] = {}
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        output.stdout.print(f"key {markup(SECRET)}", soft_wrap=True)
        written["stdout console"] = out.getvalue()
        output.stderr.print(f"key {markup(SECRET)}", soft_wrap=True)
        written["stderr console"] = err.getvalue()
        table = Table()
        table.add_column("last error", width=14, no_wrap=True, overflow="ellipsis")
        table.add_row(Text(SECRET, style="red"))  # cut to its start: masked before layout
        at = len(out.getvalue())
        output.stdout.print(table)
        written["a table cell"] = out.getvalue()[at:]
        at = len(out.getvalue())
        output.write_report(json_text({"key": SECRET}) + "\n", channel="test-json")
        written["report"] = out.getvalue()[at:]
        at = len(err.getvalue())
        output.write_status("\r" + SECRET)
        written["status line"] = err.getvalue()[at:]
        at = len(err.getvalue())
        output.stream("stderr").write(SECRET + "\n")
        written["stream"] = err.getvalue()[at:]
        at = len(err.getvalue())
        with output.logging():
            logging.getLogger("peach.test").warning("logged %s", SECRET)
        written["logging"] = err.getvalue()[at:]
    with (tmp_path / "console.txt").open("w") as file:
        output.new_console("live-view", file, width=12, force_terminal=True).print(SECRET)
    written["own console"] = (tmp_path / "console.txt").read_text()
    output.write_file(tmp_path / "graph.svg", f"<text>{SECRET}</text>", channel="profile")
    written["file"] = (tmp_path / "graph.svg").read_text()
    lines = output.open_lines(tmp_path / "record.jsonl", channel="record")
    lines.write([{"result": {"key": SECRET}}])
    lines.close()
    written["record"] = (tmp_path / "record.jsonl").read_text()
    read, write = os.pipe()
    try:
        output.relay(f"(Pdb) p key\r\n'{SECRET}'\r\n".encode(), fd=write)
        written["relayed terminal"] = os.read(read, 4096).decode()
    finally:
        os.close(read)
        os.close(write)
    return written


WRITERS = {
    "console": "stdout console",  # what stdout and stderr are
    "stdout": "stdout console",
    "stderr": "stderr console",
    "new_console": "own console",
    "stream": "stream",
    "write_report": "report",
    "write_status": "status line",
    "write_file": "file",
    "open_lines": "record",
    "relay": "relayed terminal",
    "logging": "logging",
}
"""Each writer ``Output`` offers and the write of ``_written`` that probes it."""


def test_every_writer_of_an_output_is_probed() -> None:
    """A writer added to ``Output`` fails here until ``_written`` plants the secret in it."""
    from peach_cli.boundary import Output

    assert {name for name in vars(Output) if not name.startswith("_")} == set(WRITERS)


def test_every_writer_of_a_run_masks_its_secrets_and_no_other_run_does(tmp_path: Path) -> None:
    """The same writes through the output of a run that learned ``SECRET`` and through
    another run's: masked in every channel of the first (no piece of it, not even the start
    a narrow cell keeps), shown as is by the second."""
    from peach_cli.boundary import Output

    knowing = Output()
    knowing.secrets.hide([SECRET])
    other = Output()
    (tmp_path / "knowing").mkdir()
    (tmp_path / "other").mkdir()
    masked = _written(knowing, tmp_path / "knowing")
    shown = _written(other, tmp_path / "other")
    assert set(WRITERS.values()) <= set(masked)
    for channel, text in masked.items():
        assert "***" in text and SECRET[:6] not in text, (channel, text)
    for channel, text in shown.items():
        assert SECRET[:6] in text and "***" not in text, (channel, text)


def test_a_source_that_hides_again_replaces_what_it_hid() -> None:
    """A pool (or a task) hides its values under its name at every version it starts: a
    session reloaded a thousand times, each with a new value, masks the serving version's
    and the one before (its replicas may still be answering) and what the run learned
    once, not a thousand (issue 53: nothing grows per reload)."""
    from peach_cli.boundary import Secrets

    secrets = Secrets(["declared-once-value"])
    for version in range(1000):
        secrets.hide([f"value-of-version-{version}"], source="component e/main")
        secrets.hide([f"task-value-{version}"], source="task nightly")
    assert secrets.values == {
        "declared-once-value",
        *("value-of-version-998", "value-of-version-999"),
        *("task-value-998", "task-value-999"),
    }
    assert secrets.mask("v=value-of-version-999 d=declared-once-value") == "v=*** d=***"
    assert secrets.mask("value-of-version-997") == "value-of-version-997"


@pytest.mark.slow
def test_a_reloaded_session_holds_the_secrets_of_the_version_it_serves(tmp_path: Path) -> None:
    """`peach dev` reloads with the secret's value changed each time: the session masks the
    value its replicas now have and the one before (the retired replicas may still be
    answering), never more (before: every value of every version stayed masked for the
    process's life)."""
    from peach_cli.checks.build import build_plan
    from peach_cli.runtime import aio
    from simulator.session import DevSession, SessionConfig

    conf = CONF.format(secrets="secrets: [API_KEY]\n")
    root = write_project(tmp_path / "p", conf, {"nb.ipynb": CELLS}, {".env": "API_KEY=v-0-abcd\n"})

    async def scenario() -> list[frozenset[str]]:
        held = []
        plan, diagnostics = build_plan(root)
        assert plan is not None, diagnostics
        async with DevSession(SessionConfig(plan, shared_env=True)) as session:
            assert session.server is not None
            await session.server.wait_ready()
            held.append(session.secrets.values)
            for version in range(1, 4):
                (root / ".env").write_text(f"API_KEY=v-{version}-abcd\n")
                new_plan, diagnostics = build_plan(root)
                assert new_plan is not None, diagnostics
                change = await session.server.apply_plan(new_plan)
                assert change.started == ["e/main"], change
                held.append(session.secrets.values)
        return held

    held = aio.run(scenario())
    expected = [{"v-0-abcd"}] + [{f"v-{n - 1}-abcd", f"v-{n}-abcd"} for n in range(1, 4)]
    assert held == expected, held
