"""Which saves are patched into the running replicas and which restart them, on real projects.

Each test copies ``tests/projects/reload_patch``, builds its plan, edits the copy's notebook
as a user would, builds again and compares the two snapshots with ``patch=True`` — the pure
decision of ``simulator.edits`` and ``simulator.changes``, no process involved. The same
edits served by ``peach dev`` are in ``tests/test_reload_patch.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reload_support import copy_project, edit_cell, edit_file

from peach_cli.checks.build import build_plan
from simulator.changes import Changes, ComponentChange, Snapshot, analyze_changes
from simulator.events import Reloaded

NOTEBOOK = "notebooks/Patch.ipynb"

pytestmark = pytest.mark.timeout(60)


def snapshot(project: Path) -> Snapshot:
    plan, diagnostics = build_plan(project)
    assert plan is not None, [str(d) for d in diagnostics]
    return Snapshot.take(plan)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project("reload_patch", tmp_path)


def change_of(
    project: Path, old: str, new: str, key: str, *, patch: bool = True
) -> ComponentChange:
    before = snapshot(project)
    edit_cell(project, old, new, notebook=NOTEBOOK)
    changes = analyze_changes(before, snapshot(project), patch=patch)
    [change] = [c for c in changes.components if c.key == key]
    others = [c for c in changes.components if c.key != key and c.action != "unchanged"]
    assert others == [], others
    return change


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('LABEL = "m1"', 'LABEL = "m2"', "model/main"),  # a constant in the method's cell
        ('return f"{LABEL} {model}"', 'return f"{LABEL}: {model}"', "model/main"),
        ('return ["s1", model]', 'return ["s2", model]', "shared/main"),  # cell shared with init
        ('return ["p1", model]', 'return ["p2", model]', "pair/main"),
        ('STORY = "t1"', 'STORY = "t2"', "story/main"),  # an async generator stays one
        # comments and blank lines in init's cell are not a change of init
        ("    token = uuid", "    # a comment\n\n    token = uuid", "model/main"),
    ],
)
def test_a_method_edit_is_patched(project: Path, old: str, new: str, key: str) -> None:
    change = change_of(project, old, new, key)
    assert (change.action, change.reasons) == ("patched", ("method",))


@pytest.mark.parametrize(
    ("old", "new", "key", "reason"),
    [
        ("return token", 'return "i2-" + token', "model/main", "init"),
        (
            "import pathlib\nimport time",
            "import pathlib\nimport time\nLIMIT = 3",
            "model/main",
            "init",
        ),
        ('return "s-" + uuid', 'return "i2-" + uuid', "shared/main", "init"),
        # in the cell shared with init, anything but the method counts as init
        (
            "import uuid\n\n\ndef init_shared",
            "import uuid\nX = 1\n\n\ndef init_shared",
            "shared/main",
            "init",
        ),
        ('return ["p1", model]', 'yield ["p1", model]', "pair/main", "generator"),
    ],
)
def test_other_code_edits_restart(project: Path, old: str, new: str, key: str, reason: str) -> None:
    change = change_of(project, old, new, key)
    assert (change.action, change.reasons) == ("restarted", (reason,))


def test_a_method_edit_restarts_when_init_sets_module_globals(project: Path) -> None:
    """The patched method runs in a new module, where a global that init set is missing."""
    edit_cell(
        project,
        "    token = uuid.uuid4().hex\n",
        "    global LOADED\n    LOADED = True\n    token = uuid.uuid4().hex\n",
        notebook=NOTEBOOK,
    )
    change = change_of(project, 'LABEL = "m1"', 'LABEL = "m2"', "model/main")
    assert (change.action, change.reasons) == ("restarted", ("init globals",))


KEPT_GLOBAL = "    global LOADED\n"
KEPT_SET = "    LOADED = True\n"
KEPT_FILL = '    CACHE["weights"] = "w1"  # filled by init, without `global`\n'
KEPT_METHOD = 'return ["k1", isinstance(model, Model), CACHE.get("weights"), LOADED, model.token]'


def shape_kept(project: Path, *, fill: bool, check_class: bool) -> None:
    """The `kept` component without its `global`, and with or without the rest."""
    edit_cell(project, KEPT_GLOBAL, "", notebook=NOTEBOOK)
    edit_cell(project, KEPT_SET, "    local = {}\n    local['x'] = 1\n", notebook=NOTEBOOK)
    if not fill:
        edit_cell(project, KEPT_FILL, "", notebook=NOTEBOOK)
    method = 'return ["k1", CACHE.get("weights"), model.token'
    method += ", isinstance(model, Model)]" if check_class else "]"
    edit_cell(project, KEPT_METHOD, method, notebook=NOTEBOOK)


def test_a_method_edit_restarts_when_init_fills_module_data(project: Path) -> None:
    """init's CACHE["weights"] = ... is in the module in use; a patch's new module has the
    CACHE the code makes (empty)."""
    shape_kept(project, fill=True, check_class=False)
    change = change_of(project, 'return ["k1",', 'return ["k2",', "kept/main")
    assert (change.action, change.reasons) == ("restarted", ("init module data",))


def test_a_method_edit_restarts_when_the_code_checks_its_own_classes(project: Path) -> None:
    """isinstance(model, Model): the state is an instance of the Model that was; a patch
    defines Model anew."""
    shape_kept(project, fill=False, check_class=True)
    change = change_of(project, 'return ["k1",', 'return ["k2",', "kept/main")
    assert (change.action, change.reasons) == ("restarted", ("own classes",))


def test_a_method_edit_is_patched_when_init_only_fills_its_own_objects(project: Path) -> None:
    """A class the code defines but never checks, a dict local to init: nothing of the
    state lives in the module, the edit is patched."""
    shape_kept(project, fill=False, check_class=False)
    change = change_of(project, 'return ["k1",', 'return ["k2",', "kept/main")
    assert change.action == "patched"


def test_a_method_that_stops_being_a_generator_restarts(project: Path) -> None:
    edit_cell(project, 'return ["p1", model]', 'yield ["p1", model]', notebook=NOTEBOOK)
    change = change_of(project, 'yield ["p1", model]', 'return ["p1", model]', "pair/main")
    assert (change.action, change.reasons) == ("restarted", ("not generator",))


def test_restart_mode_never_patches(project: Path) -> None:
    change = change_of(project, 'LABEL = "m1"', 'LABEL = "m2"', "model/main", patch=False)
    assert (change.action, change.reasons) == ("restarted", ("code",))


def test_a_config_change_with_a_method_edit_restarts(project: Path) -> None:
    before = snapshot(project)
    edit_cell(project, 'LABEL = "m1"', 'LABEL = "m2"', notebook=NOTEBOOK)
    edit_file(project, "peach.yaml", "method: answer}", "method: answer, args: {x: 1}}")
    changes = analyze_changes(before, snapshot(project), patch=True)
    assert changes.restarted == ["model/main"]
    assert changes.reasons("model/main") == ("code", "args")


def test_the_reload_line_says_what_was_patched_and_restarted() -> None:
    changes = Changes(
        components=(
            ComponentChange("assistant/main", "patched", ("method",)),
            ComponentChange("recommend/main", "restarted", ("init",)),
            ComponentChange("other/main", "unchanged"),
        )
    )
    event = Reloaded(("notebooks/A.ipynb",), changes, seconds=0.612, init_seconds=0.551)
    assert event.message == (
        "patched assistant/main (method changed; init state kept); "
        "restarted recommend/main (init changed) in 0.61 s (init 0.55 s); "
        "1 component unchanged"
    )
    alone = Changes(components=(ComponentChange("assistant/main", "patched", ("method",)),))
    assert Reloaded((), alone, seconds=0.031, init_seconds=0.0).message == (
        "patched assistant/main (method changed; init state kept) in 0.03 s"
    )
    failed = alone.with_restarts({"assistant/main": "NameError: name 'x' is not defined"})
    assert Reloaded((), failed, seconds=0.2, init_seconds=0.1).message == (
        "restarted assistant/main (patch failed: NameError: name 'x' is not defined) "
        "in 0.20 s (init 0.10 s)"
    )


def reason_for(root: Path, cells: list[str], old: str, new: str) -> tuple[str, tuple[str, ...]]:
    """The decision for editing ``old`` into ``new`` in a one-component project whose
    notebook is ``cells`` (``init`` and ``predict``)."""
    from projectkit import write_project

    conf = (
        "codops: decide\nendpoints:\n  e:\n    url: /e\n"
        "    components: {main: {notebook: nb.ipynb, init: init, method: predict}}\n"
    )
    write_project(root, conf, {"nb.ipynb": cells})
    before = snapshot(root)
    edit_cell(root, old, new, notebook="nb.ipynb")
    changes = analyze_changes(before, snapshot(root), patch=True)
    [change] = changes.components
    return change.action, change.reasons


# The code a component runs is the cells that define its init and its method: the helpers
# and classes below live in the method's cell, so an edit of them leaves init's cell alone.
@pytest.mark.parametrize(
    ("cells", "old", "new", "reason"),
    [
        pytest.param(  # the state is a Pipeline: its old run() would go on serving
            ["def init():\n    return Pipeline()\n",
             "class Pipeline:\n    def run(self, x):\n        return x + 1\n\n\n"
             "def predict(model, x: int = 1):\n    return model.run(x)\n"],
            "return x + 1", "return x + 2", "class changed", id="a-class-of-the-state",
        ),
        pytest.param(  # init builds the state with load(): an edit of load is an init edit
            ["def init():\n    return load()\n",
             "def load():\n    return [1]\n\n\ndef predict(model):\n    return model\n"],
            "return [1]", "return [2]", "init", id="a-helper-init-calls",
        ),
        pytest.param(
            ["def init():\n    load()\n",
             "MODEL = None\n\n\ndef load():\n    global MODEL\n    MODEL = 1\n\n\n"
             "def predict(model):\n    return ['p1', MODEL]\n"],
            "'p1'", "'p2'", "init globals", id="a-global-set-by-a-helper",
        ),
        pytest.param(
            ["def init():\n    return CLF.fit()\n",
             "class Classifier:\n    def fit(self):\n        return self\n\n\n"
             "CLF = Classifier()\n\n\ndef predict(model):\n    return 'p1'\n"],
            "'p1'", "'p2'", "init module data", id="a-fitted-module-object",
        ),
        pytest.param(
            ["def init():\n    return 1\n",
             "class NotReady(Exception):\n    pass\n\n\n"
             "def predict(model):\n    try:\n        return ['p1', model]\n"
             "    except NotReady:\n        return None\n"],
            "'p1'", "'p2'", "own classes", id="except-an-own-class",
        ),
        pytest.param(
            ["def init():\n    return {'mode': Mode.FAST}\n",
             "import enum\n\n\nclass Mode(enum.Enum):\n    FAST = 1\n\n\n"
             "def predict(model):\n    return ['p1', model['mode'] == Mode.FAST]\n"],
            "'p1'", "'p2'", "own classes", id="an-own-enum",
        ),
    ],
)  # fmt: skip
def test_a_method_edit_restarts_when_the_state_depends_on_what_changed(
    tmp_path: Path, cells: list[str], old: str, new: str, reason: str
) -> None:
    assert reason_for(tmp_path / "p", cells, old, new) == ("restarted", (reason,))


@pytest.mark.parametrize(
    "cells",
    [
        pytest.param(  # a logger is one shared object; calling it changes no state
            ["import logging\n\nlogger = logging.getLogger(__name__)\n\n\n"
             "def init():\n    logger.info('loading')\n    logger.setLevel(10)\n    return 1\n",
             "def predict(model):\n    return 'p1'\n"],
            id="a-module-logger",
        ),
        pytest.param(  # an isinstance the state never goes through
            ["def init():\n    return 1\n",
             "class Point:\n    def __eq__(self, other):\n        return isinstance(other, Point)\n"
             "\n\ndef predict(model):\n    return 'p1'\n"],
            id="isinstance-away-from-the-state",
        ),
        pytest.param(  # reading a file through a module-level path changes nothing
            ["import pathlib\n\nDATA = pathlib.Path('words.txt')\n\n\n"
             "def init():\n    with DATA.open() as handle:\n        return handle.read()\n",
             "def predict(model):\n    return 'p1'\n"],
            id="a-module-level-path",
        ),
        pytest.param(  # process-wide state through an imported module survives a patch
            ["import random\n\n\ndef init():\n    random.seed(0)\n    return 1\n",
             "def predict(model):\n    return 'p1'\n"],
            id="an-imported-module",
        ),
    ],
)  # fmt: skip
def test_a_method_edit_is_patched_when_the_state_depends_on_nothing_that_changed(
    tmp_path: Path, cells: list[str]
) -> None:
    assert reason_for(tmp_path / "p", cells, "'p1'", "'p2'")[0] == "patched"
