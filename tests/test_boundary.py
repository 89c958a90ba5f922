"""Every output channel passes the one output boundary (SPEC §6 "One output boundary").

A project whose `.env` holds a one-line secret and a multi-line one (a key block) answers,
fails, crashes and prints with them; each channel of ``peach_cli.boundary.CHANNELS`` gets a
probe that drives it for real where a laptop can (`peach dev` piped and on a pseudo-terminal,
`peach test` in its three formats, the pytest plugin, `--record`, `replay`, `bench`, `profile`,
`validate`, `deploy --dry-run`) and renders the views of cluster-only channels with the same
planted text. No probe's output may hold a secret, in clear or base64, or a raw escape
sequence or forged line from data. A channel registered without a probe fails here.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pytest
from cli_support import run_peach
from projectkit import notebook_json, write_project

from peach_cli.boundary import CHANNELS

SECRET = 'hunter2 "c0ffee"/5ca1+ab1e~~~'
"""A space, quotes, a slash, a plus and tildes (``~~~`` puts a ``+`` in its base64): each
encoding below writes it differently."""
MARK = "c0ffee"
"""A piece of the secret every text form keeps: seen anywhere, the secret leaked."""
KEY_LINES = ("MIIBOgIBAAJBAKj34GkxFhD9", "0UGmQ7hUiBX2P1hiC2sd4EU")
KEY = "-----BEGIN TEST KEY-----\n" + "\n".join(KEY_LINES) + "\n-----END TEST KEY-----"
ESCAPE = "\x1b[2J"
FORGED = "\nGET /forged 200"
"""A line break from data must never start a line of its own."""

FORMS_CODE = '''def forms(key):
    """The secret as clients and servers write it (SPEC §10): base64 after other bytes
    (standard and URL-safe), percent-encoded in lower case and with + for a space, JSON
    escaped twice and three times."""
    import base64, json, re, urllib.parse
    raw = key.encode()
    return {
        "basic": "Basic " + base64.b64encode(b"user:" + raw).decode(),
        "shifted": base64.b64encode(b"u" + raw + b"!").decode(),
        "urlsafe": base64.urlsafe_b64encode(b"?" + raw + b"?").decode(),
        "lower": re.sub("%..", lambda m: m[0].lower(), urllib.parse.quote(key, safe="")),
        "plus": urllib.parse.quote_plus(key),
        "json2": json.dumps(json.dumps(key)),
        "json3": json.dumps(json.dumps(json.dumps(key))),
    }
'''
_scope: dict = {}
exec(FORMS_CODE, _scope)
FORMS: dict[str, str] = _scope["forms"](SECRET)
PLANTED = " ".join(FORMS.values())
"""Every form of the secret in one text, planted in every channel."""


def _base64_core(prefix: bytes, encoded: str) -> str:
    """The characters of ``encoded`` (base64 of ``prefix`` + the secret + more) that encode
    the secret's bytes alone."""
    start = -(-8 * len(prefix) // 6)
    end = 8 * (len(prefix) + len(SECRET.encode())) // 6
    return encoded[start:end]


CORES = {
    "basic": _base64_core(b"user:", FORMS["basic"].removeprefix("Basic ")),
    "shifted": _base64_core(b"u", FORMS["shifted"]),
    "urlsafe": _base64_core(b"?", FORMS["urlsafe"]),
    "aligned": base64.b64encode(SECRET.encode()).decode().rstrip("="),
}

CONF = """codops: leaky
secrets: [API_KEY, PEM_KEY]
endpoints:
  leak:
    url: /leak
    components:
      main: {notebook: notebooks/Leak.ipynb, method: leak}
  crash:
    url: /crash
    components:
      main: {notebook: notebooks/Leak.ipynb, method: crash}
  shout:
    url: /shout
    components:
      main: {notebook: notebooks/Leak.ipynb, method: shout}
  tell:
    url: /tell
    components:
      main: {notebook: notebooks/Leak.ipynb, method: tell}
"""
CELLS = [
    FORMS_CODE  # cell 1
    + "import time\n"
    "def spin():\n"
    "    until = time.perf_counter() + 0.002\n"
    "    while time.perf_counter() < until:\n"
    "        pass\n"
    "def leak():\n"
    "    import base64, os, types\n"
    '    key = os.environ["API_KEY"]\n'
    "    for name in [key, *forms(key).values()]:  # frames named after the secret\n"
    "        code = spin.__code__.replace(co_name=name, co_qualname=name)\n"
    "        types.FunctionType(code, globals())()\n"
    '    return {"key": key, "b64": base64.b64encode(key.encode()).decode(), **forms(key)}\n',
    FORMS_CODE  # cell 2
    + "def crash():\n"
    "    import os\n"
    '    key = os.environ["API_KEY"]\n'
    '    forged = "\\x1b[2J\\nGET /forged 200 main"\n'
    '    raise RuntimeError("failed with key " + key + " " + " ".join(forms(key).values()) + forged)\n',
    FORMS_CODE  # cell 3
    + "def shout():\n"
    "    import os\n"
    '    print("the key is", os.environ["PEM_KEY"], flush=True)\n'
    '    print("api", os.environ["API_KEY"], "\\x1b]0;pwned\\x07", flush=True)\n'
    '    print("forms", *forms(os.environ["API_KEY"]).values(), flush=True)\n'
    '    return "shouted"\n',
    "def tell():\n"  # cell 4
    f'    """Tells {json.dumps(SECRET + " " + PLANTED)[1:-1]} {ESCAPE!r}{FORGED!r}."""\n'
    '    yield "told \\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \\x1b[2J"\n'
    '    yield "\\r\\x9b31m and on\\n"  # its own line breaks are the stream\'s\n',
]
CASES = f"""- name: leaks its key
  url: /leak
  expect:
    result: {{key: not-the-key}}
- name: {json.dumps("named " + SECRET + " " + PLANTED + ESCAPE)}
  url: /leak
  expect:
    status: 500
"""


def leaks(text: str) -> list[str]:
    """What of the planted secrets and escapes ``text`` shows."""
    found = []
    for name, value in {"the secret": MARK, **CORES, **dict(enumerate(KEY_LINES))}.items():
        if value in text:
            found.append(f"{name}: {value}")
    if "\x1b[2J" in text or "\x1b]0;" in text or "\x9b" in text:  # not Rich's own styles
        found.append("a raw escape sequence")
    if re.search(r"^GET /?forged", text, re.MULTILINE):
        found.append("a forged line")
    return found


def test_the_planted_forms_are_the_hostile_ones() -> None:
    """Each form differs from those masked before (the secret as is, JSON-escaped once,
    upper-case percent-encoding, base64 from the secret's first byte)."""
    from urllib.parse import quote

    old = [SECRET, json.dumps(SECRET)[1:-1], quote(SECRET, safe=""), quote(SECRET)]
    old.append(base64.b64encode(SECRET.encode()).decode().rstrip("="))
    for name, form in FORMS.items():
        assert not any(o in form for o in old), name
    assert "-" in CORES["urlsafe"] or "_" in CORES["urlsafe"]  # not standard base64
    assert all(len(core) >= 20 for core in CORES.values())


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_project(
        tmp_path_factory.mktemp("boundary") / "leaky",
        CONF,
        {"notebooks/Leak.ipynb": CELLS},
        {
            ".env": f"API_KEY='{SECRET}'\nPEM_KEY=\"{KEY}\"\n",
            "tests/leak.peach-test.yaml": CASES,
        },
    )
    return root


@pytest.fixture(scope="module")
def dev(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """`peach dev --record` on the project, piped (log lines), its answers to every probe."""
    from tests.conftest import start_peach_dev

    folder = tmp_path_factory.mktemp("boundary-dev")
    record = folder / "record.jsonl"
    dev = start_peach_dev(project, folder / "dev.log", "--record", str(record))
    dev.record = record  # type: ignore[attr-defined]
    try:
        dev.wait_ready()
        with httpx.Client(base_url=dev.url, timeout=30) as client:
            assert client.get("/leak").json()["result"]["key"] == SECRET  # the user's answer
            assert client.get("/crash").status_code == 500
            assert client.get("/shout").status_code == 200
            query = {"token": SECRET, **FORMS}
            assert client.get("/leak", params=query, headers={"X-Note": "a"}).status_code == 200
            lower, plus = FORMS["lower"], FORMS["plus"]
            assert client.get(f"/leak?lower={lower}&plus={plus}").status_code == 200
        dev.wait_for_output(r"GET /shout 200")
        dev.wait_for_output(r"api \*\*\*")
        dev.wait_for_output(r"forms Basic ")
        yield dev
    finally:
        dev.stop()


# -- the probes: each returns what its channel wrote ------------------------------------------


def probe_terminal(project: Path, dev, tmp_path: Path) -> str:
    """An error a command prints with the line it is about: a case file whose unknown key
    holds the secret (the excerpt would show it)."""
    cases = tmp_path / "bad.peach-test.yaml"
    lines = []
    for index, planted in enumerate([SECRET, *FORMS.values()]):  # a line each: each shown
        methd = json.dumps(planted)[:-1] + '\\e[2J"'
        lines.append(f"- name: x{index}\n  url: /leak\n  methd: {methd}\n")
    cases.write_text("".join(lines))
    done = run_peach("test", str(project), str(cases), "--url", dev.url, cwd=project)
    assert done.returncode == 2, done.stdout + done.stderr
    assert 'methd: "***' in done.stdout + done.stderr  # the line was shown, masked
    return done.stdout + done.stderr


def probe_live_view(project: Path, dev, tmp_path: Path) -> str:
    """The live table on a terminal: a replica row's last error (the crash's message)."""
    from peach_cli.boundary import Output, Secrets
    from peach_cli.checks.build import build_plan
    from peach_cli.views.dev import DevView
    from simulator.events import ReplicaChanged, ReplicaState, RequestLogged

    output = Output(Secrets([SECRET, KEY]))  # what peach dev's run knows of the project
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    out = tmp_path / "live.txt"
    with out.open("w") as file:
        console = output.new_console("live-view", file, force_terminal=True, width=100, height=30)
        view = DevView(console, live=True)
        view.set_plan(plan)
        view.handle(
            ReplicaChanged("crash/main", "crash/main#1", ReplicaState.HEALTHY, pid=os.getpid())
        )
        error = f"method_error: failed with key {SECRET} {PLANTED}{ESCAPE}{FORGED}"
        view.handle(
            RequestLogged(
                "GET", f"/crash?k={SECRET}{ESCAPE}", 500, "crash", "main", "crash/main#1", 0.01,
                error=error,
            )
        )  # fmt: skip
        view.handle(
            ReplicaChanged("crash/main", "crash/main#1", ReplicaState.UNHEALTHY, error=error)
        )
        view.flush()
        console.print(view.render(30))
    text = out.read_text()
    assert "crash/main" in text or "#1" in text, text
    return text


def probe_log_lines(project: Path, dev, tmp_path: Path) -> str:
    """`peach dev`'s piped lines: requests, the crash's traceback, the multi-line print."""
    output = dev.output()
    assert "the key is" in output and "shouted" not in output.split("the key is")[0][-1:]
    return output


def probe_pdb(project: Path, dev, tmp_path: Path) -> str:
    """`peach dev --pdb` on a terminal: the post-mortem header of the crash."""
    from tests.test_debug import Terminal

    args = ["dev", str(project), "--port", "0", "--pdb", "--no-reload"]
    terminal = Terminal(args, tmp_path / "pdb.log")
    try:
        url = terminal.serve()
        import threading

        answers: list[int] = []
        thread = threading.Thread(
            target=lambda: answers.append(httpx.get(f"{url}/crash", timeout=60).status_code)
        )
        thread.start()
        terminal.wait(r"post-mortem: crash/main#1")
        terminal.wait(r"\(Pdb\) ")
        terminal.type("c")
        thread.join(60)
        assert answers == [500]
        return terminal.dev.output()
    finally:
        terminal.close()


def _peach_test(project: Path, dev, fmt: str) -> str:
    done = run_peach("test", str(project), "--url", dev.url, "--format", fmt, cwd=project)
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout + done.stderr


def probe_test_text(project: Path, dev, tmp_path: Path) -> str:
    return _peach_test(project, dev, "text")


def probe_test_json(project: Path, dev, tmp_path: Path) -> str:
    return _peach_test(project, dev, "json")


def probe_test_junit(project: Path, dev, tmp_path: Path) -> str:
    text = _peach_test(project, dev, "junit")
    import xml.etree.ElementTree as ET

    ET.fromstring(text[: text.rindex(">") + 1])  # still XML
    return text


def probe_pytest_plugin(project: Path, dev, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--peach-url", dev.url, "-n", "0", "tests/leak.peach-test.yaml", "-rA"],
        cwd=project, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 1 and "leaks its key" in done.stdout, done.stdout + done.stderr
    return done.stdout + done.stderr


def probe_record(project: Path, dev, tmp_path: Path) -> str:
    text = dev.record.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    leak = next(line for line in lines if line["url"] == "/leak")
    assert set(leak["result"]) == {"key", "b64", *FORMS}
    assert all("***" in value for value in leak["result"].values())  # stored masked
    return text


def probe_replay(project: Path, dev, tmp_path: Path) -> str:
    """A recording whose answer differs: the diff shows the new answer, masked."""
    recording = tmp_path / "old.jsonl"
    line = {"method": "GET", "url": "/leak", "query": "", "status": 200,
            "component": "main", "result": {"key": "old"}}  # fmt: skip
    recording.write_text(json.dumps(line) + "\n")
    done = run_peach("replay", str(recording), "--url", dev.url, cwd=project)
    assert done.returncode == 1 and "differ" in done.stdout, done.stdout + done.stderr
    # the same recorded by peach dev: equal once masked
    same = run_peach("replay", str(dev.record), "--url", dev.url, "--format", "json", cwd=project)
    found = json.loads(same.stdout)
    leak = [r for r in found["requests"] if r["request"].startswith("GET /leak")]
    assert leak and all(r["outcome"] == "same" for r in leak), same.stdout
    return done.stdout + done.stderr + same.stdout + same.stderr


def probe_bench(project: Path, dev, tmp_path: Path) -> str:
    text = ""
    items = [f"k=={SECRET}", *(f"{name}=={form}" for name, form in FORMS.items())]
    for args in (["/leak", *items], ["--from", str(dev.record)]):
        done = run_peach(
            "bench", *args, "--url", dev.url, "--requests", "3", "--concurrency", "1",
            cwd=project,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        text += done.stdout + done.stderr
    return text


def probe_fuzz(project: Path, dev, tmp_path: Path) -> str:
    """The crashing endpoint's error, whose message holds the key, in text and JSON."""
    text = ""
    for fmt in ("text", "json"):
        done = run_peach(
            "fuzz", str(project), "crash", "--url", dev.url, "--seed", "1", "--format", fmt,
            cwd=project,
        )  # fmt: skip
        assert done.returncode == 1 and "RuntimeError" in done.stdout, done.stdout + done.stderr
        text += done.stdout + done.stderr
    return text


def probe_profile(project: Path, dev, tmp_path: Path) -> str:
    """The report (text and JSON), the flame graph and the speedscope file of a profile of
    an endpoint whose answers hold the secret."""
    text = ""
    for output, fmt in (("leak.svg", "text"), ("leak.json", "json")):
        done = run_peach(
            "profile", "/leak", f"k=={SECRET}", "--url", dev.url, "--duration", "1",
            "-o", str(tmp_path / output), "--format", fmt, cwd=project,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        text += done.stdout + done.stderr + (tmp_path / output).read_text()
    return text


def probe_validate(project: Path, dev, tmp_path: Path) -> str:
    """A notebook path and a method name holding an escape and a line break; a conf value
    holding the secret (warned as a credential, its line echoed)."""
    bad = tmp_path / "bad"
    shutil.copytree(project, bad)
    conf = CONF.replace("method: leak}", 'method: "le\\nak\\e[2J"}').replace(
        "notebooks/Leak.ipynb, method: crash",
        '"notebooks/Le\\e[2Jak\\nGET /forged 200.ipynb", method: crash',
    )
    notes = "".join(f"  NOTE_{name.upper()}: {json.dumps(form)}\n" for name, form in FORMS.items())
    (bad / "peach.yaml").write_text(f"{conf}env_vars:\n  NOTE: {json.dumps(SECRET)}\n{notes}")
    text = ""
    for fmt in ("text", "json"):
        done = run_peach("validate", str(bad), "--format", fmt, cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        text += done.stdout + done.stderr
    assert "\\x1b[2J" in text  # shown escaped
    assert 'NOTE_BASIC: "Basic dXNlcjp***' in text  # a conf line holding a form, echoed
    return text


def probe_openapi(project: Path, dev, tmp_path: Path) -> str:
    """The secret as an ``args`` default (a parameter's ``default``), an escape and a forged
    line in a docstring (the summary)."""
    described = tmp_path / "described"
    shutil.copytree(project, described)
    (described / "notebooks" / "Told.ipynb").write_text(
        notebook_json(
            [
                f'def told(hint: str = "x"):\n    """Tells {ESCAPE!r}{FORGED!r}."""\n    return hint\n'
            ]
        )
    )
    conf = CONF + (
        "  told:\n    url: /told\n    components:\n"
        "      main: {notebook: notebooks/Told.ipynb, method: told, "
        f"args: {{hint: {json.dumps(SECRET + ' ' + PLANTED)}}}}}\n"
    )
    (described / "peach.yaml").write_text(conf)
    text = ""
    for fmt in ("json", "yaml"):
        done = run_peach("openapi", str(described), "--format", fmt, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "/told" in done.stdout and "***" in done.stdout
        text += done.stdout + done.stderr
    return text


def probe_deploy_dry_run(project: Path, dev, tmp_path: Path) -> str:
    shipped = tmp_path / "shipped"
    shutil.copytree(project, shipped)
    (shipped / f"data{ESCAPE}\nGET forged.txt").write_text("x")
    conf = (shipped / "peach.yaml").read_text()
    (shipped / "peach.yaml").write_text(conf + f"env_vars: {{NOTE: {json.dumps(PLANTED)}}}\n")
    text = ""
    for fmt in ("json", "yaml"):
        done = run_peach("deploy", str(shipped), "--dry-run", "--format", fmt, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        text += done.stdout + done.stderr
    assert "data\\x1b[2J" in text  # the file is listed, escaped
    return text


def probe_cluster_logs(project: Path, dev, tmp_path: Path) -> str:
    """`peach logs`' lines (the dashboard's log API gives them; here the view alone)."""
    done = subprocess.run(
        [sys.executable, "-c", CLUSTER_LOG_VIEW], capture_output=True, text=True, timeout=60,
        env={**os.environ, "NO_COLOR": "1", "SECRET": SECRET, "KEY": KEY, "PLANTED": PLANTED},
    )  # fmt: skip
    assert done.returncode == 0 and "leak#1 |" in done.stdout, done.stdout + done.stderr
    return done.stdout + done.stderr


CLUSTER_LOG_VIEW = """
import os
from peach_cli.boundary import Output, Secrets
from peach_cli.deploy.logs import LogLine, ServeReplicaLog
from peach_cli.views.deploy import print_log_line
output = Output(Secrets([os.environ["SECRET"], os.environ["KEY"]]))  # the deployment's
text = "key " + os.environ["SECRET"] + " " + os.environ["KEY"].splitlines()[1] + "\\x1b[2J"
text += " " + os.environ["PLANTED"]
replica = ServeReplicaLog("leak", "1", "actor", True)
print_log_line(output, LogLine(replica, "out", text))
"""


def probe_openapi_served(project: Path, dev, tmp_path: Path) -> str:
    """``GET /_peach/openapi.json`` of `peach dev` and the document a deploy ships for the
    gateway to serve: the secret in the streaming endpoint's docstring (its description)."""
    import io
    import zipfile

    from peach_cli.checks.build import build_plan
    from peach_cli.deploy.config import build_bundle
    from peach_cli.deploy.packaging import OPENAPI_FILE

    served = httpx.get(f"{dev.url}/_peach/openapi.json", timeout=30)
    assert served.status_code == 200 and "/tell" in served.text and "***" in served.text
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    bundle = build_bundle(plan, secrets={"API_KEY": SECRET, "PEM_KEY": KEY})
    (gateway,) = [p for p in bundle.packages if p.kind == "gateway"]
    shipped = zipfile.ZipFile(io.BytesIO(gateway.data)).read(OPENAPI_FILE).decode()
    assert "/tell" in shipped and "***" in shipped
    return served.text + shipped


def probe_ask_stream(project: Path, dev, tmp_path: Path) -> str:
    """`peach ask --stream` on a terminal: a stream of escape sequences and a forged line."""
    from ask_support import Child

    child = Child(f"{dev.url}/tell", "--stream", tty=True)
    try:
        result = child.finish()
    finally:
        child.kill()
    text = result.stdout.decode("utf-8", "replace")
    assert result.code == 0 and "told \\x1b[31mred" in text, text + result.stderr
    return text + result.stderr


def _peach_main_with(command: str) -> str:
    """Run `peach openapi` through ``cli.main`` (the console script's entry point) in a
    process of its own, with ``run_openapi`` replaced by ``command``, which learns the
    secrets first (``learn``: as a command reading its project does)."""
    code = (
        "import logging, os, sys\n"
        "import peach_cli.commands.openapi as openapi\n"
        "from peach_cli import cli\n"
        "def learn(output):\n"
        "    output.secrets.hide([os.environ['SECRET'], os.environ['KEY']])\n"
        "DATA = os.environ['SECRET'] + ' ' + os.environ['PLANTED'] + '\\x1b[2J\\nGET /forged 200'\n"
        f"{command}\n"
        "sys.argv = ['peach', 'openapi', '.']\n"
        "cli.main()\n"
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "NO_COLOR": "1", "SECRET": SECRET, "KEY": KEY, "PLANTED": PLANTED},
    )  # fmt: skip
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def probe_python_logging(project: Path, dev, tmp_path: Path) -> str:
    """Records of uvicorn's and peach's loggers while a command runs (a refusal quoting a
    70 KB header, a logged exception): the handler ``cli.main`` installs at start."""
    text = _peach_main_with(
        "def logs(output, *args, **kwargs):\n"
        "    learn(output)\n"
        "    logging.getLogger('uvicorn.error').warning('Refused a request: %s.', DATA * 2000)\n"
        "    try:\n"
        "        raise ValueError(DATA)\n"
        "    except ValueError:\n"
        "        logging.getLogger('peach.reload').exception('reload failed: %s', DATA)\n"
        "    return 0\n"
        "openapi.run_openapi = logs"
    )
    assert text.startswith("exit 0") and "Refused a request: ***" in text, text
    assert len(text) < 10_000, "a 70 KB record is cut"
    return text


def probe_defect(project: Path, dev, tmp_path: Path) -> str:
    """An exception peach did not expect: one line saying where to report it."""
    text = _peach_main_with(
        "def fails(output, *args, **kwargs):\n"
        "    learn(output)\n"
        "    raise RuntimeError(DATA)\n"
        "openapi.run_openapi = fails"
    )
    assert text.startswith("exit 70") and "report it" in text, text
    assert "Traceback" not in text and "locals" not in text, text
    return text


PROBES: dict[str, Callable[..., str]] = {
    "terminal": probe_terminal,
    "live-view": probe_live_view,
    "log-lines": probe_log_lines,
    "pdb": probe_pdb,
    "test-text": probe_test_text,
    "test-json": probe_test_json,
    "test-junit": probe_test_junit,
    "pytest-plugin": probe_pytest_plugin,
    "record": probe_record,
    "replay": probe_replay,
    "bench": probe_bench,
    "fuzz": probe_fuzz,
    "profile": probe_profile,
    "validate": probe_validate,
    "deploy-dry-run": probe_deploy_dry_run,
    "openapi": probe_openapi,
    "cluster-logs": probe_cluster_logs,
    "openapi-served": probe_openapi_served,
    "ask-stream": probe_ask_stream,
    "python-logging": probe_python_logging,
    "defect": probe_defect,
}


def test_every_registered_channel_has_a_probe() -> None:
    assert sorted(PROBES) == sorted(CHANNELS)


@pytest.mark.slow
@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_no_secret_or_escape_reaches_a_channel(channel: str, project, dev, tmp_path) -> None:
    output = PROBES[channel](project, dev, tmp_path)
    assert output.strip(), f"the {channel} probe wrote nothing"
    assert leaks(output) == [], output


# -- the boundary's own rules, value by value ---------------------------------------------------


def test_every_control_character_from_data_is_escaped() -> None:
    """C0, DEL, C1 (``\\x9b`` is a one-byte CSI on some terminals) and the Unicode line and
    paragraph separators: none reaches a channel raw, in one line or in lines."""
    from peach_cli.boundary import shown, shown_lines, shown_value

    raw = "a\x1b[2Jb\x00c\x7fd\x9b31me\u2028f\u2029g\rh"
    one_line = shown(raw + "\nGET /forged")
    assert one_line == "a\\x1b[2Jb\\x00c\\x7fd\\x9b31me\\u2028f\\u2029g\\rh\\nGET /forged"
    lines = shown_lines(raw + "\n\tnext")
    assert lines.endswith("\n\tnext") and "\x9b" not in lines and "\u2028" not in lines
    assert shown_value({"k\u2028": ["\x9b"]}) == {"k\\u2028": ["\\x9b"]}


def test_a_secret_is_masked_in_every_form_and_every_place_of_a_value() -> None:
    from urllib.parse import quote

    from peach_cli.boundary import mask, mask_value

    secret = 'p@ss/w"rd+1 zz'
    forms = [
        secret,
        json.dumps(secret)[1:-1],
        quote(secret, safe=""),
        quote(secret),
        base64.b64encode(secret.encode()).decode(),
    ]
    for form in forms:
        assert mask(f"<{form}>", [secret]) == "<***>", form
    nested = {"a": [secret, {"b": (f"x{secret}y",)}], secret: 1}
    assert mask_value(nested, [secret]) == {"a": ["***", {"b": ["x***y"]}], "***": 1}
    assert mask("abc abc", ["abc"]) == "abc abc"  # under 4 characters: not a secret value


def test_a_multi_line_secret_is_masked_by_any_of_its_lines() -> None:
    from peach_cli.boundary import mask

    block = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj3\n  0UGmQ7hU  \nab\n-----END KEY-----"
    assert mask("key line MIIBOgIBAAJBAKj3 printed alone", [block]) == "key line *** printed alone"
    assert mask("0UGmQ7hU", [block]) == "***"  # stripped of its indentation
    assert mask("ab", [block]) == "ab"  # a line under 4 characters is not masked alone
    assert mask(json.dumps(block), [block]) == '"***"'


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("base64 after 1 byte", lambda s: base64.b64encode(b"u" + s.encode() + b"!").decode()),
        ("base64 after 2 bytes", lambda s: base64.b64encode(b"us" + s.encode()).decode()),
        ("Basic credentials", lambda s: base64.b64encode(f"user:{s}".encode()).decode()),
        ("URL-safe base64", lambda s: base64.urlsafe_b64encode(b"?" + s.encode()).decode()),
        ("base64 in a URL", lambda s: quote(base64.b64encode(b"user:" + s.encode()).decode())),
        ("lower-case percent-encoding", lambda s: re.sub("%..", lambda m: m[0].lower(), quote(s))),
        ("+ for a space", lambda s: quote_plus(s)),
        ("percent-encoded twice", lambda s: quote(quote(s, safe=""), safe="")),
        ("JSON-escaped twice", lambda s: json.dumps(json.dumps(s))),
        ("JSON-escaped three times", lambda s: json.dumps(json.dumps(json.dumps(s)))),
        ("JSON-escaped, then percent-encoded", lambda s: quote_plus(json.dumps(json.dumps(s)))),
        ("JSON with \\u escapes", lambda s: json.dumps(json.dumps(s + "é"))),
    ],
)
def test_a_secret_is_masked_in_the_forms_clients_and_servers_write(name, encode) -> None:
    """SPEC §6/§10: base64 at any alignment (``base64("user:" + secret)``) and URL-safe,
    percent-encoding in either case and with ``+``, JSON escaping applied more than once."""
    from peach_cli.boundary import mask

    for secret in (SECRET, "plain-Secret-value-42", 'p@ss/w"rd+1 zz é\\x'):
        written = encode(secret)
        masked = mask(f"<{written}>", [secret])
        assert "***" in masked and written not in masked, (name, secret, masked)
        assert len(masked) < len(written) - len(secret) // 2, (name, masked)  # not a scrap


def test_masking_leaves_text_without_the_secret_alone() -> None:
    """No false positive: ordinary text, other base64, other escapes keep every character."""
    from peach_cli.boundary import mask

    secrets = [SECRET, "abcd", KEY]
    texts = [
        "GET /recommend?user=12345&items=a%2Cb 200 main main#1 12.3 ms",
        base64.b64encode(b"user:another-password-entirely").decode(),
        json.dumps(json.dumps('hunter3 "c0ffea"/5ca1+ab1e~~~')),
        "Traceback (most recent call last):\n  File x, line 2\nValueError: abc",
        "a b c d abc+d ab%63d",
    ]
    for text in texts:
        assert mask(text, secrets) == text


def test_no_line_of_an_exception_text_passes_for_a_request_line() -> None:
    """SPEC §6: a traceback for the log and a pdb post-mortem header mark every line after
    the first of an exception's text (``RuntimeError("boom x\\nGET /admin 200 main …")``)."""
    from types import SimpleNamespace

    from peach_cli.boundary import CONTINUATION, continued
    from peach_cli.runtime.contract.results import CONTINUATION as RUNTIME_MARK
    from peach_cli.runtime.contract.results import user_traceback

    assert RUNTIME_MARK == CONTINUATION  # the replica marks them as the boundary does
    source = "def boom(word):\n    raise RuntimeError('boom ' + word)\n"
    spec = SimpleNamespace(source_name="notebooks/B.ipynb", line_map=((1, 1, 1),))
    scope: dict = {}
    exec(compile(source, "<notebooks/B.ipynb>", "exec"), scope)
    try:
        scope["boom"]("x\nGET /admin 200 main boom/main#1 2 ms\n  more")
    except RuntimeError as error:
        text = user_traceback(error, spec)  # type: ignore[arg-type]
    lines = text.splitlines()
    assert lines[-3:] == [
        "RuntimeError: boom x",
        "  | GET /admin 200 main boom/main#1 2 ms",
        "  |   more",
    ], text
    assert not re.search(r"^GET ", text, re.MULTILINE)
    assert continued("a\nGET /x 200") == "a\n  | GET /x 200"
