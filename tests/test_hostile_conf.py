"""Hostile projects (issue 20): requirement strings, names, urls and links that leave the
project are refused by every command, before anything is built or uploaded; nothing outside
the project is shown or uploaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from cli_support import run_peach
from projectkit import write_project

NOTEBOOK = {"nb.ipynb": ['def ask(q: str = ""):\n    return [q]\n']}


def conf(dependencies: list[str], endpoint: str = "ep", url: str = "/ep") -> str:
    return json.dumps(
        {
            "codops": "shop",
            "py_environments": {"base": {"dependencies": dependencies}},
            "endpoints": {
                endpoint: {
                    "url": url,
                    "components": {"main": {"notebook": "nb.ipynb", "method": "ask"}},
                }
            },
            "tasks": {"t": {"notebook": "nb.ipynb", "method": "ask"}},
        },
        indent=1,
    )


REFUSED = [
    "requests\n--index-url http://127.0.0.1:9/simple",
    "--index-url http://127.0.0.1:9/simple",
    "-e file:///etc",
    "-r /etc/passwd",
    "uvicorn[standard>=0.29",
    "numpy=1.26",
    "pkg @ file:///etc",
    "./local/pkg",
]


@pytest.mark.slow
@pytest.mark.parametrize("text", REFUSED)
def test_a_requirement_that_is_not_pep_508_is_an_error_at_its_line(tmp_path, text):
    project = write_project(tmp_path / "p", conf(["orjson", text]), NOTEBOOK)
    result = run_peach("validate", str(project))
    assert result.returncode == 1, result.stdout
    line = next(i for i, t in enumerate(conf(["orjson", text]).splitlines(), 1) if "orjson" in t)
    assert f"peach.yaml:{line + 1}:" in result.stdout and "error PC120" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
def test_url_requirements_stay_allowed(tmp_path):
    allowed = [
        "numpy>=1.24",
        "scikit-learn==1.5.*",
        'pkg[extra]; python_version>="3.10"',
        "pkg @ https://example.com/pkg-1.0-py3-none-any.whl",
        "pkg @ git+https://github.com/example/pkg",
        "git+https://github.com/example/pkg",
    ]
    project = write_project(tmp_path / "p", conf(allowed), NOTEBOOK)
    result = run_peach("validate", str(project))
    assert "PC120" not in result.stdout, result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["env", "build", "{p}"],
        ["deploy", "{p}", "--dry-run"],
        ["task", "run", "t", "{p}"],
        ["dev", "{p}", "--port", "0", "--no-reload"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_every_command_refuses_a_bad_requirement_before_building(tmp_path, command):
    project = write_project(tmp_path / "p", conf(["requests\n--index-url http://x/"]), NOTEBOOK)
    result = run_peach(*(a.format(p=project) for a in command))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error PC120" in result.stdout + result.stderr
    assert "runtime_env" not in result.stdout and "building" not in result.stdout.lower()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("endpoint", "url", "code"),
    [
        ("ep\nforged", "/ep", "PC121"),
        ("ok", "/a b", "PC122"),
        ("ok", "/q?x=1", "PC122"),
        ("ok", "/a/../b", "PC122"),
        ("ok", "/a%0aGET", "PC122"),
    ],
)
def test_names_and_urls_outside_the_rule_are_refused(tmp_path, endpoint, url, code):
    project = write_project(tmp_path / "p", conf(["orjson"], endpoint, url), NOTEBOOK)
    result = run_peach("validate", str(project))
    assert result.returncode == 1
    assert f"error {code}" in result.stdout, result.stdout
    assert "\nforged" not in result.stdout  # the name is shown escaped, on its line


@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["/../../etc", "/_peach", "/_peach/x", "/a b"])
def test_a_route_prefix_outside_the_url_rule_is_refused(tmp_path, prefix):
    project = write_project(tmp_path / "p", conf(["orjson"]), NOTEBOOK)
    result = run_peach("deploy", str(project), "--dry-run", "--route-prefix", prefix)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is not a route prefix" in result.stderr


SECRET_LINE = "root:TOPSECRET-hash-line:19000:0:99999:7:::"


@pytest.mark.slow
def test_a_conf_file_linked_outside_the_project_is_refused_unread(tmp_path):
    outside = tmp_path / "shadow"
    outside.write_text(f"codops: [\n{SECRET_LINE}\n")
    project = write_project(tmp_path / "p", conf(["orjson"]), NOTEBOOK)
    (project / "peach.conf").mkdir()
    os.symlink(outside, project / "peach.conf" / "extra.yaml")
    result = run_peach("validate", str(project))
    assert result.returncode == 1
    assert "peach.conf/extra.yaml" in result.stdout and "error PC006" in result.stdout
    assert "TOPSECRET" not in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("git_installed", [True, False], ids=["git", "no git on PATH"])
def test_deploy_skips_links_leaving_the_project_and_what_git_ignores(tmp_path, git_installed):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    project = write_project(repo / "apps" / "p", conf(["orjson"]), NOTEBOOK)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("server.key\n")  # a parent folder's .gitignore
    (repo / ".git" / "info" / "exclude").write_text("private.txt\n")
    for name in ("server.key", "private.txt", "data.csv"):
        (project / name).write_text(name)
    outside = tmp_path / "id_rsa"
    outside.write_text("-----BEGIN KEY----- TOPSECRET")
    os.symlink(outside, project / "id_rsa")
    os.symlink("data.csv", project / "inside.csv")  # a link inside the project is fine
    (project / ".env").write_text("TOKEN=TOPSECRET")
    os.symlink(".env", project / "settings.txt")  # but not to what is never uploaded
    (repo / "apps" / ".gitignore").write_text("*.log\n")
    (project / "debug.log").write_text("log")
    path = os.environ["PATH"] if git_installed else str(tmp_path / "empty")
    result = run_peach("deploy", str(project), "--dry-run", env={"PATH": path})
    assert result.returncode == 0, result.stderr
    listed = result.stderr
    assert "data.csv" in listed and "inside.csv" in listed
    assert "id_rsa  skipped: a link to outside the project" in listed
    assert "settings.txt  skipped: a link to a dot-file" in listed
    assert "server.key" not in listed and "private.txt" not in listed
    assert "debug.log" not in listed
    assert "TOPSECRET" not in result.stdout + result.stderr
    if not git_installed:
        return
    from peach_cli.deploy.packaging import project_files

    packaged = dict(project_files(project, ["peach.yaml"]))  # what a component's zip holds
    assert sorted(packaged) == ["data.csv", "inside.csv"]
    assert all(b"TOPSECRET" not in data for data in packaged.values())


@pytest.mark.slow
def test_a_task_cannot_send_escape_sequences_to_the_terminal(tmp_path):
    cells = {"nb.ipynb": ['def ask(payload=None):\n    print("got", payload["text"])\n']}
    project = write_project(tmp_path / "p", conf([]), cells)
    payload = json.dumps({"text": "\x1b[41mred\rover\x07"})
    result = run_peach("task", "run", "t", str(project), "--shared-env", "--payload", payload)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["t | got \\x1b[41mred\\rover\\x07"]


KEY_HEADER = "-----BEGIN OPENSSH PRIVATE KEY-----"


@pytest.mark.parametrize(
    "leaked",
    [
        f"{KEY_HEADER}\n- name: leaked case\n  url: /nowhere\n",
        f"- name: leaked case\n  url: /nowhere\n# {KEY_HEADER}\n",
        f'- name: "{KEY_HEADER}"\n  url: /ep\n- name: leaked case\n  url: /nowhere\n',
    ],
    ids=["key first", "case first", "cases only"],
)
def test_a_case_file_linked_outside_the_project_is_refused_unread(tmp_path, leaked):
    outside = tmp_path / "id_ed25519"
    outside.write_text(leaked)
    project = write_project(tmp_path / "p", conf(["orjson"]), NOTEBOOK)
    (project / "tests").mkdir()
    os.symlink(outside, project / "tests" / "keys.peach-test.yaml")
    for command in ("validate", "test"):
        result = run_peach(command, str(project))
        output = result.stdout + result.stderr
        assert result.returncode == (1 if command == "validate" else 2), output
        assert "tests/keys.peach-test.yaml" in output and "PC006" in output
        assert "is a link to a file outside the project: not read" in output
        assert "BEGIN" not in output and "leaked case" not in output and "nowhere" not in output
