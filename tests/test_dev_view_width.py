"""`peach dev`'s live view at 80 columns: every endpoint, component and state whole.

Real sessions (the examples, the A/B one included, and a project whose names are 20
characters long) run in this process with their events going to a ``DevView``; the view is
rendered by a Rich console 80 columns wide, as a terminal of 80×24 shows it.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import httpx
import pytest
from projectkit import write_project

from peach_cli.checks.build import build_plan
from peach_cli.runtime import aio
from peach_cli.views.dev import DevView
from simulator.session import DevSession, SessionConfig

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STATES = {"starting", "healthy", "reloading", "unhealthy", "restarting", "draining", "stopped"}

LONG = "abcdefghij_klmnopqrs"  # 20 characters
LONG_CONF = f"""\
codops: shop
endpoints:
  {LONG}:
    url: /{LONG}/{LONG}
    ab: {{by: user, split: {{main: 60, {LONG}: 40}}}}
    components:
      main: {{notebook: nb.ipynb, method: ask, replicas: 2, memory: 512Mi}}
      {LONG}: {{notebook: nb.ipynb, method: broken}}
      fallback: {{notebook: nb.ipynb, method: ask}}
  {LONG[:18]}_2:
    url: /second
    components:
      main: {{notebook: nb.ipynb, method: ask}}
"""
LONG_CELLS = [
    "def ask(user_id: str = ''):\n    return [user_id]\n",
    "def broken(user_id: str = ''):\n    raise ValueError('x' * 300)\n",
]


def long_names(tmp_path: Path) -> Path:
    return write_project(tmp_path / "long", LONG_CONF, {"nb.ipynb": LONG_CELLS})


def render_session(project: Path) -> tuple[str, DevView]:
    """Serve ``project``, send each endpoint a few requests, render the view at 80×24."""
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    console = Console80()
    view = DevView(console, live=False)
    view.set_plan(plan)
    config = SessionConfig(plan, project=project, port=0, shared_env=True, reload=False)

    shown: list[str] = []

    async def scenario() -> None:
        async with DevSession(config, on_event=view.handle) as session:
            await session.wait_ready()
            async with httpx.AsyncClient(base_url=session.url, timeout=20) as client:
                for endpoint in plan.endpoints.values():
                    for user in ("u1", "u2", "u3"):
                        await client.get(endpoint.url, params={"user_id": user})
            view.flush()
            console.file = io.StringIO()  # the table alone, as the live view shows it
            console.print(view.render())
            shown.append(console.file.getvalue())
            check_whole(shown[0], view)  # against the states the view held then

    aio.run(scenario())
    return shown[0], view


def Console80():  # noqa: N802 - a console as a terminal of 80×24 renders
    from rich.console import Console

    return Console(file=io.StringIO(), width=80, height=24, color_system=None)


def check_whole(text: str, view: DevView) -> None:
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    words = [set(re.findall(r"[\w./#-]+", line)) for line in lines]
    for name, url, components in view.endpoints:
        assert any(name in w and url in w for w in words), (name, url, text)
        for key in components:
            component = key.split("/", 1)[1]
            rows = [r for r in view.replicas.values() if r.component == key]
            assert rows, key
            for row in rows:
                # the component's row (its first replica) or a later replica's row: its state
                assert any(row.state.value in w for w in words), (row, text)
            assert any(component in w and (w & STATES) for w in words), (component, text)


@pytest.mark.slow
@pytest.mark.parametrize("example", ["recommender", "quickstart", "decorated"])
def test_an_example_is_readable_at_80_columns(example, tmp_path):
    # a copy: serving an example may write in it (a task's version file)
    render_session(Path(shutil.copytree(EXAMPLES / example, tmp_path / example)))


def test_twenty_character_names_and_an_ab_test_are_readable_at_80_columns(tmp_path):
    text, _ = render_session(long_names(tmp_path))
    assert f"{LONG} /{LONG}/{LONG} · A/B by user" in text
    assert re.search(r"^main\s+#1\s+healthy\s+\d+", text, re.MULTILINE), text
    assert re.search(rf"^{LONG}\s+#1\s+healthy\s+\d+", text, re.MULTILINE), text
    assert re.search(r"^\s+#2\s+healthy", text, re.MULTILINE), text  # the second replica
    assert re.search(r"^60% · \d+ routed", text, re.MULTILINE), text  # below the arm's name
    errors = [line for line in text.splitlines() if line.startswith(f"  {LONG} #1: ")]
    assert errors and all(line.endswith("…") for line in errors), text  # cut, on its own line


def on_a_terminal(*args: str, env: dict[str, str], columns: int = 80) -> str:
    """`peach ARGS` on a pseudo-terminal ``columns`` wide: what it shows (no colour)."""
    from cli_support import on_a_terminal as run_on_a_terminal

    code, shown = run_on_a_terminal(*args, env=env, columns=columns, timeout=100)
    assert code == 0, shown
    text = shown.replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


@pytest.mark.slow
def test_env_list_never_breaks_a_path_mid_word(tmp_path, small_env):
    from env_support import SMALL

    deep = tmp_path / "a-rather-long-folder-name" / "another-long-folder" / "peach-env-cache"
    shutil.copytree(small_env.path.parent, deep)  # the session's cache, at a long path
    deps = ", ".join(SMALL)
    project = write_project(
        tmp_path / "p",
        f"codops: shop\npy_environments:\n  base: {{dependencies: [{deps}]}}\n"
        "endpoints:\n  e:\n    url: /e\n    components:\n      main: {notebook: nb.ipynb, method: ask}\n",
        {"nb.ipynb": LONG_CELLS},
    )
    for columns in (80, 120):
        text = on_a_terminal(
            "env", "list", str(project), env={"PEACH_ENV_CACHE": str(deep)}, columns=columns
        )
        lines = text.splitlines()
        assert all(len(line) <= columns for line in lines), text
        assert "yes" in text  # built, so it has a path
        words = set(re.findall(r"[\w.-]+", text))
        for part in [*deep.parts[1:], small_env.path.name]:
            assert part in words, (part, text)  # whole, on one line


def test_a_table_taller_than_the_terminal_draws_only_what_fits(tmp_path):
    from projectkit import many_endpoints_conf

    from simulator.events import ReplicaChanged, ReplicaState

    conf = many_endpoints_conf(30, "{notebook: nb.ipynb, method: ask}")
    plan, diagnostics = build_plan(write_project(tmp_path / "many", conf, {"nb.ipynb": LONG_CELLS}))
    assert plan is not None, diagnostics
    console = Console80()
    view = DevView(console, live=False)
    view.set_plan(plan)
    for component in plan.components():
        view.handle(ReplicaChanged(component.key, f"{component.key}#1", ReplicaState.HEALTHY))
    view.flush()
    console.file = io.StringIO()  # the table alone, as the live view shows it
    console.print(view.render(console.height))
    lines = console.file.getvalue().splitlines()
    assert len(lines) <= 24, lines
    shown = [line.split()[0] for line in lines if re.match(r"^e\d+ /e\d+$", line)]
    assert shown == [f"e{i}" for i in range(len(shown))] and shown
    assert (
        lines[-1] == f"… {30 - len(shown)} more endpoints not shown (a taller terminal shows more)"
    )
