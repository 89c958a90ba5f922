"""Change analysis of hot reload: which components a save restarts, on real projects.

Each test copies ``tests/projects/reload_basic``, builds its plan with ``build_plan``, edits
the copy as a user would, builds again and compares the two snapshots.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reload_support import append_file, copy_project, edit_cell, edit_file

from peach_cli.checks.build import build_plan
from simulator.changes import Changes, ComponentChange, Snapshot, analyze_changes
from simulator.events import Reloaded, ReloadFailed, ReloadRejected

ALL = ["hello/main", "token/main", "loud/main", "story/main", "guarded/main"]

pytestmark = pytest.mark.timeout(60)


def snapshot(project: Path) -> Snapshot:
    plan, diagnostics = build_plan(project)
    assert plan is not None, [str(d) for d in diagnostics]
    return Snapshot.take(plan)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project("reload_basic", tmp_path)


def test_nothing_saved_changes_nothing(project: Path) -> None:
    changes = analyze_changes(snapshot(project), snapshot(project))
    assert changes.unchanged == ALL
    assert changes.empty


def test_editing_one_cell_restarts_only_its_component(project: Path) -> None:
    before = snapshot(project)
    edit_cell(project, '"v1"', '"v2"')
    changes = analyze_changes(before, snapshot(project))
    assert changes.restarted == ["hello/main"]
    assert changes.reasons("hello/main") == ("code",)
    assert sorted(changes.unchanged) == sorted(set(ALL) - {"hello/main"})
    assert not changes.empty


def test_editing_an_init_restarts_its_component(project: Path) -> None:
    before = snapshot(project)
    edit_cell(project, 'return "ready"', 'return "steady"')
    assert analyze_changes(before, snapshot(project)).restarted == ["guarded/main"]


def test_a_helper_module_restarts_the_components_that_import_it(project: Path) -> None:
    before = snapshot(project)
    edit_file(project, "helpers.py", '+ "!"', '+ "!!"')
    changes = analyze_changes(before, snapshot(project))
    assert changes.restarted == ["loud/main"]
    assert changes.reasons("loud/main") == ("helpers.py",)


def test_a_py_file_nobody_imports_changes_nothing(project: Path) -> None:
    before = snapshot(project)
    (project / "scratch.py").write_text("print('not imported')\n")
    assert analyze_changes(before, snapshot(project)).empty


def test_an_edit_outside_the_extracted_cells_changes_nothing(project: Path) -> None:
    before = snapshot(project)
    path = project / "notebooks" / "Endpoints.ipynb"
    path.write_text(path.read_text().replace("# Reload", "# Reload, edited"))
    assert analyze_changes(before, snapshot(project)).empty


def test_a_url_change_re_routes_without_a_restart(project: Path) -> None:
    before = snapshot(project)
    edit_file(project, "peach.yaml", "url: /hello", "url: /hi")
    changes = analyze_changes(before, snapshot(project))
    assert changes.urls_changed == (("hello", "/hello", "/hi"),)
    assert changes.unchanged == ALL
    assert not changes.empty


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("method: token}", "method: token, args: {size: 3}}", "args"),
        ("method: token}", "method: token, replicas: 2}", "replicas"),
        ("method: token}", "method: token, memory: 1Gi}", "memory"),
        ("method: token}", "method: token, media_type: text/event-stream}", "media_type"),
    ],
)
def test_config_changes_restart_the_component(
    project: Path, old: str, new: str, reason: str
) -> None:
    before = snapshot(project)
    edit_file(project, "peach.yaml", old, new)
    changes = analyze_changes(before, snapshot(project))
    assert changes.restarted == ["token/main"]
    assert changes.reasons("token/main") == (reason,)


def test_added_and_removed_endpoints(project: Path) -> None:
    before = snapshot(project)
    append_file(
        project,
        "peach.yaml",
        "  extra:\n    url: /extra\n    components:\n"
        "      main: {notebook: notebooks/Endpoints.ipynb, method: hello}\n",
    )
    added = snapshot(project)
    changes = analyze_changes(before, added)
    assert changes.started == ["extra/main"]
    assert changes.endpoints_added == ("extra",)
    assert changes.unchanged == ALL

    changes = analyze_changes(added, before)
    assert changes.stopped == ["extra/main"]
    assert changes.endpoints_removed == ("extra",)


def test_a_timeout_change_only_re_routes(project: Path) -> None:
    before = snapshot(project)
    edit_file(project, "peach.yaml", "codops: reload", "codops: reload\ntimeout_s: 5")
    changes = analyze_changes(before, snapshot(project))
    assert changes.timeout_changed == (30.0, 5.0)
    assert changes.unchanged == ALL


def test_a_snapshot_keeps_the_module_contents_it_was_taken_with(project: Path) -> None:
    """The old fingerprint must not be recomputed from the new helper module contents."""
    before = snapshot(project)
    edit_file(project, "helpers.py", "upper()", "lower()")
    after = snapshot(project)
    assert before.fingerprints["loud/main"] != after.fingerprints["loud/main"]
    assert before.modules["helpers.py"] != after.modules["helpers.py"]


def test_a_refused_restart_keeps_the_previous_component_in_the_snapshot(project: Path) -> None:
    before = snapshot(project)
    edit_cell(project, '"v1"', '"v2"')
    edit_cell(project, 'return "ready"', 'raise RuntimeError("no")')
    after = snapshot(project)
    served = after.replace("guarded/main", before)
    assert served.fingerprints["guarded/main"] == before.fingerprints["guarded/main"]
    assert served.fingerprints["hello/main"] == after.fingerprints["hello/main"]
    assert served.specs()["guarded/main"] == before.specs()["guarded/main"]
    # The fix is a restart again; going back to the served code is not.
    assert analyze_changes(served, after).restarted == ["guarded/main"]
    assert analyze_changes(served, before).restarted == ["hello/main"]


def test_the_reload_line_names_what_changed_and_how_long_it_took() -> None:
    changes = Changes(
        components=(
            ComponentChange("assistant/main", "restarted", ("code",)),
            *(ComponentChange(f"e{i}/main", "unchanged") for i in range(4)),
        )
    )
    event = Reloaded(("notebooks/A.ipynb",), changes, seconds=0.214, init_seconds=0.151)
    assert event.message == (
        "restarted assistant/main (code changed) in 0.21 s (init 0.15 s); 4 components unchanged"
    )


def test_the_reload_line_for_routing_and_added_endpoints() -> None:
    changes = Changes(
        components=(
            ComponentChange("new/main", "started"),
            ComponentChange("old/main", "stopped"),
            ComponentChange("kept/main", "unchanged"),
        ),
        urls_changed=(("kept", "/a", "/b"),),
    )
    message = Reloaded(("peach.yaml",), changes, seconds=0.1, init_seconds=0.05).message
    assert message == (
        "started new/main; stopped old/main; kept moved from /a to /b in 0.10 s "
        "(init 0.05 s); 1 component unchanged"
    )


def test_rejected_and_failed_reload_messages_say_the_previous_version_serves(
    project: Path,
) -> None:
    edit_file(project, "peach.yaml", "method: hello", "methd: hello")
    plan, diagnostics = build_plan(project)
    assert plan is None
    rejected = ReloadRejected(("peach.yaml",), tuple(diagnostics))
    assert rejected.errors >= 1
    assert "still serving the previous version" in rejected.message
    failed = ReloadFailed("guarded/main", "RuntimeError: no")
    assert "still serving the previous version" in failed.message.lower()
    assert "on the platform this replica would stay unhealthy" in failed.message
