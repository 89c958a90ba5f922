"""Environment variables and secrets (SPEC §10) under `peach dev` and `peach task run`.

Replicas and tasks get a minimal environment, their env_vars and their secrets (from the
environment, else the project's `.env`) and nothing else; a missing secret makes exactly
its users unhealthy; a `.env` edit restarts exactly the components reading the changed
names; `--inherit-env` turns the minimal environment off and says so. Real `peach`
processes, real HTTP on loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cli_support import run_peach

from simulator.worker_env import KEPT

PROJECT = Path(__file__).resolve().parent / "projects" / "secrets"
SHELL = {
    "OTHER_KEY": "other-from-the-shell",
    "UNDECLARED_VAR": "not-for-replicas",
    "RAY_AUTH_TOKEN": "ray-token-never-passed",
}
MISSING = "secret NEEDY_KEY is not set: export it or add it to .env"
PEACH_OWN = {
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "VIRTUAL_ENV",
    "PEACH_TASKS_SOCKET",
    "PEACH_DEBUG_SKIPPED",  # why breakpoint() does nothing there (no terminal, SPEC §7)
}
"""What peach adds for the worker itself: the runtime's path, its env, the trigger socket."""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of tests/projects/secrets with a `.env`, and the shell variables of SHELL."""
    copy = tmp_path / "secrets"
    shutil.copytree(PROJECT, copy)
    (copy / ".env").write_text(
        "# the project's secrets\nREADER_KEY=reader-from-dotenv\n"
        "OTHER_KEY=other-from-dotenv\nTASK_KEY='task secret'\n"
    )
    for name, value in SHELL.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NEEDY_KEY", raising=False)
    return copy


def environment_of(client: httpx.Client, url: str) -> dict:
    response = client.get(url)
    assert response.status_code == 200, response.text
    return response.json()["result"]


def assert_minimal(names: list[str], declared: set[str]) -> None:
    extra = {n for n in names if n not in KEPT and not n.startswith("LC_")}
    assert extra <= declared | PEACH_OWN, extra - declared - PEACH_OWN


def test_replicas_see_their_env_vars_and_secrets_and_nothing_undeclared(peach_dev, project):
    dev = peach_dev(project)  # isolated envs, as by default
    dev.wait_ready()
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        reader = environment_of(client, "/reader")
        other = environment_of(client, "/other")
        plain = environment_of(client, "/plain")
        needy = client.get("/needy")
    assert reader["seen"] == {
        "LOG_LEVEL": "info",  # the top level's
        "MODEL": "small",  # its own
        "READER_KEY": "reader-from-dotenv",  # its secret, from .env
        "OTHER_KEY": None,  # another component's secret
        "NEEDY_KEY": None,
        "TASK_MODE": None,
        "TASK_KEY": None,
        "UNDECLARED_VAR": None,  # in peach's environment, declared nowhere
        "RAY_AUTH_TOKEN": None,
    }
    assert_minimal(reader["names"], {"LOG_LEVEL", "MODEL", "READER_KEY"})
    assert other["seen"]["OTHER_KEY"] == "other-from-the-shell"  # the environment wins
    assert other["seen"]["READER_KEY"] is None and other["seen"]["MODEL"] is None
    assert_minimal(other["names"], {"LOG_LEVEL", "OTHER_KEY"})
    assert plain["seen"] == {**dict.fromkeys(plain["seen"]), "LOG_LEVEL": "info"}
    # exactly the component whose secret is set nowhere is unhealthy, with the message
    assert needy.status_code == 503
    assert MISSING in needy.json()["error"]["message"]
    assert f"needy/main#1 unhealthy: {MISSING}" in dev.output()
    health = httpx.get(f"{dev.url}/_peach/health", timeout=10).json()
    states = {c["component"]: [r["state"] for r in c["replicas"]] for c in health["components"]}
    assert states == {
        "reader/main": ["healthy"],
        "other/main": ["healthy"],
        "plain/main": ["healthy"],
        "needy/main": ["unhealthy"],
    }
    for value in ("reader-from-dotenv", "other-from-the-shell", "ray-token-never-passed"):
        assert value not in dev.output()


