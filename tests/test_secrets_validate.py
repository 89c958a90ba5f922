"""`peach validate` and env_vars/secrets (SPEC §10): names, merging, and the credential
warning (PC311) on planted keys, not on ordinary strings nor on the projects of this
repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from projectkit import diagnose, write_project

from peach_cli.checks.build import build_plan
from peach_cli.checks.variables import looks_like_credential

ROOT = Path(__file__).resolve().parent.parent
FAKE = "Ab3dE6gH9jK2mN5pQ8sT1vWx4yZ7"  # random-looking, not anybody's key
PLANTED = [
    f'client = OpenAI(api_key="sk-proj-{FAKE}")',
    'AWS = {"aws_access_key_id": "AKIA' + "J7QX2M4KZ9PLW3RT" + '"}',
    f'token = "ghp_{FAKE}{FAKE[:8]}"',
    'KEY = """-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"""',
    f'connect("postgres://app:{FAKE[:12]}@db.internal:5432/shop")',
    f'headers = {{"Authorization": "Bearer {FAKE}"}}',
    f'hf = "hf_{FAKE}{FAKE[:4]}"',
    f'secret = "{FAKE[:20]}"',  # short, but assigned to a name that says it is a secret
]
ORDINARY = [
    'greeting = "hello world, this is a perfectly ordinary sentence"',
    'run_id = "550e8400-e29b-41d4-a716-446655440000"',
    'digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"',
    'path = "/home/user/data/models/checkpoints/epoch_0012/weights.bin"',
    'name = "a_very_long_function_name_for_the_recommendation_pipeline_v2"',
    'url = "https://api.example.com/v1/recommendations?size=10&page=2"',
    'api_key = os.environ["OPENAI_API_KEY"]',
    'api_key = "your-api-key-here"',
    'placeholder = "sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"',
    'token = ""',
    'css = "font-family: Helvetica, Arial, sans-serif; font-size: 12px"',
    'model = "sentence-transformers/all-MiniLM-L6-v2"',
    'SECRET_NAME = "OPENAI_API_KEY"',
]


def notebook_project(tmp_path: Path, lines: list[str]) -> Path:
    cells = ["import os\n\n\ndef ask():\n    return 1\n", *(line + "\n" for line in lines)]
    conf = (
        "codops: shop\nendpoints:\n  e:\n    url: /e\n    components:\n"
        "      main: {notebook: nb.ipynb, method: ask, full_notebook: true}\n"
    )
    return write_project(tmp_path, conf, {"nb.ipynb": cells})


def test_planted_credentials_are_each_warned_about_at_their_cell(tmp_path):
    found = [d for d in diagnose(notebook_project(tmp_path, PLANTED)) if d.code == "PC311"]
    cells = sorted(d.position.cell for d in found)
    assert cells == list(range(2, 2 + len(PLANTED))), [str(d) for d in found]
    assert all(d.severity == "warning" and "secrets:" in (d.hint or "") for d in found)
    messages = " ".join(d.message for d in found)
    for what in (
        "API key (sk-…)",
        "AWS access key",
        "GitHub token",
        "private key",
        "password",
        "bearer token",
    ):
        assert what in messages


def test_ordinary_strings_are_not_credentials(tmp_path):
    found = [d for d in diagnose(notebook_project(tmp_path, ORDINARY)) if d.code == "PC311"]
    assert found == [], [str(d) for d in found]


def test_a_credential_in_a_conf_value_is_warned_about_at_its_line(tmp_path):
    conf = (
        "codops: shop\n"
        f"env_vars: {{LOG_LEVEL: info, OPENAI_API_KEY: sk-{FAKE}}}\n"
        "endpoints:\n  e:\n    url: /e\n    components:\n"
        f"      main: {{notebook: nb.ipynb, method: ask, args: {{token: {FAKE}}}}}\n"
    )
    write_project(tmp_path, conf, {"nb.ipynb": ["def ask(token=''):\n    return 1\n"]})
    found = {(d.position.line, d.message) for d in diagnose(tmp_path) if d.code == "PC311"}
    assert found == {
        (2, "env_vars.OPENAI_API_KEY looks like an API key (sk-…)"),
        (7, "endpoints.e.components.main.args.token looks like a secret (token)"),
    }


def test_no_project_of_this_repository_has_a_credential_warning():
    projects = [p.parent for p in (ROOT / "examples").glob("*/peach.yaml")]
    projects += [p.parent for p in (ROOT / "tests" / "projects").glob("*/peach.yaml")]
    assert len(projects) > 10
    warned = {str(d) for project in projects for d in diagnose(project) if d.code == "PC311"}
    assert warned == set()


@pytest.mark.parametrize("value", ["sk-ant-" + FAKE, "AKIA" + "J7QX2M4KZ9PLW3RT", FAKE + FAKE])
def test_looks_like_credential(value):
    assert looks_like_credential(value) is not None


def test_env_vars_and_secrets_merge_with_the_top_level(tmp_path):
    conf = (
        "codops: shop\nenv_vars: {LOG_LEVEL: info, MODEL: small}\nsecrets: [SHARED]\n"
        "endpoints:\n  e:\n    url: /e\n    components:\n"
        "      main: {notebook: nb.ipynb, method: ask, env_vars: {MODEL: large}, "
        "secrets: [OWN, SHARED]}\n"
        "tasks:\n  t: {notebook: nb.ipynb, method: ask, secrets: [TASK]}\n"
    )
    write_project(tmp_path, conf, {"nb.ipynb": ["def ask():\n    return 1\n"]})
    plan, diagnostics = build_plan(tmp_path)
    assert plan is not None, [str(d) for d in diagnostics]
    component = plan.endpoints["e"].components["main"]
    assert component.env_vars == {"LOG_LEVEL": "info", "MODEL": "large"}
    assert component.secrets == ("SHARED", "OWN")
    assert plan.tasks["t"].env_vars == {"LOG_LEVEL": "info", "MODEL": "small"}
    assert plan.tasks["t"].secrets == ("SHARED", "TASK")


def test_env_vars_of_two_conf_files_merge_and_a_conflict_is_reported(tmp_path):
    write_project(
        tmp_path,
        None,
        {"nb.ipynb": ["def ask():\n    return 1\n"]},
        {
            "peach.conf/a.yaml": "codops: shop\nenv_vars: {A: '1'}\nsecrets: [S1]\n"
            "endpoints:\n  e:\n    url: /e\n    components:\n"
            "      main: {notebook: nb.ipynb, method: ask}\n",
            "peach.conf/b.yaml": "env_vars: {B: '2'}\nsecrets: [S2]\n",
        },
    )
    plan, diagnostics = build_plan(tmp_path)
    assert plan is not None, [str(d) for d in diagnostics]
    component = plan.endpoints["e"].components["main"]
    assert component.env_vars == {"A": "1", "B": "2"}
    assert component.secrets == ("S1", "S2")
    (tmp_path / "peach.conf" / "b.yaml").write_text("env_vars: {A: '3'}\n")
    found = [d for d in diagnose(tmp_path) if d.code == "PC110"]
    assert [str(d.position) for d in found] == ["peach.conf/b.yaml:1:12"]
    assert "env_vars 'A' is set twice" in found[0].message


def test_a_number_in_env_vars_is_refused_with_its_path(tmp_path):
    conf = (
        "codops: shop\nenv_vars: {WORKERS: 4}\nendpoints:\n  e:\n    url: /e\n"
        "    components:\n      main: {notebook: nb.ipynb, method: ask}\n"
    )
    write_project(tmp_path, conf, {"nb.ipynb": ["def ask():\n    return 1\n"]})
    found = [d for d in diagnose(tmp_path) if d.code == "PC103"]
    assert [d.message for d in found] == [
        "invalid env_vars.WORKERS: input should be a valid string"
    ]


def test_the_reload_watcher_sees_dotenv_though_it_hides_other_dot_files(tmp_path):
    from watchfiles import Change

    from simulator.watch import ProjectFilter

    watch = ProjectFilter(tmp_path, conf_files=["peach.yaml"])
    assert watch(Change.modified, str(tmp_path / ".env"))
    assert not watch(Change.modified, str(tmp_path / ".env.local"))
    assert not watch(Change.modified, str(tmp_path / "sub" / ".env"))


def test_a_secret_value_is_masked_in_the_forms_a_server_echoes_it_in():
    import base64
    import json
    from urllib.parse import quote

    from peach_cli.boundary import mask

    value = 'p@ss/w"rd+1'
    text = " ".join(
        [value, json.dumps(value), quote(value, safe=""), base64.b64encode(value.encode()).decode()]
    )
    assert value not in mask(text, [value]) and "cEBzcy93InJkKzE" not in mask(text, [value])
    assert mask(text, [value]).count("***") == 4
