"""What `peach dev` would refuse, `peach validate` reports first, in the same words, and in
one run: a method rebound by assignment after its def (PC209), an A/B split wrong in two
ways, an import an extra may provide before the env is built (PC308)."""

from __future__ import annotations

import pytest
from cli_support import run_peach
from projectkit import BASE_CELLS, diagnose, write_project

HEAD = "codops: shop\nendpoints:\n"
MICROGRAD = [  # as in a real micrograd notebook: f is a function, then a Value
    "def f(q: str = ''):\n    return [q]\n",
    "d = 2\ne = 3\n",
    "f = d * e\n",
]


def rebound_project(root):
    conf = (
        HEAD + "  e:\n    url: /e\n    components:\n      main: {notebook: mg.ipynb, method: f}\n"
    )
    return write_project(root, conf, {"mg.ipynb": MICROGRAD})


def test_validate_reports_a_method_rebound_after_its_def_naming_the_cell(tmp_path):
    rebound_project(tmp_path)
    found = [d for d in diagnose(tmp_path) if d.code == "PC209"]
    assert len(found) == 1
    assert found[0].severity == "error"
    assert str(found[0].position) == "mg.ipynb:cell 3:line 1"
    assert "cell 3 rebinds 'f' (`f = d * e`)" in found[0].message
    assert "defined in cell 1" in found[0].message


def test_a_rebinding_that_may_be_a_function_is_not_reported(tmp_path):
    cells = ["def f(q=''):\n    return q\n", "import functools\nf = functools.lru_cache(f)\n"]
    conf = (
        HEAD + "  e:\n    url: /e\n    components:\n      main: {notebook: mg.ipynb, method: f}\n"
    )
    write_project(tmp_path, conf, {"mg.ipynb": cells})
    assert not [d for d in diagnose(tmp_path) if d.code == "PC209"]


@pytest.mark.slow
def test_dev_refuses_the_rebound_method_with_validates_words(tmp_path):
    rebound_project(tmp_path)
    validated = run_peach("validate", str(tmp_path))
    served = run_peach("dev", str(tmp_path), "--port", "0", "--no-reload")
    assert validated.returncode == 1 and served.returncode == 1
    words = "cell 3 rebinds 'f' (`f = d * e`)"
    assert words in validated.stdout
    assert words in served.stdout + served.stderr
    assert "not serving" in served.stdout + served.stderr


def test_an_ab_split_wrong_twice_reports_both_in_one_run(tmp_path):
    conf = HEAD + (
        "  e:\n    url: /e\n    ab: {by: user, split: {main: 50, fallback: 40}}\n"
        "    components:\n      main: {notebook: nb.ipynb, method: ask}\n"
        "      fallback: {notebook: nb.ipynb, method: ask}\n"
    )
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS})
    messages = [d.message for d in diagnose(tmp_path) if d.code == "PC117"]
    assert any("sum to 90, not 100" in m for m in messages), messages
    assert any("the fallback cannot be an arm" in m for m in messages), messages


def imports_project(root, dependency: str, module: str):
    conf = (
        f"codops: shop\npy_environments:\n  base: {{dependencies: ['{dependency}']}}\n"
        "endpoints:\n  e:\n    url: /e\n    components:\n      main: {notebook: i.ipynb, method: ask}\n"
    )
    cells = [f"import {module}\n\ndef ask(q: str = ''):\n    return [q]\n"]
    return write_project(root, conf, {"i.ipynb": cells})


def test_a_module_a_known_extra_provides_is_not_reported(tmp_path):
    imports_project(tmp_path, "uvicorn[standard]>=0.30", "uvloop")
    assert not [d for d in diagnose(tmp_path) if d.code == "PC308"]


def test_before_a_build_an_unknown_extra_makes_pc308_say_it_cannot_tell(tmp_path):
    imports_project(tmp_path, "somepkg[fast]", "fastthing")
    (found,) = [d for d in diagnose(tmp_path) if d.code == "PC308"]
    assert "ModuleNotFoundError" not in found.message
    assert "'somepkg[fast]' asks for extras" in found.message
    assert "cannot tell until the env is built" in found.message
    assert "peach env build" in (found.hint or "")


def test_without_extras_pc308_still_says_what_the_platform_raises(tmp_path):
    imports_project(tmp_path, "somepkg", "fastthing")
    (found,) = [d for d in diagnose(tmp_path) if d.code == "PC308"]
    assert "ModuleNotFoundError" in found.message
