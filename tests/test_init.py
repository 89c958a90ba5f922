"""`peach init` as a user runs it: a new project that validates clean and serves at once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach

FILES = [
    "peach.yaml",
    "peach.schema.json",
    "notebooks/Endpoints.ipynb",
    ".gitignore",
    "README.md",
    "tests/greet.peach-test.yaml",
]


def peach(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_peach(*args, cwd=cwd)


@pytest.mark.slow
def test_init_writes_a_project_that_validates_without_a_warning(tmp_path):
    result = peach("init", "shop", "--streaming", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    project = tmp_path / "shop"
    for name in FILES:
        assert (project / name).is_file(), name
    assert "cd shop\n  peach validate\n  peach dev\n  peach ask /greet" in result.stdout

    validated = peach("validate", "--format", "json", cwd=project)
    assert validated.returncode == 0, validated.stdout
    severities = {d["severity"] for d in json.loads(validated.stdout)}
    assert severities <= {"info"}  # the async generator's PC401 note, nothing else
    text = peach("validate", cwd=project)
    assert text.stdout.splitlines()[-1] == "✓ . is valid: 2 endpoints (1 info)"


@pytest.mark.slow
def test_the_cases_peach_init_writes_pass_and_its_readme_shows_peach_test(tmp_path):
    result = peach("init", "shop", "--streaming", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    project = tmp_path / "shop"
    assert "peach test " in (project / "README.md").read_text()
    tested = run_peach("test", cwd=project)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert tested.stdout.count("✓") == 3, tested.stdout
    assert "✓ 3 cases passed" in tested.stderr


@pytest.mark.slow
def test_the_conf_names_its_schema_and_the_schema_is_peach_schema(tmp_path):
    assert peach("init", "shop", cwd=tmp_path).returncode == 0
    conf = (tmp_path / "shop" / "peach.yaml").read_text()
    assert conf.splitlines()[0] == "# yaml-language-server: $schema=./peach.schema.json"
    assert "codops: shop\n" in conf
    schema = peach("schema", cwd=tmp_path).stdout
    assert (tmp_path / "shop" / "peach.schema.json").read_text() == schema


@pytest.mark.slow
def test_the_notebook_is_nbformat_4_5_with_cell_ids(tmp_path):
    assert peach("init", "shop", "--streaming", cwd=tmp_path).returncode == 0
    notebook = json.loads((tmp_path / "shop" / "notebooks" / "Endpoints.ipynb").read_text())
    assert (notebook["nbformat"], notebook["nbformat_minor"]) == (4, 5)
    ids = [cell["id"] for cell in notebook["cells"]]
    assert len(set(ids)) == len(ids) and all(ids)
    code = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert "def load_greetings():" in code and "async def tell_story(" in code
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


@pytest.mark.slow
def test_the_notebook_passes_jupyters_own_validation(tmp_path):
    import nbformat

    assert peach("init", "shop", "--streaming", cwd=tmp_path).returncode == 0
    path = tmp_path / "shop" / "notebooks" / "Endpoints.ipynb"
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)  # raises on anything nbformat 4.5 does not allow
    assert nbformat.writes(notebook) == path.read_text().rstrip("\n")  # as Jupyter saves it


@pytest.mark.slow
def test_gitignore_and_readme(tmp_path):
    assert peach("init", "shop", cwd=tmp_path).returncode == 0
    ignored = (tmp_path / "shop" / ".gitignore").read_text().splitlines()
    for pattern in (".ipynb_checkpoints/", "__pycache__/", ".env", ".venv/"):
        assert pattern in ignored
    readme = (tmp_path / "shop" / "README.md").read_text()
    for command in ("peach validate", "peach dev", "peach ask /greet name=Ada lang=fr"):
        assert command in readme
    assert "/story" not in readme  # no streaming endpoint without --streaming


@pytest.mark.slow
def test_existing_files_are_never_overwritten_without_force(tmp_path):
    project = tmp_path / "shop"
    project.mkdir()
    (project / "README.md").write_text("mine\n")
    refused = peach("init", cwd=project)
    assert refused.returncode == 1
    assert "already has README.md: nothing was written" in refused.stderr
    assert "--force" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert sorted(p.name for p in project.iterdir()) == ["README.md"]
    assert (project / "README.md").read_text() == "mine\n"

    (project / "data.csv").write_text("a,b\n")
    forced = peach("init", "--force", cwd=project)
    assert forced.returncode == 0, forced.stderr
    assert "README.md (overwritten)" in forced.stdout
    assert "peach dev" in (project / "README.md").read_text()
    assert (project / "data.csv").read_text() == "a,b\n"  # not one of init's files
    assert "cd " not in forced.stdout  # already in the folder


@pytest.mark.slow
def test_another_conf_in_the_folder_is_refused_even_with_force(tmp_path):
    (tmp_path / "peach.conf").mkdir()
    result = peach("init", ".", "--force", cwd=tmp_path)
    assert result.returncode == 1
    assert "peach.conf" in result.stderr and not (tmp_path / "peach.yaml").exists()


@pytest.mark.slow
def test_codops_is_the_folder_name_made_valid(tmp_path):
    result = peach("init", "My Shop (2024)", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "codops: my-shop-2024\n" in (tmp_path / "My Shop (2024)" / "peach.yaml").read_text()
    assert "cd 'My Shop (2024)'" in result.stdout
    assert peach("validate", "My Shop (2024)", cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_a_folder_name_with_nothing_usable_asks_for_codops(tmp_path):
    result = peach("init", "日本", cwd=tmp_path)
    assert result.returncode == 2
    assert "cannot make a codops from the folder name '日本'" in result.stderr
    assert "--codops NAME" in result.stderr
    assert not (tmp_path / "日本").exists()


def test_an_invalid_codops_is_a_usage_error_with_a_suggestion(tmp_path):
    result = peach("init", "shop", "--codops", "Big Shop", cwd=tmp_path)
    assert result.returncode == 2
    assert "'Big Shop' is not a valid codops" in result.stderr
    assert "--codops big-shop" in result.stderr


def test_the_help_shows_the_codops_pattern(tmp_path):
    """Rich takes ``[...]`` for markup: the pattern must be shown, not eaten."""
    result = peach("init", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "The organisation id, [a-z0-9_-]+." in result.stdout


@pytest.mark.slow
def test_a_codops_that_yaml_would_read_as_a_number_stays_a_string(tmp_path):
    result = peach("init", "shop", "--codops", "1_000", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert peach("validate", "shop", cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_a_file_in_place_of_the_folder_is_a_usage_error(tmp_path):
    (tmp_path / "shop").write_text("")
    result = peach("init", "shop", cwd=tmp_path)
    assert result.returncode == 2 and "is not a folder" in result.stderr


@pytest.mark.slow
def test_peach_dev_serves_the_new_project_at_once(tmp_path, peach_dev):
    assert peach("init", "shop", "--streaming", cwd=tmp_path).returncode == 0
    dev = peach_dev(tmp_path / "shop")
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        answer = client.get("/greet", params={"name": "Ada", "lang": "fr"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "result": {"greeting": "Bonjour, Ada!", "lang": "fr"},
            "status": "ok",
        }
        assert answer.headers["x-peach-component"] == "main"

        default = client.post("/greet", json={})
        assert default.json()["result"]["greeting"] == "Hello, world!"  # args: {name: world}

        unknown = client.get("/greet", params={"name": "Ada", "lang": "xx"})
        assert unknown.headers["x-peach-component"] == "fallback"
        assert unknown.json()["result"] == {"greeting": "Hello, Ada!", "lang": "en"}

        with client.stream(
            "GET", "/story", params={"stream": "true", "delay_s": "0.01"}
        ) as response:
            assert response.status_code == 200
            chunks = [chunk for chunk in response.iter_raw() if chunk]
        text = b"".join(chunks).decode()
        assert text.startswith("Once upon a time there was a peach.")
        assert len(chunks) > 3  # word by word