@pytest.mark.slow
def test_a_dotenv_edit_restarts_only_the_components_reading_the_changed_names(peach_dev, project):
    dev = peach_dev(project, "--shared-env", reload=True)
    dev.wait_ready()
    dev.wait_for_output(r"watching")
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        before = {url: environment_of(client, url) for url in ("/reader", "/other", "/plain")}
        assert client.get("/needy").status_code == 503
        time.sleep(1.1)  # spares are kept a moment after the replicas are up; not a sync
        (project / ".env").write_text(
            "READER_KEY=reader-rotated\nOTHER_KEY=other-from-dotenv\n"
            "TASK_KEY='task secret'\nNEEDY_KEY=now-set\n"
        )
        deadline = time.monotonic() + 30
        while environment_of(client, "/reader")["seen"]["READER_KEY"] != "reader-rotated":
            assert time.monotonic() < deadline, dev.output()
            time.sleep(0.1)
        after = {url: environment_of(client, url) for url in ("/reader", "/other", "/plain")}
        needy = client.get("/needy")
    assert needy.status_code == 200, needy.text  # its secret is set now: restarted, healthy
    assert needy.json()["result"]["seen"]["NEEDY_KEY"] == "now-set"
    assert after["/reader"]["pid"] != before["/reader"]["pid"]
    assert after["/reader"]["seen"]["OTHER_KEY"] is None  # a spare carries nobody's secret
    assert after["/reader"]["seen"]["NEEDY_KEY"] is None
    # OTHER_KEY's value comes from the shell, unchanged: no restart; nor for plain
    assert after["/other"]["pid"] == before["/other"]["pid"]
    assert after["/plain"]["pid"] == before["/plain"]["pid"]
    assert re.search(r"secret READER_KEY", dev.output()), dev.output()
    assert "reader-rotated" not in dev.output() and "now-set" not in dev.output()


@pytest.mark.slow
def test_an_env_vars_edit_restarts_only_its_users(peach_dev, project):
    dev = peach_dev(project, "--shared-env", reload=True)
    dev.wait_ready()
    dev.wait_for_output(r"watching")
    conf = project / "peach.yaml"
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        before = {url: environment_of(client, url) for url in ("/reader", "/other")}
        conf.write_text(conf.read_text().replace("MODEL: small", "MODEL: large"))
        deadline = time.monotonic() + 30
        while environment_of(client, "/reader")["seen"]["MODEL"] != "large":
            assert time.monotonic() < deadline, dev.output()
            time.sleep(0.1)
        assert environment_of(client, "/other")["pid"] == before["/other"]["pid"]
    assert "env_vars" in dev.output()


@pytest.mark.slow
def test_inherit_env_gives_the_whole_environment_and_says_so(peach_dev, project):
    dev = peach_dev(project, "--shared-env", "--inherit-env")
    dev.wait_ready()
    with httpx.Client(base_url=dev.url, timeout=30) as client:
        plain = environment_of(client, "/plain")
    assert plain["seen"]["UNDECLARED_VAR"] == "not-for-replicas"
    assert "--inherit-env: replicas and tasks get peach's whole environment" in dev.output()


def task_line(stdout: str, kind: str):
    return json.loads(re.search(rf"^show \| {kind} (.*)$", stdout, re.MULTILINE).group(1))


def task_env(stdout: str) -> tuple[dict, list[str]]:
    return task_line(stdout, "env"), task_line(stdout, "names")


@pytest.mark.slow
def test_a_task_sees_its_env_vars_and_secrets_and_nothing_undeclared(project):
    result = run_peach("task", "run", "show", str(project))
    assert result.returncode == 0, result.stderr
    seen, names = task_env(result.stdout)
    assert seen == {
        "LOG_LEVEL": "info",
        "MODEL": None,
        "READER_KEY": None,
        "OTHER_KEY": None,
        "NEEDY_KEY": None,
        "TASK_MODE": "nightly",
        "TASK_KEY": "***",  # what it printed of its secret: peach masks the value
        "UNDECLARED_VAR": None,
        "RAY_AUTH_TOKEN": None,
    }
    # the value it got: from .env, quotes removed as dotenv does
    digest = hashlib.sha256(b"task secret").hexdigest()
    assert task_line(result.stdout, "digests")["TASK_KEY"] == digest
    assert_minimal(names, {"LOG_LEVEL", "TASK_MODE", "TASK_KEY"})


@pytest.mark.slow
def test_a_task_whose_secret_is_missing_fails_with_the_message(project):
    result = run_peach("task", "run", "needy_task", str(project))
    assert result.returncode == 1
    assert MISSING in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.slow
def test_task_run_inherit_env(project):
    result = run_peach("task", "run", "show", str(project), "--inherit-env")
    assert result.returncode == 0, result.stderr
    assert task_env(result.stdout)[0]["UNDECLARED_VAR"] == "not-for-replicas"
    assert "--inherit-env: the task gets peach's whole environment" in result.stderr


