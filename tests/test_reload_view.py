"""What `peach dev` shows of a reload: the live table's reloading replicas and one line each."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from reload_support import RELOAD_BASIC, copy_project, edit_file
from rich.console import Console

from peach_cli.checks.build import build_plan
from peach_cli.views.dev import DevView
from simulator.changes import Changes, ComponentChange
from simulator.events import (
    Reloaded,
    ReloadFailed,
    ReloadRejected,
    ReloadStarted,
    ReplicaChanged,
    ReplicaState,
)

pytestmark = pytest.mark.timeout(30)


def make_view() -> tuple[DevView, io.StringIO]:
    out = io.StringIO()
    view = DevView(Console(file=out, width=200, color_system=None), live=False)
    plan, _ = build_plan(RELOAD_BASIC)
    assert plan is not None
    view.set_plan(plan)
    for key, replica in (("hello/main", "hello/main#1"), ("token/main", "token/main#1")):
        view.handle(ReplicaChanged(key, replica, ReplicaState.HEALTHY, pid=1))
    return view, out


def states(view: DevView) -> dict[str, str]:
    return {replica: row.state.value for replica, row in view.replicas.items()}


def test_replicas_being_replaced_show_as_reloading_then_leave() -> None:
    view, out = make_view()
    view.handle(ReloadStarted(("notebooks/Endpoints.ipynb",), ("hello/main",)))
    assert states(view) == {"hello/main#1": "reloading", "token/main#1": "healthy"}
    text = io.StringIO()
    Console(file=text, width=200, color_system=None).print(view.render())
    assert "reloading" in text.getvalue()

    view.handle(ReplicaChanged("hello/main", "hello/main#2", ReplicaState.HEALTHY, pid=2))
    changes = Changes(
        components=(
            ComponentChange("hello/main", "restarted", ("code",)),
            ComponentChange("token/main", "unchanged"),
        )
    )
    view.handle(Reloaded(("notebooks/Endpoints.ipynb",), changes, 0.08, 0.02))
    view.handle(ReplicaChanged("hello/main", "hello/main#1", ReplicaState.DRAINING))
    view.handle(ReplicaChanged("hello/main", "hello/main#1", ReplicaState.STOPPED))
    assert states(view) == {"token/main#1": "healthy", "hello/main#2": "healthy"}
    view.flush()
    assert (
        "restarted hello/main (code changed) in 0.08 s (init 0.02 s); 1 component unchanged"
        in out.getvalue()
    )


def test_a_refused_restart_puts_the_serving_replicas_back_to_healthy() -> None:
    view, out = make_view()
    view.handle(ReloadStarted(("notebooks/Endpoints.ipynb",), ("hello/main",)))
    view.handle(ReplicaChanged("hello/main", "hello/main#2", ReplicaState.UNHEALTHY, error="boom"))
    view.handle(ReloadFailed("hello/main", "init_hello() raised RuntimeError: boom"))
    view.handle(ReplicaChanged("hello/main", "hello/main#2", ReplicaState.STOPPED))
    assert states(view) == {"hello/main#1": "healthy", "token/main#1": "healthy"}
    view.flush()
    assert "the new version failed to start: init_hello() raised RuntimeError: boom" in (
        out.getvalue()
    )


def test_a_rejected_save_prints_the_diagnostics_as_validate_does(tmp_path: Path) -> None:
    project = copy_project("reload_basic", tmp_path)
    edit_file(project, "peach.yaml", "method: hello}", "methd: hello}")
    _, diagnostics = build_plan(project)
    view, out = make_view()
    view.handle(ReloadRejected(("peach.yaml",), tuple(diagnostics)))
    printed = out.getvalue()  # on the view's console: `peach dev`'s stdout
    assert "peach.yaml:8:" in printed and "error PC101 unknown key 'methd'" in printed
    assert "did you mean 'method'?" in printed
    assert "still serving the previous version" in printed