@pytest.mark.slow
def test_doctor_lists_missing_secrets_and_who_needs_them(project):
    result = run_peach("doctor", str(project), "--format", "json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["secrets"]["status"] == "warn"
    assert checks["secrets"]["details"]["missing"] == {
        "NEEDY_KEY": ["needy/main", "task needy_task"]
    }
    assert checks["secrets"]["summary"] == (
        "secret NEEDY_KEY (needed by needy/main, task needy_task) is not set: "
        "export it or add it to .env"
    )
    (project / ".env").write_text("READER_KEY=r\nTASK_KEY=t\nNEEDY_KEY=n\n")
    result = run_peach("doctor", str(project), "--format", "json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["secrets"]["status"] == "ok"
    assert "r" not in checks["secrets"]["summary"].split()  # names, never values


@pytest.mark.slow
def test_init_ignores_dotenv_and_its_readme_mentions_secrets(tmp_path):
    assert run_peach("init", "shop", cwd=tmp_path).returncode == 0
    shop = tmp_path / "shop"
    assert "secrets:" in (shop / "README.md").read_text()
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    subprocess.run([git, "init", "-q"], cwd=shop, check=True)
    (shop / ".env").write_text("OPENAI_API_KEY=x\n")
    (shop / ".env.example").write_text("OPENAI_API_KEY=\n")
    ignored = subprocess.run(
        [git, "check-ignore", ".env", ".env.local", ".env.example"],
        cwd=shop,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == [".env", ".env.local"]


class FakeChatAPI:
    """A chat-completions API on loopback that answers and records the keys it was sent."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.keys: list[str] = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.keys.append(self.headers.get("Authorization", ""))
                question = body["messages"][0]["content"]
                answer = {
                    "model": body["model"],
                    "choices": [{"message": {"content": f"A: {question}"}}],
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_the_assistant_example_reads_its_key_through_secrets(peach_dev, tmp_path, monkeypatch):
    example = Path(__file__).resolve().parent.parent / "examples" / "assistant"
    project = Path(shutil.copytree(example, tmp_path / "assistant"))
    api = FakeChatAPI()
    try:
        conf = project / "peach.yaml"
        conf.write_text(conf.read_text().replace("https://api.openai.com/v1", api.url))
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        # without the key: /llm says what to do, the rest of the example serves
        dev = peach_dev(project, "--shared-env")
        dev.wait_ready()
        with httpx.Client(base_url=dev.url, timeout=30) as client:
            missing = client.get("/llm", params={"query": "hi"})
            assert missing.status_code == 503
            assert (
                "secret OPENAI_API_KEY is not set: export it or add it to .env"
                in (missing.json()["error"]["message"])
            )
            assert client.get("/facts", params={"query": "stone fruit"}).status_code == 200
        dev.stop()
        (project / ".env").write_text("OPENAI_API_KEY=sk-test-from-dotenv\n")
        dev = peach_dev(project, "--shared-env")
        dev.wait_ready()
        with httpx.Client(base_url=dev.url, timeout=30) as client:
            answer = client.get("/llm", params={"query": "where do peaches come from"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"] == {
            "answer": "A: where do peaches come from",
            "model": "gpt-4o-mini",
        }
        assert api.keys == ["Bearer sk-test-from-dotenv"]
    finally:
        api.close()


BROKEN_DOTENV = {  # what .env holds → what is said of it
    b"# the project's secrets\nREADER_KEY=reader-from-dotenv\n\n"
    b"TASK_KEY task-secret-value\nOTHER_KEY=other-from-dotenv\n": ".env:4: not a NAME=value line"
    " (dotenv syntax): no secret is read from .env until it is fixed",
    b"# the project's secrets\nREADER_KEY=reader-from-dotenv\n\n"
    b"TASK_KEY=task-secret-\xff-value\nOTHER_KEY=other-from-dotenv\n": ".env:4: not UTF-8 text:"
    " no secret is read from .env until it is fixed",
    b"TASK_KEY=task-secret-value\n": ".env is 64.0 MiB, over the 1 MiB a .env may hold: not read",
}
DOTENV_COMMANDS = {
    "doctor": (["doctor"], 1),
    "dev": (["dev", "--port", "0", "--no-reload"], 1),
    "test": (["test"], 2),
    "task run": (["task", "run", "show"], 1),
    "deploy": (["deploy", "--dry-run"], 1),
}


@pytest.mark.parametrize("command", DOTENV_COMMANDS)
@pytest.mark.parametrize(
    "content", BROKEN_DOTENV, ids=["malformed line", "not UTF-8", "over 1 MiB"]
)
def test_a_broken_dotenv_is_one_line_naming_it_on_every_command(project, content, command):
    dotenv = project / ".env"
    dotenv.write_bytes(content)
    if len(content) < 40:
        os.truncate(dotenv, 64 * 1024 * 1024)  # sparse: refused before it is read
    args, code = DOTENV_COMMANDS[command]
    result = run_peach(*args, str(project))
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert f"{project}/{BROKEN_DOTENV[content]}" in output
    assert "Traceback" not in output and "task-secret" not in output
    if command == "doctor":
        assert f"✗ secrets    {project}/{BROKEN_DOTENV[content]}" in output
